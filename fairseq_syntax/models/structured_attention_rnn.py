"""Model ``structured_attention_rnn``: Inducing Grammars with and for NMT (Tran & Bisk 2018).

The ``attentional_rnn`` backbone plus head-word selection on the encoder
(:mod:`fairseq_syntax.modules.structured_attention`) and, for two annotation sets, gated syntax
attention (:mod:`fairseq_syntax.modules.syntax_gate_attention`); the rows of Tables 2 and 3:

=================  ==================  ====================  ====================  ====================
architecture       paper's name        ``--self-attention``  ``--head-selection``  ``--syntax-context``
=================  ==================  ====================  ====================  ====================
``sa_nmt_shared``  SA-NMT, shared      ``structured``        ``soft``              ``shared``
``sa_nmt``         SA-NMT, not shared  ``structured``        ``soft``              ``separate``
``sa_nmt_1set``    SA-NMT-1set         ``structured``        ``soft``              ``one_set``
``sa_nmt_hard``    SA-NMT-hard         ``structured``        ``hard``              ``shared``
``fa_nmt_shared``  FA-NMT, shared      ``flat``              ``soft``              ``shared``
``fa_nmt``         FA-NMT, not shared  ``flat``              ``soft``              ``separate``
=================  ==================  ====================  ====================  ====================

All tie target embeddings to the output layer (§5.2).  Structured variants clamp arc and root
scores to [-5, 7] as the authors' code (``--no-arc-score-clamp``: off; unclamped, 3 of 6 synthetic
runs hit a singular float32 Laplacian).  ``--self-attention-dim`` defaults to the encoder output
size, as the authors' code.  Trees are induced; gold trees only score them.
"""
from dataclasses import dataclass, field
from typing import List

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture

from fairseq_syntax.models.attentional_rnn import AttentionalRNNConfig, AttentionalRNNModel
from fairseq_syntax.modules.global_attention import GlobalAttentionLayer
from fairseq_syntax.modules.structured_attention import (
    ARC_SCORE_CLAMP,
    FlatSelfAttention,
    StructuredSelfAttention,
)
from fairseq_syntax.modules.syntax_gate_attention import SyntaxGateAttentionLayer

SELF_ATTENTIONS = ChoiceEnum(["structured", "flat"])
HEAD_SELECTIONS = ChoiceEnum(["soft", "hard"])
SYNTAX_CONTEXTS = ChoiceEnum(["shared", "separate", "one_set"])
GATE_INPUTS = ChoiceEnum(["hidden", "hidden_context"])


@dataclass
class StructuredAttentionRNNConfig(AttentionalRNNConfig):
    self_attention: SELF_ATTENTIONS = field(
        default="structured",
        metadata={"help": "head-word selection layer on the encoder: 'structured' (SA-NMT: "
                  "non-projective dependency marginals by the matrix-tree theorem, §4.1) or "
                  "'flat' (FA-NMT: a softmax self-attention, §5.2)"},
    )
    head_selection: HEAD_SELECTIONS = field(
        default="soft",
        metadata={"help": "'soft': the syntactic annotation of a word is its expected head; "
                  "'hard' (SA-NMT-hard, §4.3, structured only): the greedy most probable head "
                  "(eq. 15), trained with the straight-through estimator"},
    )
    syntax_context: SYNTAX_CONTEXTS = field(
        default="shared",
        metadata={"help": "how the decoder reads syntax: 'shared' (two annotation sets, the "
                  "syntactic vector uses the content attention weights, eq. 10), 'separate' "
                  "(two sets, a second attention for the syntactic vector, eqs. 13-14), both "
                  "gated (eqs. 11-12); or 'one_set' (SA-NMT-1set, eq. 16: one annotation set "
                  "x + sigmoid(W x) * s and the backbone's attention)"},
    )
    self_attention_dim: int = field(
        default=0,
        metadata={"help": "size of the self-attention queries and keys (0: the encoder output "
                  "size, 2 * encoder-hidden-size)"},
    )
    no_arc_score_clamp: bool = field(
        default=False,
        metadata={"help": "do not clamp the scaled arc and root scores of the structured "
                  "self-attention to [-5, 7] before the matrix-tree marginals (the authors' "
                  "code clamps them; unclamped scores can grow until the float32 Laplacian "
                  "is singular); --self-attention structured only"},
    )
    syntax_gate_input: GATE_INPUTS = field(
        default="hidden",
        metadata={"help": "input of the syntax gate g_t (eq. 11): 'hidden' (the decoder state "
                  "h_t, as in the authors' code) or 'hidden_context' ([h_t; c_t])"},
    )


def _value(option) -> str:
    return getattr(option, "value", option)


@register_model("structured_attention_rnn", dataclass=StructuredAttentionRNNConfig)
class StructuredAttentionRNNModel(AttentionalRNNModel):
    """Structured-attention NMT (Tran & Bisk 2018): induced soft or hard heads (matrix-tree) or flat
    self-attention in the encoder, read by the decoder behind a syntax gate, or folded in (1set).
    """

    @classmethod
    def build_encoder_extensions(cls, cfg, encoder_dim: int) -> List[nn.Module]:
        kind = _value(cfg.self_attention)
        hard = _value(cfg.head_selection) == "hard"
        one_set = _value(cfg.syntax_context) == "one_set"
        dim = cfg.self_attention_dim or None
        # checkpoints from before --no-arc-score-clamp stored clamp_arc_scores (off by default)
        unclamped = getattr(cfg, "no_arc_score_clamp", False)
        clamp = not unclamped and getattr(cfg, "clamp_arc_scores", True)
        if kind == "flat":
            if hard:
                raise ValueError(
                    "--head-selection hard is SA-NMT-hard: it needs --self-attention structured"
                )
            if unclamped:
                raise ValueError(
                    "--no-arc-score-clamp is about the matrix-tree scores: it needs "
                    "--self-attention structured (an sa_nmt* architecture)"
                )
            return [FlatSelfAttention(encoder_dim, dim, one_set=one_set, dropout=cfg.dropout)]
        return [StructuredSelfAttention(encoder_dim, dim, hard=hard, one_set=one_set,
                                        dropout=cfg.dropout,
                                        clamp=ARC_SCORE_CLAMP if clamp else None)]

    @classmethod
    def build_attention(cls, cfg, query_dim: int, key_dim: int) -> nn.Module:
        context = _value(cfg.syntax_context)
        if context == "one_set":
            return GlobalAttentionLayer(query_dim, key_dim, cfg.attention_score)
        return SyntaxGateAttentionLayer(
            query_dim, key_dim, key_dim, cfg.attention_score, shared=context == "shared",
            gate_input=_value(cfg.syntax_gate_input),
        )


def _sa_nmt(args, self_attention: str, head_selection: str, syntax_context: str):
    # §5.2: "In all the models, we share the weights of target word embeddings and the
    # output layer" (Inan et al. 2016; Press and Wolf 2017)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    args.self_attention = getattr(args, "self_attention", self_attention)
    args.head_selection = getattr(args, "head_selection", head_selection)
    args.syntax_context = getattr(args, "syntax_context", syntax_context)


@register_model_architecture("structured_attention_rnn", "sa_nmt_shared")
def sa_nmt_shared(args):
    """SA-NMT (shared): structured self-attention, shared attention, gated."""
    _sa_nmt(args, "structured", "soft", "shared")


@register_model_architecture("structured_attention_rnn", "sa_nmt")
def sa_nmt(args):
    """SA-NMT (not shared): structured self-attention, separate syntax attention."""
    _sa_nmt(args, "structured", "soft", "separate")


@register_model_architecture("structured_attention_rnn", "sa_nmt_1set")
def sa_nmt_1set(args):
    """SA-NMT-1set: structured self-attention folded into one annotation set."""
    _sa_nmt(args, "structured", "soft", "one_set")


@register_model_architecture("structured_attention_rnn", "sa_nmt_hard")
def sa_nmt_hard(args):
    """SA-NMT-hard: greedy hard heads (straight-through), shared attention."""
    _sa_nmt(args, "structured", "hard", "shared")


@register_model_architecture("structured_attention_rnn", "fa_nmt_shared")
def fa_nmt_shared(args):
    """FA-NMT (shared): flat self-attention, shared attention, gated."""
    _sa_nmt(args, "flat", "soft", "shared")


@register_model_architecture("structured_attention_rnn", "fa_nmt")
def fa_nmt(args):
    """FA-NMT (not shared): flat self-attention, separate syntax attention."""
    _sa_nmt(args, "flat", "soft", "separate")
