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

    With ``R[i, k] = 1`` iff ``k`` is an ancestor of ``i`` or ``i`` itself, ``depth(i) + 1 =
    Σ_k R[i, k]`` and ``(R Rᵀ)[i, j] = depth(lca(i, j)) + 1`` (the common ancestors), so
    ``d(i, j) = depth(i) + depth(j) - 2 depth(lca(i, j))``. ``R`` is filled by walking
    every position of the batch up to its root at once (one step per tree level), and
    ``R Rᵀ`` is one batched matmul: no Python loop over sentences or nodes.
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


def pad_rows(rows, length: int, pad_value: int, trailing_shape=()) -> torch.Tensor:
    """Stack 1-d (or ``[k, *trailing_shape]``) long tensors into ``[B, length, *trailing]``."""
    out = torch.full((len(rows), length, *trailing_shape), pad_value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : row.size(0)] = row
    return out
