"""Batched tensors built from dependency heads (and the words of the subword pieces) in the collater."""
from typing import NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fairseq_syntax.syntax.side_values import (  # noqa: F401  (the collater's values)
    EOS_DISTANCE, EOS_WORD, HEAD_PAD, PAD_DISTANCE, WORD_PAD,
)


def _on_path(heads: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """``P [B, R, N]`` float32: ``P[r, k] = 1`` iff ``k`` is ``start[r]`` or one of its ancestors in
    the tree of ``heads`` ``[B, N]`` (-1 root, HEAD_PAD); ``start`` ``[B, R]``, N names no position.
    One walk per tree level."""
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
    return on_path.scatter_(2, steps, on_path.new_ones(()).expand(steps.shape))[..., :n]


def _path_lengths(heads: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """Path lengths ``[B, R, R]`` (float32) between the positions ``start`` ``[B, R]``:
    ``(P Pᵀ)[a, b] = depth(lca) + 1`` of :func:`_on_path` gives
    ``d = depth(a) + depth(b) - 2 depth(lca)`` in one batched matmul."""
    on_path = _on_path(heads, start)
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
"""Distance between pieces of each kind (word, eos, padding) in :func:`word_distances`; 0 between
two words, whose tree distance is added."""


def word_distances(heads: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """Distances between words spread to their pieces, ``[B, N, N]`` long (DESIGN.md §2).

    ``heads`` ``[B, N]`` the projected heads side-file, ``words`` ``[B, N]`` each piece's word
    (:data:`EOS_WORD`, :data:`WORD_PAD`).  Pieces of words ``a``, ``b``: ``d(a, b)`` (0 within a word);
    eos to any piece :data:`EOS_DISTANCE` (0 to itself); padding :data:`PAD_DISTANCE`.  Continuation
    pieces and eos are leaves, so ``d(a, b)`` is read between the first pieces of the runs of equal
    words.  All of it is one bilinear form, one batched matmul: with ``p_i`` the first piece's
    :func:`_on_path` row and ``a_i = |p_i|`` for word pieces (0 otherwise), ``w_i`` [word piece] and
    ``k_i`` the kind one-hot, ``D_ij = a_i w_j + w_i a_j - 2 p_i·p_j + k_iᵀ KIND k_j``.  Exact small
    integers in float32 until made long.
    """
    real = words.ne(WORD_PAD)
    if not torch.equal(real, heads.ne(HEAD_PAD)):
        raise ValueError("the words and heads of a batch have different padding: the words "
                         "and heads side-files disagree on sentence lengths")
    bsz, n = words.shape
    starts = torch.ones_like(real)
    starts[:, 1:] = words[:, 1:].ne(words[:, :-1])
    position = torch.arange(n, device=words.device).expand(bsz, n)
    first = torch.where(starts, position, 0).cummax(dim=1).values  # first piece of each run
    kind = F.one_hot(words.eq(EOS_WORD).long() + 2 * (~real).long(), 3).float()  # word, eos, pad
    word = kind[..., :1]
    on_path = _on_path(heads, first) * word
    depth = on_path.sum(-1, keepdim=True)
    left = torch.cat([on_path, depth, word, kind], dim=2)
    right = torch.cat([-2 * on_path, word, depth, kind @ KIND_DISTANCE.to(kind.device)], dim=2)
    return torch.bmm(left, right.transpose(1, 2)).long()


class BatchRows(NamedTuple):
    """The rows of one side input for a batch, in batch order: row ``b`` is
    ``values[starts[b] : starts[b] + lengths[b]]`` (``values`` flat, e.g. a side-file's memory map)."""

    values: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[torch.Tensor]) -> "BatchRows":
        """From a list of 1-d rows (raw input, tests)."""
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        values = torch.cat(list(rows)).numpy() if len(rows) else np.zeros(0, dtype=np.int64)
        return cls(values, np.cumsum(lengths) - lengths, lengths)


def pad_rows(rows: BatchRows, width: int, pad_value: int) -> torch.Tensor:
    """``[B, width]`` long: row ``b`` then ``pad_value``; one gather from ``rows.values``."""
    column = np.arange(width)
    filled = column < rows.lengths[:, None]
    index = np.where(filled, rows.starts[:, None] + column, 0)
    values = (rows.values[index] if len(rows.values) else np.zeros(index.shape)).astype(np.int64)
    return torch.from_numpy(np.where(filled, values, np.int64(pad_value)))
