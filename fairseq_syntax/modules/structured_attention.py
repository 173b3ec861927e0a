"""Head-word selection layers on top of the BiLSTM encoder (Tran & Bisk 2018, §4.1, §4.3, §5.2).

Tran & Bisk (2018), "Inducing Grammars with and for Neural Machine Translation". Each
layer is an encoder extension of the backbone (see
:class:`~fairseq_syntax.modules.rnn_encoder.RNNEncoder`): it takes the encoder-output
dict and adds

* ``syntax_annotations`` ``[B, S, C]``: the syntactic annotation of each source position,
  its *expected head word* (the content ``annotations`` are left as they are); or, with
  ``one_set=True`` (SA-NMT-1set, eq. 16), no second set: the content annotations are
  replaced by ``x_m + σ(W_z x_m) ⊙ s_m``;
* ``head_marginals`` ``[B, S, S]``: ``head_marginals[b, h, m] = P(h is the head of m)``;
* ``root_marginals`` ``[B, S]``: ``P(m is the root)``;

all batch-first, so beam search reorders them with the rest of the dict, and tools (the
tree extraction of ``fairseq-syntax-induced-trees``) read the marginals from it.

Head-word selection (§4.1, following the authors' code, github.com/ketranm/sa-nmt)
    From the annotations ``x`` ``[B, S, C]``: queries ``q = W_q x``, keys ``k = W_k x``,
    values ``v = W_v x`` (no biases; ``q, k`` of size ``d``, ``v`` of size ``C``) and a
    learned root query ``q_root``::

        s[h, m] = q_h · k_m / √d        (head h -> modifier m: the head queries)
        r[m]    = q_root · k_m / √d     (the artificial root is the head of m)

    :class:`StructuredSelfAttention` turns them into non-projective dependency marginals
    with the matrix-tree theorem (Koo et al. 2007; eqs. 5-9;
    :func:`~fairseq_syntax.modules.matrix_tree.dependency_marginals`, batched, masked
    and shifted in log space). The authors' code clamps the scaled scores ``s`` and ``r``
    to [-5, 7] before the marginals; ``clamp=(-5.0, 7.0)`` does the same (the sa_nmt*
    presets' default, ``--no-arc-score-clamp`` to turn it off). The shift keeps ``exp``
    from overflowing, but not the float32 Laplacian from becoming singular once scores
    100 apart underflow to 0 (a dominant cycle: training stopped on NaN gradients in
    three of six unclamped synthetic runs, scores ±187); the clamp bounds each column's
    range to exp(12), and gives a score outside the bounds no gradient.
    :class:`FlatSelfAttention` (FA-NMT, §5.2) normalises each word's scores over all
    words instead, ``softmax_h(q_m · k_h / √d)``, self included; its attention
    of ``m`` on itself plays the part of the root marginal, its attention on ``h ≠ m``
    the part of ``P(h → m)``. Either way, for every word ``m`` the weights
    ``α[m, h] = P(h → m) + δ(h, m)·P(root → m)`` sum to one over ``h``, and

        s_m = Σ_h α[m, h] v_h = Σ_{h≠m} P(h → m) v_h + P(root → m) v_m

    the root word takes its own value for the missing head, as in the authors' code
    (which keeps the root marginals on the diagonal of the attention matrix).

The tree spans the source *words*
    Padding and fairseq's final ``eos`` are outside the tree: their rows and columns of
    the marginals are 0 and their syntactic annotation is the zero vector (an eos-only
    source gets an empty tree). So the induced trees cover exactly the subword pieces
    of the sentence, and a padded sentence gets the same marginals as alone.

Hard attention (SA-NMT-hard, §4.3, eq. 15)
    ``hard=True`` replaces each row ``α[m, :]`` by the one-hot vector of its largest
    entry (a greedy head per word, the root when the diagonal wins; no tree
    guaranteed), with the straight-through estimator: the forward pass uses the one-hot
    weights, the backward pass the gradient of the soft ones
    (:func:`straight_through_heads`). The marginals in the output dict stay soft.

Precision: the marginals are computed in float32 (float64 for float64 inputs) whatever
the autocast region, see :mod:`~fairseq_syntax.modules.matrix_tree`.
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
    "FlatSelfAttention",
]


def word_mask(padding_mask: Tensor) -> Tensor:
    """``[B, S]`` True at the source words: not padding and not the final eos.

    The source is right-padded and its last real position is fairseq's eos.
    """
    lengths = (~padding_mask).sum(dim=1, keepdim=True)
    positions = torch.arange(padding_mask.size(1), device=padding_mask.device).unsqueeze(0)
    return positions < lengths - 1


def head_weights(head_marginals: Tensor, root_marginals: Tensor) -> Tensor:
    """``α[b, m, h] = P(h → m) + δ(h, m)·P(root → m)``: each word's distribution over its
    head, the root standing in for the word itself (``[B, S, S]``, rows of non-words 0)."""
    return head_marginals.transpose(1, 2) + torch.diag_embed(root_marginals)


class _StraightThrough(torch.autograd.Function):
    """Forward: the given hard tensor, exactly; backward: the gradient, unchanged, to the
    soft tensor (``hard + soft - soft.detach()`` would round the one-hot entries)."""

    @staticmethod
    def forward(ctx, soft: Tensor, hard: Tensor) -> Tensor:
        return hard.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, None


def straight_through_heads(weights: Tensor, mask: Tensor) -> Tensor:
    """One-hot greedy heads (eq. 15) with a straight-through gradient.

    ``weights`` ``[B, S, S]`` rows ``α[m, :]``; ``mask`` ``[B, S]`` the words (rows of
    non-words stay 0). Forward: ``onehot(argmax_h α[m, h])``, exactly 0 or 1; backward:
    identity to ``α`` (Bengio et al. 2013).
    """
    with torch.no_grad():
        index = weights.argmax(dim=-1, keepdim=True)
        hard = torch.zeros_like(weights).scatter_(-1, index, 1.0)
        hard = hard * mask.unsqueeze(-1).to(hard.dtype)
    return _StraightThrough.apply(weights, hard)


class _HeadSelection(nn.Module):
    """Shared machinery: projections, the head weights -> annotations, 1set fusion."""

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
        """``(head_marginals [B,S,S] (h, m), root_marginals [B,S])`` of the words ``mask``."""
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
    """Structured self-attention (SA-NMT, Tran & Bisk 2018, §4.1; hard variant §4.3):
    the head weights are the matrix-tree marginals of single-root non-projective
    dependency trees over the source words. See the module docstring."""

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
        """``(s [B,S,S] (h, m), r [B,S])``: the scaled arc and root scores (clamped to
        ``self.clamp`` when set, as the authors' code does)."""
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
    """Flat self-attention (FA-NMT, Tran & Bisk 2018, §5.2): each word attends over all
    words, itself included, with ``softmax_h(q_m · k_h / √d)``; the self weight is
    reported as the root marginal. See the module docstring."""

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
