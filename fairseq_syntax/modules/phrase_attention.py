"""Attention over the words and the phrases of a source tree (Eriguchi et al. 2016, eq. 13)."""
from typing import Dict, Tuple

import torch
from torch import Tensor

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer, attend, masked_softmax


class PhraseAttentionLayer(GlobalAttentionLayer):
    """Luong attention whose keys are the word annotations followed by the phrase states.

    Eq. 13: ``d_j = Σ_{i<=n} α_j(i) h_i + Σ_{i>n} α_j(i) h_i^(phr)``, one softmax over the
    ``S`` word positions (``encoder_out["annotations"]``, ``padding_mask``) and the phrase
    rows (``encoder_out["phrase_annotations"] [B, M, C]``, ``phrase_mask [B, M]``, True
    for padding rows and for every row of a sentence without a tree). The weights
    returned are ``[B, S + M]``, words first; the decoder keeps the first ``S`` columns
    for ``extra["attn"]`` (``--print-alignment``), so alignments stay over source
    positions. Keys are projected once per sentence (``init_state``).
    """

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        keys = torch.cat([encoder_out["annotations"], encoder_out["phrase_annotations"]], dim=1)
        return {"keys": self.score.project(keys)}

    def forward(
        self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        words = encoder_out["annotations"]
        mask = torch.cat([encoder_out["padding_mask"], encoder_out["phrase_mask"]], dim=1)
        weights = masked_softmax(self.score(hidden, state["keys"]), mask)
        src_len = words.size(1)
        context = attend(weights[:, :src_len], words) + attend(
            weights[:, src_len:], encoder_out["phrase_annotations"]
        )
        return torch.tanh(self.combine(torch.cat([context, hidden], dim=-1))), weights, state
