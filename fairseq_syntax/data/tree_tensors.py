"""Batched tensors built from dependency heads (and the words of the subword pieces) in the collater."""
from typing import NamedTuple, Sequence

import numpy as np
import torch

from fairseq_syntax.syntax.side_values import (  # noqa: F401  (the collater's values)
    EOS_DISTANCE, EOS_WORD, HEAD_PAD, PAD_DISTANCE, WORD_PAD,
)

DISTANCE_DTYPE = np.int16
"""dtype of the distance matrices: every value fits (:data:`EOS_DISTANCE`, :data:`PAD_DISTANCE`
and path lengths, below the source width, which :func:`_ancestor_sets` checks), in a quarter of
int64's memory (the batch's largest tensor, ``[B, S, S]``)."""


def _ancestor_sets(heads: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Bitsets ``[C, B, R]`` uint64 (``C = ceil(N / 64)`` chunks, chunk-major) of ``start[b, r]``
    and its ancestors in the tree of ``heads`` ``[B, N]`` (-1 root, HEAD_PAD): bit ``k`` of a set
    is position ``k``. Pointer doubling over the flat batch, roots and padding pointing to
    themselves: after round ``t`` a position's set holds its first ``2^t`` steps towards the root
    (a cycle of hostile heads gives its nodes, as any longer walk would)."""
    bsz, n = heads.shape
    if n > np.iinfo(DISTANCE_DTYPE).max:
        raise ValueError(f"a batch {n} source positions wide: its distances would not fit "
                         f"{DISTANCE_DTYPE.__name__}")
    position = np.arange(n)
    own = np.zeros(((n + 63) // 64, n), dtype=np.uint64)
    own[position // 64, position] = np.left_shift(np.uint64(1), (position % 64).astype(np.uint64))
    sets = np.tile(own, bsz)
    flat = np.arange(bsz * n).reshape(bsz, n)
    parent = np.where(heads < 0, flat, heads + flat[:, :1]).ravel()
    for _ in range(max(1, (n - 1).bit_length())):
        sets |= np.take(sets, parent, axis=1)
        grandparent = parent[parent]
        if np.array_equal(grandparent, parent):  # every walk has reached its root
            break
        parent = grandparent
    return np.take(sets, (start + flat[:, :1]).ravel(), axis=1).reshape(-1, bsz, start.shape[1])


def _set_distances(sets: np.ndarray) -> np.ndarray:
    """``|A_i Δ A_j|`` ``[B, R, R]`` :data:`DISTANCE_DTYPE` of the bitsets ``[C, B, R]``: with
    ancestor sets that hold the node itself, the tree path length ``depth(i) + depth(j) - 2
    depth(lca)``; chunk by chunk, the popcount of the XOR."""
    first, *rest = sets
    dist = np.bitwise_count(first[:, :, None] ^ first[:, None, :]).astype(DISTANCE_DTYPE)
    for x in rest:
        dist += np.bitwise_count(x[:, :, None] ^ x[:, None, :])
    return dist


def _pad_rows_and_columns(dist: np.ndarray, real: np.ndarray) -> torch.Tensor:
    """``dist`` with :data:`PAD_DISTANCE` at every row and column that is not ``real``."""
    dist[~real] = PAD_DISTANCE
    dist.transpose(0, 2, 1)[~real] = PAD_DISTANCE
    return torch.from_numpy(dist)


def tree_distances(heads: torch.Tensor) -> torch.Tensor:
    """All-pairs path lengths ``[B, N, N]`` int16 in each tree of ``heads`` ``[B, N]`` (-1 root,
    HEAD_PAD), :data:`PAD_DISTANCE` at padding."""
    h = heads.numpy()
    start = np.broadcast_to(np.arange(h.shape[1]), h.shape)
    return _pad_rows_and_columns(_set_distances(_ancestor_sets(h, start)), h != HEAD_PAD)


def word_distances(heads: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """Distances between words spread to their pieces, ``[B, N, N]`` int16 (docs/design.md §3.3).

    ``heads`` ``[B, N]`` the projected heads side-file, ``words`` ``[B, N]`` each piece's word
    (:data:`EOS_WORD`, :data:`WORD_PAD`).  Pieces of words ``a``, ``b``: ``d(a, b)`` (0 within a
    word), read between the first pieces of the runs of equal words (continuation pieces and eos
    are leaves); eos to any piece :data:`EOS_DISTANCE` (0 to itself); padding :data:`PAD_DISTANCE`.
    ``d(a, b) = |A_a Δ A_b|`` of the ancestor sets (:func:`_ancestor_sets`, popcounts).
    """
    h, w = heads.numpy(), words.numpy()
    real = w != WORD_PAD
    if not np.array_equal(real, h != HEAD_PAD):
        raise ValueError("the words and heads of a batch have different padding: the words "
                         "and heads side-files disagree on sentence lengths")
    n = w.shape[1]
    starts = np.ones_like(real)
    starts[:, 1:] = w[:, 1:] != w[:, :-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0), axis=1)  # of each run
    eos = w == EOS_WORD
    sets = _ancestor_sets(h, first)
    sets[:, eos] = 0
    dist = _set_distances(sets)
    batch, position = np.nonzero(eos)
    to_eos = np.where(eos[batch], 0, EOS_DISTANCE)
    dist[batch, position] = to_eos
    dist[batch, :, position] = to_eos
    return _pad_rows_and_columns(dist, real)


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
    values = rows.values[index] if len(rows.values) else np.zeros(index.shape, dtype=np.int64)
    return torch.from_numpy(np.where(filled, values, np.int64(pad_value)))  # int64, as fairseq's
