"""Batched tensors built from dependency heads (and the words of the subword pieces) in the collater."""
import torch

from fairseq_syntax.syntax.side_values import (  # noqa: F401  (the collater's values)
    EOS_DISTANCE, EOS_WORD, HEAD_PAD, PAD_DISTANCE, WORD_PAD,
)


def tree_distances(heads: torch.Tensor) -> torch.Tensor:
    """All-pairs path lengths ``[B, N, N]`` long in each tree of ``heads`` ``[B, N]`` (-1 root, HEAD_PAD).

    ``R[i, k] = 1`` iff ``k`` is ``i`` or an ancestor; ``(R Rᵀ)[i, j] = depth(lca(i, j)) + 1`` gives
    ``d = depth(i) + depth(j) - 2 depth(lca)``: one walk per tree level and one batched matmul.
    """
    bsz, n = heads.shape
    real = heads.ne(HEAD_PAD)
    # parent pointers; roots and padding point to an extra sink position n, which stays put
    parent = torch.cat([heads.masked_fill(heads.lt(0), n), heads.new_full((bsz, 1), n)], dim=1)
    ancestors = torch.zeros(bsz, n, n + 1, dtype=torch.float32, device=heads.device)
    batch = torch.arange(bsz, device=heads.device).unsqueeze(1).expand(bsz, n)
    node = torch.arange(n, device=heads.device).unsqueeze(0).expand(bsz, n)
    current = node
    for _ in range(n):  # a tree over n positions is at most n - 1 levels deep
        ancestors[batch, node, current] = 1.0
        current = parent.gather(1, current)
        if bool(current.eq(n).all()):
            break
    ancestors = ancestors[..., :n]
    depth1 = ancestors.sum(-1)
    common = torch.bmm(ancestors, ancestors.transpose(1, 2))
    dist = (depth1.unsqueeze(2) + depth1.unsqueeze(1) - 2 * common).round().long()
    pair_real = real.unsqueeze(2) & real.unsqueeze(1)
    return dist.masked_fill(~pair_real, PAD_DISTANCE)


def word_distances(heads: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """Distances between words spread to their pieces, ``[B, N, N]`` long (DESIGN.md §2).

    ``heads`` ``[B, N]`` the projected heads side-file, ``words`` ``[B, N]`` each piece's word
    (:data:`EOS_WORD`, :data:`WORD_PAD`).  Pieces of words ``a``, ``b``: ``d(a, b)`` (0 within a word);
    eos to any piece :data:`EOS_DISTANCE`; padding :data:`PAD_DISTANCE`.  Continuation pieces and eos
    are leaves, so ``d(a, b)`` is read at the first pieces of :func:`tree_distances`.
    """
    real = words.ne(WORD_PAD)
    if not torch.equal(real, heads.ne(HEAD_PAD)):
        raise ValueError("the words and heads of a batch have different padding: the words "
                         "and heads side-files disagree on sentence lengths")
    bsz, n = words.shape
    pieces = tree_distances(heads)
    position = torch.arange(n, device=words.device).unsqueeze(0).expand(bsz, n)
    starts = torch.ones_like(real)
    starts[:, 1:] = words[:, 1:].ne(words[:, :-1])
    first = torch.where(starts, position, torch.zeros_like(position)).cummax(dim=1).values
    dist = pieces.gather(1, first.unsqueeze(2).expand(bsz, n, n))
    dist = dist.gather(2, first.unsqueeze(1).expand(bsz, n, n))
    eos = words.eq(EOS_WORD)
    dist = dist.masked_fill(eos.unsqueeze(2) ^ eos.unsqueeze(1), EOS_DISTANCE)
    dist = dist.masked_fill(eos.unsqueeze(2) & eos.unsqueeze(1), 0)
    pair_real = real.unsqueeze(2) & real.unsqueeze(1)
    return dist.masked_fill(~pair_real, PAD_DISTANCE)


def pad_rows(rows, length: int, pad_value: int, trailing_shape=()) -> torch.Tensor:
    """Stack 1-d (or ``[k, *trailing_shape]``) long tensors into ``[B, length, *trailing]``."""
    out = torch.full((len(rows), length, *trailing_shape), pad_value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : row.size(0)] = row
    return out
