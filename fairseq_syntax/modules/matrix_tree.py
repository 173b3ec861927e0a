"""Matrix-tree marginals of single-root non-projective dependency trees, batched and masked.

``P(tree) ∝ exp(Σ_{h→m} s[h, m] + r[root])``; Koo et al. (2007) §3.3, Tran & Bisk (2018) §3,
restated in docs/design.md §6 (the paper's text lost the equations)::

    A = exp(s) off the diagonal;  L = diag(Σ_h A[h, m]) - A;  L̂ = L, row f := exp(r);  Z = det L̂
    P(h → m) = A[h,m]·(1-δ(m,f))·L̂⁻¹[m,m] - A[h,m]·(1-δ(h,f))·L̂⁻¹[m,h]
    P(root → m) = exp(r[m])·L̂⁻¹[m,f]

* Closed form (one batched ``inv``), not autograd of logdet: no double backward, works under no_grad.
* Masking: ``A`` is 0 at padding, the padded diagonal 1; ``f`` is the first real token, so padding
  may be anywhere.  Padded outputs are exactly 0; an empty sentence has ``log Z = 0``.
* Shift: ``c[m]`` = max incoming score of ``m`` (detached) is subtracted from column ``m``: same
  marginals, no overflow, ``log Z = log det L̂ + Σ c``.  No clamping (the reference clamps to
  [-5, 7]); ``-inf`` scores are fine while every token keeps one finite incoming score.
* Precision: float64 stays float64, anything else runs in float32 with autocast off, cast back.
* CUDA: the LU factorisation goes through cuSOLVER/cuBLAS (:func:`_lu_backend`), not MAGMA.
"""

import contextlib
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["dependency_marginals", "log_partition"]


def _check_inputs(
    head_scores: Tensor, root_scores: Tensor, mask: Optional[Tensor]
) -> Tensor:
    if head_scores.dim() != 3 or head_scores.size(1) != head_scores.size(2):
        raise ValueError(
            f"head_scores must have shape [B, N, N], got {tuple(head_scores.shape)}"
        )
    bsz, n = head_scores.shape[:2]
    if tuple(root_scores.shape) != (bsz, n):
        raise ValueError(
            f"root_scores must have shape [B, N] = {(bsz, n)}, got {tuple(root_scores.shape)}"
        )
    if mask is None:
        return torch.ones(bsz, n, dtype=torch.bool, device=head_scores.device)
    if tuple(mask.shape) != (bsz, n):
        raise ValueError(f"mask must have shape [B, N] = {(bsz, n)}, got {tuple(mask.shape)}")
    return mask.to(device=head_scores.device, dtype=torch.bool)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@contextlib.contextmanager
def _lu_backend(device: torch.device):
    """Factor CUDA matrices with cuSOLVER/cuBLAS while inside. PyTorch's default may take
    MAGMA's batched LU for a batch of matrices, which stopped sa_transformer on Multi30k
    in its second or third epoch, twice, with "misaligned address" in
    ``apply_lu_factor_batched_magma`` (H200, torch 2.11). The CPU has one LAPACK: nothing to do."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("cusolver")
    try:
        yield
    finally:
        torch.backends.cuda.preferred_linalg_library(old)


def _shifted_laplacian(head_scores: Tensor, root_scores: Tensor, mask: Tensor):
    """Masked, column-shifted ``L̂`` (autocast off, compute dtype).

    Returns ``(L_hat, A, R, first, replace_row, shift)``: ``A = exp(s - c)`` on real arcs,
    ``R = exp(r - c)``, ``first`` the replaced row, ``shift`` = ``c`` (0 at padding).
    """
    bsz, n, _ = head_scores.shape
    eye = torch.eye(n, dtype=torch.bool, device=head_scores.device)
    # arc h -> m is real iff both ends are real tokens and h != m
    arc_ok = mask.unsqueeze(2) & mask.unsqueeze(1) & ~eye

    neg_inf = torch.tensor(float("-inf"), dtype=head_scores.dtype, device=head_scores.device)
    s = torch.where(arc_ok, head_scores, neg_inf)
    r = torch.where(mask, root_scores, neg_inf)

    # per-modifier shift: max over incoming scores (heads and root) of each m
    with torch.no_grad():
        shift = torch.maximum(s.amax(dim=1), r)
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))

    # exp(-inf) = 0 zeroes padding / the diagonal without NaN-prone masking of
    # the gradient (torch.where routes no gradient to the unselected branch).
    A = torch.exp(s - shift.unsqueeze(1))
    R = torch.exp(r - shift)

    # L = diag(column sums) - A, identity on the padded diagonal
    pad_diag = (~mask).to(A.dtype)
    L = torch.diag_embed(A.sum(dim=1) + pad_diag) - A

    # Koo et al. (2007): replace the first (real) row by the root weights
    first = mask.to(torch.uint8).argmax(dim=1)  # first True; 0 if none
    has_tokens = mask.any(dim=1)
    replace_row = (torch.arange(n, device=mask.device).unsqueeze(0) == first.unsqueeze(1))
    replace_row = replace_row & has_tokens.unsqueeze(1)  # [B, N]
    L_hat = torch.where(replace_row.unsqueeze(2), R.unsqueeze(1).expand(bsz, n, n), L)
    return L_hat, A, R, first, replace_row, shift


def dependency_marginals(
    head_scores: Tensor,
    root_scores: Tensor,
    mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Arc and root marginals (module docstring), ``∂ log Z / ∂ s`` and ``∂ log Z / ∂ r``.

    ``head_scores`` ``[B, N, N]`` (head ``h`` → modifier ``m``, diagonal ignored), ``root_scores``
    ``[B, N]``, ``mask`` ``[B, N]`` True for real tokens (None: all).  Returns ``(edge [B, N, N],
    root [B, N])``: each real column of ``edge`` plus ``root`` sums to 1; padding and diagonal are 0.
    """
    mask = _check_inputs(head_scores, root_scores, mask)
    out_dtype = torch.promote_types(head_scores.dtype, root_scores.dtype)
    dtype = _compute_dtype(out_dtype)
    with torch.autocast(device_type=head_scores.device.type, enabled=False):
        L_hat, A, R, first, replace_row, _ = _shifted_laplacian(
            head_scores.to(dtype), root_scores.to(dtype), mask
        )
        with _lu_backend(L_hat.device):
            L_inv = torch.linalg.inv(L_hat)  # L_inv[b, i, j]
        not_first = (~replace_row).to(dtype)  # 1 - δ(., f)
        diag = torch.diagonal(L_inv, dim1=-2, dim2=-1)  # L̂⁻¹[m, m], indexed by m
        # term1[h, m] = A[h,m]·(1-δ(m,f))·L̂⁻¹[m,m]
        # term2[h, m] = A[h,m]·(1-δ(h,f))·L̂⁻¹[m,h]
        edge = A * (not_first * diag).unsqueeze(1) - A * not_first.unsqueeze(2) * L_inv.transpose(
            1, 2
        )
        # root[m] = R[m]·L̂⁻¹[m, f]
        col_f = L_inv.gather(2, first.view(-1, 1, 1).expand(-1, L_inv.size(1), 1)).squeeze(2)
        root = R * col_f
    return edge.to(out_dtype), root.to(out_dtype)


def log_partition(
    head_scores: Tensor,
    root_scores: Tensor,
    mask: Optional[Tensor] = None,
) -> Tensor:
    """``log Z`` ``[B]`` (``det L̂``, Koo et al. 2007); same arguments as :func:`dependency_marginals`."""
    mask = _check_inputs(head_scores, root_scores, mask)
    out_dtype = torch.promote_types(head_scores.dtype, root_scores.dtype)
    dtype = _compute_dtype(out_dtype)
    with torch.autocast(device_type=head_scores.device.type, enabled=False):
        L_hat, _, _, _, _, shift = _shifted_laplacian(
            head_scores.to(dtype), root_scores.to(dtype), mask
        )
        with _lu_backend(L_hat.device):
            _, logabsdet = torch.linalg.slogdet(L_hat)
        log_z = logabsdet + shift.sum(dim=1)
    return log_z.to(out_dtype)
