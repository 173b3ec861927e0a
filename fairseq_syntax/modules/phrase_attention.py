"""Attention over the words and the phrases of a source tree (Eriguchi et al. 2016, eq. 13)."""
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer, attend, masked_softmax
from fairseq_syntax.modules.step_product import read_every_step


class PhraseAttentionLayer(GlobalAttentionLayer):
    """Eq. 13: one softmax over the ``S`` words and ``M`` phrases of ``word_phrase_annotations``;
    weights ``[B, S + M]``, words first (the decoder keeps ``[:S]`` as ``extra["attn"]``).

    The memory has about ``2n`` rows for ``n`` words, more than the target has steps, so ``W_a``
    and ``W_c`` act on the query and ``[c_t; h_t]`` at each step (Luong et al. eqs. 5, 8 as
    written) instead of on every memory row once per sentence as in the backbone: the same
    numbers, fewer products.  Its state: the memory transposed, ``[B, C, S + M]``, once per sentence
    (the scores' gradient then accumulates in a contiguous tensor).
    """

    memory_key = "word_phrase_annotations"
    mask_key = "word_phrase_mask"

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        memory = encoder_out[self.memory_key]
        return {"keys": read_every_step(memory.transpose(1, 2).contiguous()), "values": read_every_step(memory)}

    def forward(
        self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        proj = self.score.proj
        query = hidden if proj is None else F.linear(hidden, proj.weight.t())  # h_tᵀ W_a = (W_aᵀ h_t)ᵀ
        weights = masked_softmax(self.score(query, state["keys"]), encoder_out[self.mask_key])
        out = torch.tanh(self.combine(torch.cat([attend(weights, state["values"]), hidden], dim=-1)))
        return out, weights, state
