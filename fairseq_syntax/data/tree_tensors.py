"""Batched tensors built from dependency heads (and the words of the subword pieces) in the collater."""
import torch

from fairseq_syntax.syntax.side_values import (  # noqa: F401  (the collater's values)
    EOS_DISTANCE, EOS_WORD, HEAD_PAD, PAD_DISTANCE, WORD_PAD,
)


def _path_lengths(heads: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """Path lengths ``[B, R, R]`` (float32) between the positions ``start`` ``[B, R]`` of each
    tree of ``heads`` ``[B, N]`` (-1 root, HEAD_PAD); ``start`` = N names no position.

    ``P[r, k] = 1`` iff ``k`` is ``start[r]`` or an ancestor; ``(P Pᵀ)[a, b] = depth(lca) + 1``
    gives ``d = depth(a) + depth(b) - 2 depth(lca)``: one walk per tree level, one batched matmul.
    """
    bsz, n = heads.shape
    # parent pointers; roots and padding point to an extra sink position n, which stays put
    parent = torch.cat([heads.masked_fill(heads.lt(0), n), heads.new_full((bsz, 1), n)], dim=1)
    steps = [start]
    for _ in range(n - 1):  # a tree over n positions is at most n - 1 levels deep
        steps.append(parent.gather(1, steps[-1]))
        if bool(steps[-1].eq(n).all()):
            break
    steps = torch.stack(steps).permute(1, 2, 0)
    on_path = torch.zeros(bsz, start.size(1), n + 1, device=heads.device)
    on_path = on_path.scatter_(2, steps, on_path.new_ones(()).expand(steps.shape))[..., :n]
    depth1 = on_path.sum(-1)
    return depth1.unsqueeze(2) + depth1.unsqueeze(1) - 2 * torch.bmm(on_path, on_path.transpose(1, 2))


def tree_distances(heads: torch.Tensor) -> torch.Tensor:
    """All-pairs path lengths ``[B, N, N]`` long in each tree of ``heads`` ``[B, N]`` (-1 root,
    HEAD_PAD), :data:`PAD_DISTANCE` at padding (:func:`_path_lengths` from every position)."""
    bsz, n = heads.shape
    real = heads.ne(HEAD_PAD)
    start = torch.arange(n, device=heads.device).expand(bsz, n)
    dist = _path_lengths(heads, start).round().long()
    pair_real = real.unsqueeze(2) & real.unsqueeze(1)
    return dist.masked_fill(~pair_real, PAD_DISTANCE)


KIND_DISTANCE = torch.tensor([[0.0, EOS_DISTANCE, PAD_DISTANCE],
                              [EOS_DISTANCE, 0.0, PAD_DISTANCE],
                              [PAD_DISTANCE, PAD_DISTANCE, PAD_DISTANCE]])
"""Distance between runs of each kind (word, eos, padding) in :func:`word_distances`; 0 between
two words, which the tree distance replaces."""


def word_distances(heads: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """Distances between words spread to their pieces, ``[B, N, N]`` long (DESIGN.md §2).

    ``heads`` ``[B, N]`` the projected heads side-file, ``words`` ``[B, N]`` each piece's word
    (:data:`EOS_WORD`, :data:`WORD_PAD`).  Pieces of words ``a``, ``b``: ``d(a, b)`` (0 within a word);
    eos to any piece :data:`EOS_DISTANCE`; padding :data:`PAD_DISTANCE`.  Continuation pieces and eos
    are leaves, so ``d(a, b)`` is read at the first pieces of the runs of equal words: the ``[B, R, R]``
    table over runs is :func:`_path_lengths` from those first pieces between words and :data:`KIND_DISTANCE`
    otherwise, and one gather per dimension spreads it to the pieces.  Exact small integers in
    float32 until the table is made long.
    """
    real = words.ne(WORD_PAD)
    if not torch.equal(real, heads.ne(HEAD_PAD)):
        raise ValueError("the words and heads of a batch have different padding: the words "
                         "and heads side-files disagree on sentence lengths")
    bsz, n = words.shape
    device = words.device
    starts = torch.ones_like(real)
    starts[:, 1:] = words[:, 1:].ne(words[:, :-1])
    run = starts.cumsum(dim=1).sub_(1)  # each position's run of equal words (eos, padding: own runs)
    runs = int(run[:, -1].max()) + 1
    position = torch.arange(n, device=device).expand(bsz, n)
    first = torch.full((bsz, runs), n, device=device).scatter_reduce_(1, run, position, "amin")
    tree = _path_lengths(heads, first)
    run_word = torch.full((bsz, runs), WORD_PAD, dtype=words.dtype, device=device).scatter_(1, run, words)
    kind = run_word.eq(EOS_WORD).long() + 2 * run_word.eq(WORD_PAD).long()  # word 0, eos 1, padding 2
    one_hot = torch.zeros(bsz, runs, 3, device=device).scatter_(2, kind.unsqueeze(2), 1.0)
    word = one_hot[..., 0]
    table = tree * (word.unsqueeze(2) * word.unsqueeze(1)) + torch.bmm(
        one_hot @ KIND_DISTANCE.to(device), one_hot.transpose(1, 2))
    table = table.long()
    return table.gather(1, run.unsqueeze(2).expand(bsz, n, runs)).gather(2, run.unsqueeze(1).expand(bsz, n, n))


def pad_rows(rows, length: int, pad_value: int, trailing_shape=(), lengths=None) -> torch.Tensor:
    """Stack 1-d (or ``[k, *trailing_shape]``) long tensors into ``[B, length, *trailing]``: one
    concatenation copied under a mask of the row ``lengths`` (computed when not given)."""
    out = torch.full((len(rows), length, *trailing_shape), pad_value, dtype=torch.long)
    if len(rows):
        if lengths is None:
            lengths = [row.size(0) for row in rows]
        filled = torch.arange(length) < torch.tensor(lengths).unsqueeze(1)
        out[filled] = torch.cat(rows).long()
    return out
