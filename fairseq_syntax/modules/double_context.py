"""Double context (Chen et al. 2017, section 3.3, eq. 14): a global and a local context."""
from typing import Dict

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer, masked_softmax
from fairseq_syntax.modules.local_attention import last_positions


class DoubleContextAttentionLayer(GlobalAttentionLayer):
    """Global plus local (local-p or syntax-directed) context, eq. 14: ``tanh(W_c [c_g; c_l; h_t])``.

    Both come from one set of Luong scores, "from the global attention" (the paper's words).  The
    weights returned are the global ones: they cover every position and sum to 1.
    """

    def __init__(self, query_dim: int, key_dim: int, local_weights: nn.Module,
                 score: str = "general", output_dim=None):
        super().__init__(query_dim, key_dim, score, output_dim)
        self.local_weights = local_weights
        self.combine = nn.Linear(2 * key_dim + query_dim, self.output_dim, bias=False)

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        return {"keys": self.score.project(encoder_out["annotations"]),
                "last_position": last_positions(encoder_out["padding_mask"])}

    def forward(self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]):
        scores = self.score(hidden, state["keys"])
        global_weights = masked_softmax(scores, encoder_out["padding_mask"])
        local_weights = self.local_weights(hidden, scores, encoder_out, state)
        # one bmm for both contexts: [B, 2, S] x [B, S, C] -> [B, 2, C]
        contexts = torch.bmm(torch.stack([global_weights, local_weights], dim=1), encoder_out["annotations"])
        features = torch.cat([contexts.flatten(1), hidden], dim=-1)
        return torch.tanh(self.combine(features)), global_weights, state

