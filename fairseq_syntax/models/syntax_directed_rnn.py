"""Model ``syntax_directed_rnn``: Syntax-Directed Attention for NMT (Chen et al. 2017).

Five architectures, each the ``attentional_rnn`` backbone with another attentional layer:

==========================  ==========================  =================================
architecture                ``--attention-type``        paper's name
==========================  ==========================  =================================
``sdatt_global``            ``global``                  GlobalAtt (the backbone)
``sdatt_local_p``           ``local_p``                 LocalAtt (Luong et al. 2015)
``sdatt_syntax``            ``syntax_directed``         SDAtt
``sdatt_double_local_p``    ``global+local_p``          GlobalAtt+LocalAtt
``sdatt_double_syntax``     ``global+syntax_directed``  GlobalAtt+SDAtt (double context)
==========================  ==========================  =================================

Paper defaults: ``D = 10``, ``σ = D/2``; ``n = 4``, ``σ = n/2``.  ``M[p_i]`` is interpolated so the
predictor learns (``--syntax-row words``: between words' rows; ``nearest``: the nearest row).
``--syntax-gaussian``: eq. 10's Gaussian on the scores or on the weights (default, chosen by measurement, see
``DEFAULT_GAUSSIAN_READING``); local-p always multiplies its window softmax (eq. 6).  Distances are between words
(docs/design.md §3.3); eos is outside every neighbourhood but stays in the global context.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_syntax.data.tree_tensors import EOS_DISTANCE
from fairseq_syntax.models.attentional_rnn import AttentionalRNNConfig, AttentionalRNNModel
from fairseq_syntax.modules.double_context import DoubleContextAttentionLayer
from fairseq_syntax.modules.global_attention import GlobalAttentionLayer
from fairseq_syntax.modules.local_attention import (
    DEFAULT_GAUSSIAN_READING, GAUSSIAN_READINGS, POSITION_LOGIT_SCALE_HELP,
    SDATT_POSITION_LOGIT_SCALE, SYNTAX_ROWS, LocalAttentionLayer, LocalPWeights,
    SyntaxDirectedWeights, position_logit_scale,
)

ATTENTION_TYPES = ChoiceEnum(
    ["global", "local_p", "syntax_directed", "global+local_p", "global+syntax_directed"]
)
SYNTAX_ROW_CHOICES = ChoiceEnum(list(SYNTAX_ROWS))
SYNTAX_GAUSSIANS = ChoiceEnum(list(GAUSSIAN_READINGS))


@dataclass
class SyntaxDirectedRNNConfig(AttentionalRNNConfig):
    attention_type: ATTENTION_TYPES = field(
        default="syntax_directed",
        metadata={"help": "decoder attention: 'global' (Luong), 'local_p' (Luong local-p), "
                  "'syntax_directed' (SDAtt), or a global context plus a local-p or "
                  "syntax-directed one ('global+local_p', 'global+syntax_directed', "
                  "the double context of Chen et al. eq. 14)"},
    )
    local_window: float = field(
        default=10.0,
        metadata={"help": "local-p half-window D: positions j with |j - p_i| <= D get weight "
                  "(Luong et al. 2015 use 10)"},
    )
    local_sigma: Optional[float] = field(
        default=None, metadata={"help": "standard deviation of the local-p Gaussian (default D/2)"}
    )
    syntax_distance: float = field(
        default=4.0,
        metadata={"help": "syntax distance n: only source words within n tree arcs of the "
                  "word at the predicted position p_i get weight (Chen et al. use 4); "
                  "distances are between words (a word's subword pieces share them) and "
                  f"must stay below EOS_DISTANCE ({EOS_DISTANCE}), eos's distance from every word"},
    )
    syntax_sigma: Optional[float] = field(
        default=None,
        metadata={"help": "standard deviation of the syntax-distance Gaussian (default n/2)"},
    )
    syntax_row: SYNTAX_ROW_CHOICES = field(
        default="interpolate",
        metadata={"help": "how the distance row M[p_i] is taken at a real-valued p_i: "
                  "'interpolate' linearly between the rows of floor(p_i) and ceil(p_i) (the "
                  "position predictor gets a gradient; the neighbourhood is the positions "
                  "whose interpolated distance is <= n); 'words' linearly between the rows of "
                  "consecutive words' first pieces (pieces of one word share a row, so "
                  "'interpolate' gives p_i no gradient inside a word); or the 'nearest' row "
                  "(the predictor gets no gradient)"},
    )
    syntax_gaussian: SYNTAX_GAUSSIANS = field(
        default=DEFAULT_GAUSSIAN_READING,
        metadata={"help": "where the syntax-distance Gaussian exp(-M[p_i][j]^2 / 2 sigma^2) of "
                  "Chen et al. eq. 10 applies (syntax-directed variants only; local-p always "
                  "multiplies its window softmax): 'scores' multiplies the alignment score e_ij "
                  "before the softmax, as eq. 10 is written (a negative score is pulled towards "
                  "0, so farther words can gain weight); 'weights' multiplies the softmax "
                  "weights and renormalises within the neighbourhood, i.e. adds "
                  "-M^2 / 2 sigma^2 to the logits (nearer words never lose weight), as the "
                  "paper's text and Luong's local-p have it; the default, as 'scores' can diverge in "
                  "training (measurements: DEFAULT_GAUSSIAN_READING)"},
    )
    position_logit_scale: Optional[float] = field(
        default=None,
        metadata={"help": "local-p and syntax-directed variants: " + POSITION_LOGIT_SCALE_HELP
                  + f" (default: {SDATT_POSITION_LOGIT_SCALE} for syntax-directed attention, "
                  "as 1 collapsed to the first word on Multi30k; 1 for local-p)"},
    )


def _value(option) -> str:
    return getattr(option, "value", option)


@register_model("syntax_directed_rnn", dataclass=SyntaxDirectedRNNConfig)
class SyntaxDirectedRNNModel(AttentionalRNNModel):
    """Syntax-directed attention NMT (Chen et al. 2017): local-p (eqs. 5-7), syntax-directed (eqs. 9-13)
    or double-context (eq. 14) attention.  Returns the weights that made the context (double: global).
    """

    @classmethod
    def side_inputs(cls, cfg):
        kind = _value(safe_getattr(cfg, "attention_type", SyntaxDirectedRNNConfig.attention_type))
        return {"distances"} if kind.split("+")[-1] == "syntax_directed" else set()

    @classmethod
    def build_local_weights(cls, cfg, query_dim: int) -> nn.Module:
        kind = _value(cfg.attention_type).split("+")[-1]
        if kind == "local_p":
            return LocalPWeights(query_dim, cfg.local_window, cfg.local_sigma,
                                 position_logit_scale(cfg, kind))
        if not 0 <= cfg.syntax_distance < EOS_DISTANCE:
            raise ValueError(
                f"--syntax-distance {cfg.syntax_distance}: give a distance n with "
                f"0 <= n < {EOS_DISTANCE} (EOS_DISTANCE, the distance between eos and every "
                "word, which is never inside the neighbourhood)"
            )
        return SyntaxDirectedWeights(
            query_dim, cfg.syntax_distance, cfg.syntax_sigma,
            row=_value(cfg.syntax_row),
            gaussian_on=_value(cfg.syntax_gaussian), logit_scale=position_logit_scale(cfg, kind),
        )

    @classmethod
    def build_attention(cls, cfg, query_dim: int, key_dim: int) -> nn.Module:
        kind = _value(cfg.attention_type)
        if kind == "global":
            return GlobalAttentionLayer(query_dim, key_dim, cfg.attention_score)
        layer = DoubleContextAttentionLayer if kind.startswith("global+") else LocalAttentionLayer
        return layer(query_dim, key_dim, cls.build_local_weights(cfg, query_dim), cfg.attention_score)


def _attention_type(args, attention_type: str):
    args.attention_type = getattr(args, "attention_type", attention_type)


@register_model_architecture("syntax_directed_rnn", "sdatt_global")
def sdatt_global(args):
    """GlobalAtt: the backbone's Luong global attention (baseline)."""
    _attention_type(args, "global")


@register_model_architecture("syntax_directed_rnn", "sdatt_local_p")
def sdatt_local_p(args):
    """LocalAtt: Luong local-p attention, window D = 10, σ = D/2."""
    _attention_type(args, "local_p")


@register_model_architecture("syntax_directed_rnn", "sdatt_syntax")
def sdatt_syntax(args):
    """SDAtt: syntax-directed attention, n = 4, σ = n/2."""
    _attention_type(args, "syntax_directed")


@register_model_architecture("syntax_directed_rnn", "sdatt_double_local_p")
def sdatt_double_local_p(args):
    """GlobalAtt+LocalAtt: double context."""
    _attention_type(args, "global+local_p")


@register_model_architecture("syntax_directed_rnn", "sdatt_double_syntax")
def sdatt_double_syntax(args):
    """GlobalAtt+SDAtt: double context."""
    _attention_type(args, "global+syntax_directed")
