"""Luong et al. (2015) global attention, the backbone's attentional layer."""
from typing import Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_syntax.modules.step_product import read_every_step, step_product


def masked_softmax(scores: Tensor, padding_mask: Tensor) -> Tensor:
    """Softmax over the last dimension, skipping positions where ``padding_mask`` is True."""
    return torch.softmax(scores.float().masked_fill(padding_mask, float("-inf")), dim=-1).type_as(scores)


def attend(weights: Tensor, values: Tensor) -> Tensor:
    """Context vector ``c = Σ_j a_j v_j``: ``[B, S] x [B, S, C] -> [B, C]``."""
    return step_product(weights, values)


class LuongScore(nn.Module):
    """Luong et al. (2015) eq. 8 scores: ``dot`` ``h_tᵀ h̄_s``, ``general`` ``h_tᵀ W_a h̄_s``."""

    def __init__(self, query_dim: int, key_dim: int, score: str = "general"):
        super().__init__()
        if score == "dot" and query_dim != key_dim:
            raise ValueError(
                f"'dot' attention needs equal query and key sizes, got {query_dim} and "
                f"{key_dim}: set --decoder-hidden-size to {key_dim} or use 'general'"
            )
        self.proj = nn.Linear(key_dim, query_dim, bias=False) if score == "general" else None

    def project(self, keys: Tensor) -> Tensor:
        """``[B, S, K]`` keys -> ``[B, H, S]``, once per sentence."""
        return read_every_step((keys if self.proj is None else self.proj(keys)).transpose(1, 2).contiguous())

    def forward(self, query: Tensor, projected_keys: Tensor) -> Tensor:
        """``[B, H] x [B, H, S] -> [B, S]``."""
        # [B,1,H] x [B,H,S]: on CPU several times faster than [B,S,H] x [B,H,1]
        return step_product(query, projected_keys)


class GlobalAttentionLayer(nn.Module):
    """Backbone attentional layer, Luong et al. (2015) eqs. 5, 7, 8: ``a_t = softmax(score(h_t, h̄_s))``,
    ``h̃_t = tanh(W_c [c_t; h_t])``.  The protocol every attentional layer of the plugin follows:

    * ``output_dim``: size of ``h̃_t``;
    * ``init_state(encoder_out) -> dict`` of batch-first tensors kept across steps (the decoder
      caches and reorders them for beam search);
    * ``forward(hidden, encoder_out, state) -> (h̃_t, weights over the source, new state)``;
    * ``memory_key``/``mask_key``: the ``encoder_out`` entries attended over.
    """

    memory_key = "annotations"
    mask_key = "padding_mask"

    def __init__(self, query_dim: int, key_dim: int, score: str = "general", output_dim=None):
        super().__init__()
        self.score = LuongScore(query_dim, key_dim, score)
        self.output_dim = output_dim or query_dim
        self.combine = nn.Linear(key_dim + query_dim, self.output_dim, bias=False)

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        memory = encoder_out[self.memory_key]
        # W_c [c_t; h_t] = Σ_s a_ts (W_c' h̄_s) + W_c'' h_t: the memory half once per sentence
        values = F.linear(memory, self.combine.weight[:, :memory.size(-1)])
        return {"keys": self.score.project(memory), "values": read_every_step(values)}

    def forward(
        self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        weights = masked_softmax(self.score(hidden, state["keys"]), encoder_out[self.mask_key])
        return self.attentional_state(weights, hidden, state), weights, state

    def attentional_state(self, weights: Tensor, hidden: Tensor, state: Dict[str, Tensor]) -> Tensor:
        """``h̃_t = tanh(W_c [c_t; h_t])``, ``c_t = Σ_s a_ts h̄_s`` (eq. 5)."""
        key_dim = self.combine.in_features - hidden.size(-1)
        return torch.tanh(attend(weights, state["values"]) + F.linear(hidden, self.combine.weight[:, key_dim:]))
