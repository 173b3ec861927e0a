"""The gold attention matrix ``A*`` of supervised attention (Mi et al. 2016, §3.1-3.2, Fig. 2).

From the links ``(i, t)`` of a batch: (1) ``B[t, i] = 1`` per link; (2) ``smoothed``: each link
spreads ``exp(-(k - i)² / 2σ²)`` over the source words ``|k - i| <= w``; (3) an unaligned target
word, and the target eos, go to the source eos; (4) rows sum to 1.  ``docs/design.md`` §7
says why each step is so.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def _span(nonpad: Tensor) -> Tuple[Tensor, Tensor]:
    """First non-padding position and length of each row of a ``[B, L]`` mask."""
    lengths = nonpad.sum(dim=1)
    first = nonpad.long().argmax(dim=1)  # the first True (0 for an all-padding row)
    return first, lengths


def link_positions(
    alignment_links: Tensor,
    src_nonpad: Tensor,
    tgt_nonpad: Tensor,
    sample_ids: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Padded ``(batch, target, source)`` positions of ``[B, K, 2]`` sentence-relative
    ``(source, target)`` links (padding ``-1``).

    Sentence-relative index ``i`` is the i-th non-padding position, so left and right
    padding both work. A link beyond the sentence (eos included: source index ``n`` is
    the source eos) raises ``ValueError`` naming the sentence id.
    """
    bsz = alignment_links.size(0)
    src_first, src_len = _span(src_nonpad)
    tgt_first, tgt_len = _span(tgt_nonpad)
    src_i = alignment_links[..., 0]
    tgt_j = alignment_links[..., 1]
    valid = (src_i >= 0) & (tgt_j >= 0)
    bad = valid & ((src_i >= src_len[:, None]) | (tgt_j >= tgt_len[:, None]))
    if bad.any():
        b, k = (int(x) for x in bad.nonzero()[0])
        sid = int(sample_ids[b]) if sample_ids is not None else b
        raise ValueError(
            f"sentence {sid}: alignment link {int(src_i[b, k])}-{int(tgt_j[b, k])} is out of "
            f"range: the source has {int(src_len[b])} positions and the target "
            f"{int(tgt_len[b])} (0-based, eos included)"
        )
    batch = torch.arange(bsz, device=alignment_links.device)[:, None].expand_as(src_i)
    return batch[valid], (tgt_j + tgt_first[:, None])[valid], (src_i + src_first[:, None])[valid]


def flat_alignment_positions(
    alignments: Tensor, tgt_width: int, src_nonpad: Tensor, tgt_nonpad: Tensor
) -> Tuple[Tensor, Tensor, Tensor]:
    """Positions of fairseq's collated ``sample["alignments"]`` ``[N, 2]``: column 0 is
    the padded source position, column 1 is ``b * T + padded target position``."""
    src = alignments[:, 0].long()
    batch = torch.div(alignments[:, 1].long(), tgt_width, rounding_mode="floor")
    tgt = alignments[:, 1].long() - batch * tgt_width
    if len(src) and not bool((src_nonpad[batch, src] & tgt_nonpad[batch, tgt]).all()):
        raise ValueError("sample['alignments'] has a link on a padding position")
    return batch, tgt, src


def gaussian_kernel(window: int, sigma: float, device=None) -> Tensor:
    """``exp(-d² / 2σ²)`` for ``d = -window .. window``."""
    d = torch.arange(-window, window + 1, dtype=torch.float32, device=device)
    return torch.exp(-(d * d) / (2.0 * sigma * sigma))


def gold_attention(
    batch_idx: Tensor,
    tgt_pos: Tensor,
    src_pos: Tensor,
    src_nonpad: Tensor,
    tgt_nonpad: Tensor,
    transform: str = "simple",
    window: int = 2,
    sigma: float = 0.5,
    normalize: bool = True,
) -> Tensor:
    """The gold matrix ``A*`` ``[B, T, S]`` (float32) from padded link positions.

    Steps 1-4 of the module docstring; ``normalize=False`` skips step 4 (to inspect the
    smoothed counts). Padding rows and columns are zero.
    """
    bsz, src_width = src_nonpad.shape
    tgt_width = tgt_nonpad.size(1)
    device = src_nonpad.device
    gold = torch.zeros(bsz, tgt_width, src_width, dtype=torch.float32, device=device)
    gold[batch_idx, tgt_pos, src_pos] = 1.0
    src_first, src_len = _span(src_nonpad)
    tgt_first, tgt_len = _span(tgt_nonpad)
    src_eos = (src_first + src_len - 1).clamp(min=0)
    tgt_eos = (tgt_first + tgt_len - 1).clamp(min=0)
    rows = torch.arange(bsz, device=device)
    if transform == "smoothed":
        words = src_nonpad.clone()
        words[rows, src_eos] = False
        words = words.to(gold.dtype)[:, None, :]
        kernel = gaussian_kernel(window, sigma, device).view(1, 1, -1)
        spread = F.conv1d((gold * words).view(-1, 1, src_width), kernel, padding=window)
        gold = spread.view(bsz, tgt_width, src_width) * words + gold * (1.0 - words)
    elif transform != "simple":
        raise ValueError(f"unknown alignment transform {transform!r}")
    gold = gold * tgt_nonpad[:, :, None].to(gold.dtype) * src_nonpad[:, None, :].to(gold.dtype)
    # Target eos -> source eos with probability one; unaligned target words -> source eos.
    gold[rows, tgt_eos] = 0.0
    unaligned = tgt_nonpad & (gold.sum(dim=2) == 0)
    eos_column = torch.zeros_like(gold[:, 0, :])
    eos_column[rows, src_eos] = 1.0
    gold = torch.where(unaligned[:, :, None], eos_column[:, None, :], gold)
    if normalize:
        gold = gold / gold.sum(dim=2, keepdim=True).clamp(min=1e-12)
    return gold
