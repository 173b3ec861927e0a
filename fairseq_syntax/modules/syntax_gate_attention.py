"""Decoder attention over content and syntactic annotations, syntax gate; Tran & Bisk (2018) §4.2, §6.

For encoders with ``annotations`` ``x`` and ``syntax_annotations`` ``s``
(:mod:`~fairseq_syntax.modules.structured_attention`); at step ``t``, from ``h_t``:
``a_t = softmax(score(h_t, x))``, ``c_t = Σ_j a_tj x_j`` (eqs. 3-4); ``d_t = Σ_j a_tj s_j``
(shared, eq. 10) or with a second Luong attention's weights (not shared, eqs. 13-14);
``g_t = σ(W_g h_t + b_g)`` of the size of ``s`` (eq. 11, as the authors' code;
``gate_input="hidden_context"`` uses ``[h_t; c_t]``); ``h̃_t = tanh(W_c [c_t; h_t; g_t ⊙ d_t])``
(eq. 12).  Returns the content weights ``a_t``; the gates come back as the decoder's
``extra["syntax_gate"][0]`` ``[B, T, C]``, whose norm is the gate analysis of §6 (eq. 17).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .global_attention import LuongScore, attend, masked_softmax
from .rnn_decoder import EXTRA

GATE_INPUTS = ("hidden", "hidden_context")
GATE = "syntax_gate"  # the decoder's extra output that holds the gates g_t


class SyntaxGateAttentionLayer(nn.Module):
    """Content attention plus a gated syntactic vector (§4.2); ``shared``: eq. 10, else eqs. 13-14."""

    def __init__(self, query_dim: int, key_dim: int, syntax_dim: Optional[int] = None,
                 score: str = "general", shared: bool = True, gate_input: str = "hidden",
                 output_dim: Optional[int] = None):
        super().__init__()
        if gate_input not in GATE_INPUTS:
            raise ValueError(f"gate_input must be one of {GATE_INPUTS}, got {gate_input!r}")
        syntax_dim = syntax_dim or key_dim
        self.shared = shared
        self.gate_input = gate_input
        self.score = LuongScore(query_dim, key_dim, score)
        self.syntax_score = None if shared else LuongScore(query_dim, syntax_dim, score)
        gate_in = query_dim + (key_dim if gate_input == "hidden_context" else 0)
        self.gate = nn.Linear(gate_in, syntax_dim)
        self.output_dim = output_dim or query_dim
        self.combine = nn.Linear(key_dim + query_dim + syntax_dim, self.output_dim, bias=False)

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        if "syntax_annotations" not in encoder_out:
            raise KeyError(
                "the encoder output has no 'syntax_annotations': this attention layer needs "
                "a head-word selection encoder extension with two annotation sets"
            )
        state = {"keys": self.score.project(encoder_out["annotations"])}
        if self.syntax_score is not None:
            state["syntax_keys"] = self.syntax_score.project(encoder_out["syntax_annotations"])
        return state

    def forward(
        self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        padding_mask = encoder_out["padding_mask"]
        weights = masked_softmax(self.score(hidden, state["keys"]), padding_mask)
        context = attend(weights, encoder_out["annotations"])
        if self.syntax_score is None:
            syntax_weights = weights
        else:
            syntax_weights = masked_softmax(self.syntax_score(hidden, state["syntax_keys"]), padding_mask)
        syntax = attend(syntax_weights, encoder_out["syntax_annotations"])
        gate_in = hidden if self.gate_input == "hidden" else torch.cat([hidden, context], dim=-1)
        gate = torch.sigmoid(self.gate(gate_in))
        out = torch.tanh(self.combine(torch.cat([context, hidden, gate * syntax], dim=-1)))
        return out, weights, dict(state, **{EXTRA + GATE: gate})
