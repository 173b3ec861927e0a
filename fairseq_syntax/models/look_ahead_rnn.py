"""Model ``look_ahead_rnn``: the backbone with look-ahead attention (Zhou et al. 2017), archs
``lookahead_concat``, ``lookahead_enc_dec``, ``lookahead_dec_enc``.
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from torch import Tensor

from fairseq_syntax.models.attentional_rnn import (
    ATTENTION_SCORES,
    AttentionalRNNConfig,
    AttentionalRNNModel,
)
from fairseq_syntax.modules.look_ahead_attention import LOOK_AHEAD_PATTERNS, build_look_ahead_layer
from fairseq_syntax.modules.rnn_decoder import STATE_KEY

PATTERN_CHOICES = ChoiceEnum(list(LOOK_AHEAD_PATTERNS))


@dataclass
class LookAheadRNNConfig(AttentionalRNNConfig):
    look_ahead_pattern: PATTERN_CHOICES = field(
        default="enc_dec",
        metadata={
            "help": "how look-ahead attention over the decoder's past top-layer states joins "
            "the source attention (Zhou et al.): 'concat' t=tanh(W[s;c;c_d]+b) (eq. 11); "
            "'enc_dec' the backbone's attentional state queries the past (eqs. 12-13); "
            "'dec_enc' the past-informed state queries the source (eqs. 14-16). Set by the "
            "lookahead_* architectures"
        },
    )
    look_ahead_score: ATTENTION_SCORES = field(
        default="dot",
        metadata={
            "help": "score of the look-ahead attention ATT(q, s_i): 'dot' (q^T s_i, the "
            "paper's eq. 6) or 'general' (q^T W s_i); --attention-score sets the source "
            "attention's score"
        },
    )


@register_model("look_ahead_rnn", dataclass=LookAheadRNNConfig)
class LookAheadRNNModel(AttentionalRNNModel):
    """Look-ahead attention for generation in NMT (Zhou, Zhang and Zong 2017).

    The attentional layer also attends over the decoder's past top-layer states (eq. 10), in one of
    three patterns (:mod:`fairseq_syntax.modules.look_ahead_attention`): ``lookahead_concat`` (eq. 11),
    ``lookahead_enc_dec`` (eqs. 12-13), ``lookahead_dec_enc`` (eqs. 14-16); ``--arch look_ahead_rnn``
    reads ``--look-ahead-pattern``.  Past states ``[B, j-1, H]`` live in the incremental state (cached,
    reordered by the beam, growing one row a step).
    """

    @classmethod
    def build_attention(cls, cfg, query_dim: int, key_dim: int):
        return build_look_ahead_layer(
            cfg.look_ahead_pattern, query_dim, key_dim, cfg.attention_score, cfg.look_ahead_score
        )

    @torch.no_grad()
    def look_ahead_attention(self, src_tokens: Tensor, src_lengths: Tensor,
                             prev_output_tokens: Tensor) -> Tensor:
        """Force-decode ``prev_output_tokens`` ``[B, T]``; look-ahead weights ``[B, T, T]`` (row ``j`` over
        steps ``i < j``, row 0 zero).  Call in eval mode.
        """
        encoder_out = self.encoder(src_tokens, src_lengths)
        bsz, tgt_len = prev_output_tokens.shape
        out = prev_output_tokens.new_zeros(bsz, tgt_len, tgt_len, dtype=torch.float)
        incremental_state = {}
        for j in range(tgt_len):
            self.decoder(prev_output_tokens[:, : j + 1], encoder_out=encoder_out,
                         incremental_state=incremental_state)
            state = self.decoder.get_incremental_state(incremental_state, STATE_KEY)
            weights = state["attention.look_ahead_weights"]
            out[:, j, : weights.size(1)] = weights.float()
        return out


def _pattern(args, pattern: str):
    args.look_ahead_pattern = getattr(args, "look_ahead_pattern", pattern)


@register_model_architecture("look_ahead_rnn", "lookahead_concat")
def lookahead_concat(args):
    """Concatenation pattern, eq. 11."""
    _pattern(args, "concat")


@register_model_architecture("look_ahead_rnn", "lookahead_enc_dec")
def lookahead_enc_dec(args):
    """Enc-Dec pattern, eqs. 12-13 (the paper's best)."""
    _pattern(args, "enc_dec")


@register_model_architecture("look_ahead_rnn", "lookahead_dec_enc")
def lookahead_dec_enc(args):
    """Dec-Enc pattern, eqs. 14-16."""
    _pattern(args, "dec_enc")
