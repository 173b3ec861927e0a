"""Head-word selection layers over the BiLSTM encoder, Tran & Bisk (2018) §4.1, §4.3, §5.2.

Encoder extensions (:class:`~fairseq_syntax.modules.rnn_encoder.RNNEncoder`) that add, batch-first,
``syntax_annotations`` ``[B, S, C]`` (each position's expected head word; with ``one_set``,
SA-NMT-1set eq. 16, the annotations become ``x_m + σ(W_z x_m) ⊙ s_m`` instead),
``head_marginals`` ``[B, S, S]`` (``[b, h, m] = P(h → m)``) and ``root_marginals`` ``[B, S]``.

Scores as in the authors' code (github.com/ketranm/sa-nmt): ``s[h, m] = q_h · k_m / √d``,
``r[m] = q_root · k_m / √d``.  SA-NMT: matrix-tree marginals (eqs. 5-9,
:func:`~fairseq_syntax.modules.matrix_tree.dependency_marginals`).  ``clamp=(-5, 7)`` as the
authors' code (sa_nmt* default): unclamped float32 Laplacians went singular in 3 of 6 synthetic
runs (scores ±187).  FA-NMT: ``softmax_h(q_m · k_h / √d)``, self included.  Either way
``s_m = Σ_h α[m, h] v_h`` with ``α[m, h] = P(h → m) + δ(h, m)·P(root → m)``: the root takes its
own value.  The tree spans the words: padding and the final eos get zero marginals and annotations.
SA-NMT-hard (eq. 15): one-hot greedy heads with a straight-through gradient; marginals stay soft.
"""
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .matrix_tree import dependency_marginals

__all__ = [
    "word_mask", "head_weights", "straight_through_heads", "StructuredSelfAttention",
    "FlatSelfAttention", "ARC_SCORE_CLAMP",
]


ARC_SCORE_CLAMP = (-5.0, 7.0)  # the authors' code (github.com/ketranm/sa-nmt, TreeAttention)


def word_mask(padding_mask: Tensor) -> Tensor:
    """``[B, S]`` True at the source words: not padding, not the final eos (right padding)."""
    lengths = (~padding_mask).sum(dim=1, keepdim=True)
    positions = torch.arange(padding_mask.size(1), device=padding_mask.device).unsqueeze(0)
    return positions < lengths - 1


def head_weights(head_marginals: Tensor, root_marginals: Tensor) -> Tensor:
    """``α[b, m, h] = P(h → m) + δ(h, m)·P(root → m)``, ``[B, S, S]``."""
    return head_marginals.transpose(1, 2) + torch.diag_embed(root_marginals)


class _StraightThrough(torch.autograd.Function):
    """Forward the hard tensor exactly, backward the gradient to the soft one (``hard + soft -
    soft.detach()`` would round the one-hot entries).
    """

    @staticmethod
    def forward(ctx, soft: Tensor, hard: Tensor) -> Tensor:
        return hard.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, None


def straight_through_heads(weights: Tensor, mask: Tensor) -> Tensor:
    """``onehot(argmax_h α[m, h])`` (eq. 15), identity gradient (Bengio et al. 2013); ``[B, S, S]``."""
    with torch.no_grad():
        index = weights.argmax(dim=-1, keepdim=True)
        hard = torch.zeros_like(weights).scatter_(-1, index, 1.0)
        hard = hard * mask.unsqueeze(-1).to(hard.dtype)
    return _StraightThrough.apply(weights, hard)


class _HeadSelection(nn.Module):
    """Shared machinery: projections, head weights -> annotations, 1set fusion."""

    def __init__(self, input_dim: int, attention_dim: Optional[int] = None, hard: bool = False,
                 one_set: bool = False, dropout: float = 0.0):
        super().__init__()
        attention_dim = attention_dim or input_dim
        self.query = nn.Linear(input_dim, attention_dim, bias=False)
        self.key = nn.Linear(input_dim, attention_dim, bias=False)
        self.value = nn.Linear(input_dim, input_dim, bias=False)
        self.scale = 1.0 / math.sqrt(attention_dim)
        self.hard = hard
        self.one_set = one_set
        self.dropout = dropout
        # SA-NMT-1set (eq. 16): x + σ(W_z x) ⊙ s, W_z without bias as in the authors' code
        self.fuse_gate = nn.Linear(input_dim, input_dim, bias=False) if one_set else None

    def marginals(self, x: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        """``(head_marginals [B, S, S] (h, m), root_marginals [B, S])`` over the words ``mask``."""
        raise NotImplementedError

    def forward(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        x = encoder_out["annotations"]
        mask = word_mask(encoder_out["padding_mask"])
        head, root = self.marginals(x, mask)
        weights = head_weights(head, root).to(x.dtype)
        if self.hard:
            weights = straight_through_heads(weights, mask)
        syntax = torch.bmm(weights, self.value(x))  # s_m = Σ_h α[m, h] v_h
        out = dict(encoder_out)
        if self.one_set:
            out["annotations"] = x + torch.sigmoid(self.fuse_gate(x)) * syntax
        else:
            out["syntax_annotations"] = F.dropout(syntax, p=self.dropout, training=self.training)
        out["head_marginals"] = head
        out["root_marginals"] = root
        return out


class StructuredSelfAttention(_HeadSelection):
    """SA-NMT (§4.1; hard §4.3): head weights are matrix-tree marginals."""

    def __init__(self, input_dim: int, attention_dim: Optional[int] = None, hard: bool = False,
                 one_set: bool = False, dropout: float = 0.0,
                 clamp: Optional[Tuple[float, float]] = None):
        super().__init__(input_dim, attention_dim, hard, one_set, dropout)
        dim = self.query.out_features
        self.root_query = nn.Parameter(torch.empty(dim).normal_(0.0, dim ** -0.5))
        if clamp is not None and not clamp[0] < clamp[1]:
            raise ValueError(f"the arc-score clamp needs min < max, got {tuple(clamp)}")
        self.clamp = None if clamp is None else (float(clamp[0]), float(clamp[1]))

    def scores(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """``(s [B, S, S] (h, m), r [B, S])`` scaled, clamped to ``self.clamp`` when set."""
        q, k = self.query(x), self.key(x)
        head_scores = torch.bmm(q, k.transpose(1, 2)) * self.scale  # [b, h, m] = q_h·k_m/√d
        root_scores = torch.matmul(k, self.root_query) * self.scale  # [b, m] = q_root·k_m/√d
        if self.clamp is not None:
            head_scores = head_scores.clamp(*self.clamp)
            root_scores = root_scores.clamp(*self.clamp)
        return head_scores, root_scores

    def marginals(self, x: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        return dependency_marginals(*self.scores(x), mask)


class FlatSelfAttention(_HeadSelection):
    """FA-NMT (§5.2): ``softmax_h(q_m · k_h / √d)``; the self weight is reported as the root marginal."""

    def __init__(self, input_dim: int, attention_dim: Optional[int] = None,
                 one_set: bool = False, dropout: float = 0.0):
        super().__init__(input_dim, attention_dim, False, one_set, dropout)

    def marginals(self, x: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        q, k = self.query(x), self.key(x)
        scores = torch.bmm(q, k.transpose(1, 2)).float() * self.scale  # [b, m, h]
        # a large finite fill, not -inf: a row without words (an eos-only source) must not
        # produce NaN, whose gradient would leak through the masking below
        scores = scores.masked_fill(~mask.unsqueeze(1), -1e9)
        weights = torch.softmax(scores, dim=-1)
        weights = torch.where(mask.unsqueeze(2), weights, torch.zeros_like(weights))
        weights = weights.to(x.dtype)
        root = torch.diagonal(weights, dim1=1, dim2=2)
        head = (weights - torch.diag_embed(root)).transpose(1, 2)  # [b, h, m] for h ≠ m
        return head, root
