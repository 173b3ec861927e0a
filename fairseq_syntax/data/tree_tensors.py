"""Batched tensors built from dependency heads in the collater."""
import torch

HEAD_PAD = -2
"""Value of ``src_heads`` at padding positions (``-1`` marks the root)."""

PAD_DISTANCE = 10_000
"""Value of ``src_distances`` wherever a row or column is padding: larger than any
real path length, so a test "within syntax distance n" excludes padding by itself."""


def tree_distances(heads: torch.Tensor) -> torch.Tensor:
    """All-pairs path lengths in each dependency tree of a batch.

    ``heads``: ``[B, N]`` long, the head index of each position, ``-1`` for the root,
    :data:`HEAD_PAD` for padding. Returns ``[B, N, N]`` long distances.

    With ``R[i, k] = 1`` iff ``k`` is an ancestor of ``i`` or ``i`` itself (the reflexive
    transitive closure of the head relation, by repeated squaring), ``depth(i) + 1 =
    Σ_k R[i, k]`` and ``(R Rᵀ)[i, j] = depth(lca(i, j)) + 1`` (the common ancestors), so
    ``d(i, j) = depth(i) + depth(j) - 2 depth(lca(i, j))``: a few batched matmuls, no
    Python loop over sentences or nodes.
    """
    bsz, n = heads.shape
    real = heads.ne(HEAD_PAD)
    has_head = heads.ge(0)
    eye = torch.eye(n, dtype=torch.float32, device=heads.device).expand(bsz, n, n)
    closure = eye.clone()
    rows = has_head.nonzero(as_tuple=True)
    closure[rows[0], rows[1], heads[rows]] = 1.0
    for _ in range(max(1, (n - 1).bit_length())):
        closure = (torch.bmm(closure, closure) > 0.5).float()
    depth1 = closure.sum(-1)
    common = torch.bmm(closure, closure.transpose(1, 2))
    dist = (depth1.unsqueeze(2) + depth1.unsqueeze(1) - 2 * common).round().long()
    pair_real = real.unsqueeze(2) & real.unsqueeze(1)
    return dist.masked_fill(~pair_real, PAD_DISTANCE)


def pad_rows(rows, length: int, pad_value: int, trailing_shape=()) -> torch.Tensor:
    """Stack 1-d (or ``[k, *trailing_shape]``) long tensors into ``[B, length, *trailing]``."""
    out = torch.full((len(rows), length, *trailing_shape), pad_value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : row.size(0)] = row
    return out
