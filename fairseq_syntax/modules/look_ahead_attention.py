"""Look-ahead attention (Zhou et al., "Look-ahead Attention for Generation in NMT").

The decoder attends over its past top-layer states, ``c^d_j = Σ_{i<j} ATT(q_j, s_i) · s_i``
(eq. 10; ``ATT`` Luong's ``dot``, eq. 6, or ``general``); the patterns differ in ``q_j`` and in
how ``c^d_j`` meets the source context (``h̃_t`` is the paper's ``t_j^final``):

* ``concat`` (eq. 11): ``q_j = s_j``, ``t_j = tanh(W_c [s_j; c_j; c^d_j] + b)``;
* ``enc_dec`` (eqs. 12-13): ``q_j = t^e_j = tanh(W_c [c_j; s_j])``,
  ``t_j = tanh(W_c2 [t^e_j; c^d_j] + b_2)``;
* ``dec_enc`` (eqs. 14-16): ``t^d_j = tanh(W_c1 [s_j; c^d_j] + b)`` queries the source,
  ``t_j = tanh(W_c2 [t^d_j; c^e_j] + b_2)``.

At the first step the weights are ``[B, 0]`` and ``c^d_1 = 0``.  The state adds ``past``
``[B, j-1, H]`` (grows one row a step) and ``look_ahead_weights`` ``[B, j-1]`` of the latest step.
For ``general`` the query is projected (``(W_aᵀ q)ᵀ s_i``), so past states are never re-projected.
"""
from typing import Dict, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_syntax.modules.global_attention import (
    GlobalAttentionLayer,
    LuongScore,
    attend,
    masked_softmax,
)

LOOK_AHEAD_PATTERNS = ("concat", "enc_dec", "dec_enc")


class LookAheadAttention(nn.Module):
    """Eq. 10: ``(query [B, Q], past [B, t, H]) -> (c^d [B, H], weights [B, t])``; ``t`` may be 0."""

    def __init__(self, query_dim: int, state_dim: int, score: str = "dot"):
        super().__init__()
        self.state_dim = state_dim
        self.score = LuongScore(query_dim, state_dim, score)

    def forward(self, query: Tensor, past: Tensor) -> Tuple[Tensor, Tensor]:
        if past.size(1) == 0:
            return query.new_zeros(query.size(0), self.state_dim), query.new_zeros(query.size(0), 0)
        proj = self.score.proj
        # general: q^T (W_a s_i) = (q W_a)^T s_i -- project the query, not every past state
        projected_query = query if proj is None else torch.matmul(query, proj.weight)
        # [B, 1, H] x [B, H, t]: a row-vector bmm, several times faster on CPU than the
        # equivalent [B, t, H] x [B, H, 1]
        scores = torch.bmm(projected_query.unsqueeze(1), past.transpose(1, 2)).squeeze(1)
        weights = torch.softmax(scores.float(), dim=-1).type_as(scores)
        return attend(weights, past), weights


class LookAheadLayer(nn.Module):
    """Base of the patterns: subclasses set ``source_score``, ``look_ahead``; end with :meth:`remember`."""

    pattern = ""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.output_dim = query_dim

    # -- state -------------------------------------------------------------------------
    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        annotations = encoder_out["annotations"]
        bsz = annotations.size(0)
        state = self.init_source_state(encoder_out)
        state["past"] = annotations.new_zeros(bsz, 0, self.query_dim)
        state["look_ahead_weights"] = annotations.new_zeros(bsz, 0)
        return state

    def init_source_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        return {"keys": self.source_score.project(encoder_out["annotations"])}

    @staticmethod
    def remember(state: Dict[str, Tensor], hidden: Tensor, weights: Tensor) -> Dict[str, Tensor]:
        """Push ``s_j`` on the stack of past states (a new dict; the old one is untouched)."""
        new_state = dict(state)
        new_state["past"] = torch.cat([state["past"], hidden.unsqueeze(1)], dim=1)
        new_state["look_ahead_weights"] = weights
        return new_state

    def attend_source(self, query: Tensor, encoder_out: Dict[str, Tensor],
                      state: Dict[str, Tensor]) -> Tuple[Tensor, Tensor]:
        """Luong attention over the source annotations: ``(c [B, 2H_e], weights [B, S])``."""
        weights = masked_softmax(self.source_score(query, state["keys"]), encoder_out["padding_mask"])
        return attend(weights, encoder_out["annotations"]), weights


class ConcatLookAheadLayer(LookAheadLayer):
    """Concatenation pattern (eqs. 10-11): ``t_j = tanh(W_c [s_j; c_j; c^d_j] + b)``."""

    pattern = "concat"

    def __init__(self, query_dim, key_dim, score="general", look_ahead_score="dot"):
        super().__init__(query_dim, key_dim)
        self.source_score = LuongScore(query_dim, key_dim, score)
        self.look_ahead = LookAheadAttention(query_dim, query_dim, look_ahead_score)
        self.combine = nn.Linear(query_dim + key_dim + query_dim, self.output_dim)

    def forward(self, hidden, encoder_out, state):
        context, weights = self.attend_source(hidden, encoder_out, state)
        look_ahead_context, look_ahead_weights = self.look_ahead(hidden, state["past"])
        out = torch.tanh(self.combine(torch.cat([hidden, context, look_ahead_context], dim=-1)))
        return out, weights, self.remember(state, hidden, look_ahead_weights)


class EncDecLookAheadLayer(LookAheadLayer):
    """Enc-Dec pattern (eqs. 12-13): the backbone's ``t^e_j`` (eq. 4) queries the past."""

    pattern = "enc_dec"

    def __init__(self, query_dim, key_dim, score="general", look_ahead_score="dot"):
        super().__init__(query_dim, key_dim)
        self.source = GlobalAttentionLayer(query_dim, key_dim, score)
        self.source_score = self.source.score
        self.look_ahead = LookAheadAttention(self.source.output_dim, query_dim, look_ahead_score)
        self.combine = nn.Linear(self.source.output_dim + query_dim, self.output_dim)

    def init_source_state(self, encoder_out):
        return self.source.init_state(encoder_out)

    def forward(self, hidden, encoder_out, state):
        t_enc, weights, _ = self.source(hidden, encoder_out, state)
        look_ahead_context, look_ahead_weights = self.look_ahead(t_enc, state["past"])
        out = torch.tanh(self.combine(torch.cat([t_enc, look_ahead_context], dim=-1)))
        return out, weights, self.remember(state, hidden, look_ahead_weights)


class DecEncLookAheadLayer(LookAheadLayer):
    """Dec-Enc pattern (eqs. 14-16): ``t^d_j = tanh(W_c1 [s_j; c^d_j] + b)`` queries the source."""

    pattern = "dec_enc"

    def __init__(self, query_dim, key_dim, score="general", look_ahead_score="dot"):
        super().__init__(query_dim, key_dim)
        self.look_ahead = LookAheadAttention(query_dim, query_dim, look_ahead_score)
        self.look_ahead_combine = nn.Linear(query_dim + query_dim, query_dim)
        self.source_score = LuongScore(query_dim, key_dim, score)
        self.combine = nn.Linear(query_dim + key_dim, self.output_dim)

    def forward(self, hidden, encoder_out, state):
        look_ahead_context, look_ahead_weights = self.look_ahead(hidden, state["past"])
        t_dec = torch.tanh(self.look_ahead_combine(torch.cat([hidden, look_ahead_context], dim=-1)))
        context, weights = self.attend_source(t_dec, encoder_out, state)
        out = torch.tanh(self.combine(torch.cat([t_dec, context], dim=-1)))
        return out, weights, self.remember(state, hidden, look_ahead_weights)


_LAYERS = {cls.pattern: cls for cls in (ConcatLookAheadLayer, EncDecLookAheadLayer, DecEncLookAheadLayer)}


def build_look_ahead_layer(pattern: str, query_dim: int, key_dim: int, score: str = "general",
                           look_ahead_score: str = "dot") -> LookAheadLayer:
    """The attentional layer of look-ahead ``pattern`` (one of :data:`LOOK_AHEAD_PATTERNS`)."""
    pattern = str(pattern)
    if pattern not in _LAYERS:
        raise ValueError(f"unknown look-ahead pattern {pattern!r}; choose one of {LOOK_AHEAD_PATTERNS}")
    return _LAYERS[pattern](query_dim, key_dim, str(score), str(look_ahead_score))
