"""Model ``sdatt_transformer``: syntax-directed attention (SDAtt; Chen et al. 2017,
"Syntax-Directed Attention for Neural Machine Translation") on the Transformer's
cross-attention.

The ``syntax_transformer`` backbone whose decoder layers ``--sdatt-layers`` (default all)
have ``--sdatt-heads`` (default all) syntax-directed cross-attention heads: each predicts a
source position ``p = J · sigmoid(vᵀ tanh(W x))`` from its query (eq. 5) and adds the
Gaussian of the word-level tree distance from ``p``, ``-M[p][j]² / 2σ²``, to its logits
inside the neighbourhood of words within ``n`` arcs (eqs. 9-11; the ``--syntax-gaussian
weights`` reading of the RNN model ``syntax_directed_rnn``); see
:mod:`fairseq_syntax.modules.syntax_distance_cross_attention`. ``--sdatt-context double``
(the ``sdatt_double_*`` architectures) keeps every head's global context and adds the
chosen heads' syntax-directed contexts through a projection of their own (eq. 14). Reads
the data-bin's source distances (``src_distances``, from the heads and words side-files).

========================================  ========================================
architecture                              sizes / context
========================================  ========================================
``sdatt_transformer``                     ``syntax_transformer``, single context
``sdatt_transformer_iwslt_de_en``         ``syntax_transformer_iwslt_de_en``, single
``sdatt_transformer_tiny``                ``syntax_transformer_tiny``, single
``sdatt_double_transformer``              ``syntax_transformer``, double context
``sdatt_double_transformer_iwslt_de_en``  ``syntax_transformer_iwslt_de_en``, double
``sdatt_double_transformer_tiny``         ``syntax_transformer_tiny``, double
========================================  ========================================

Paper defaults: ``n = 4``, ``σ = n/2``.
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_syntax.data.tree_tensors import EOS_DISTANCE
from fairseq_syntax.models.syntax_transformer import (
    SyntaxTransformerModel,
    option,
    syntax_transformer,
    syntax_transformer_iwslt_de_en,
    syntax_transformer_tiny,
)
from fairseq_syntax.modules.chosen_layers import parse_layers
from fairseq_syntax.modules.local_attention import (
    POSITION_LOGIT_SCALE_HELP, SDATT_POSITION_LOGIT_SCALE, position_logit_scale,
)
from fairseq_syntax.modules.syntax_distance_cross_attention import SyntaxDistanceDecoder

SDATT_CONTEXTS = ("single", "double")


@register_model("sdatt_transformer")
class SDAttTransformerModel(SyntaxTransformerModel):
    """The Transformer backbone with syntax-directed cross-attention heads in its decoder."""

    @classmethod
    def side_inputs(cls, cfg):
        return {"distances"}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--sdatt-heads", type=int, metavar="K",
            help="syntax-directed heads in the cross-attention of each SDAtt decoder layer "
            "(the first K heads; default: all heads). On Multi30k every head lost 1.7 BLEU to "
            "the backbone in single context and gained 0.2 in double context (--sdatt-context "
            "double); on the synthetic corpus every head generalised best (docs/RESULTS.md)")
        parser.add_argument(
            "--sdatt-layers", type=str, metavar="I,J,...",
            help="comma-separated decoder layers (0 = the bottom one) whose cross-attention "
            "has syntax-directed heads (default: every layer)")
        parser.add_argument(
            "--sdatt-distance", type=float, metavar="N",
            help="syntax distance n: a head attends only to the source words within n tree "
            "arcs of the (interpolated) word at its predicted position (Chen et al.: 4); "
            f"must be below EOS_DISTANCE ({EOS_DISTANCE}), eos's distance from every word")
        parser.add_argument(
            "--sdatt-sigma", type=float, metavar="S",
            help="standard deviation σ of the syntax-distance Gaussian, in tree arcs; "
            "-d²/2σ² is added to the head's logits (default: n/2, as Chen et al.)")
        parser.add_argument(
            "--sdatt-context", choices=SDATT_CONTEXTS,
            help="'single': the chosen heads attend syntax-directed only (SDAtt); 'double': "
            "every head keeps its global context and the chosen heads add a syntax-directed "
            "context through a projection of their own (GlobalAtt+SDAtt, Chen et al. eq. 14)")
        parser.add_argument(
            # default given here, not in the architectures: fairseq's model options default
            # to absent, and a checkpoint without the option (older) keeps the paper's 1
            "--position-logit-scale", type=float, metavar="S", default=None,
            help="each SDAtt head's position predictor: " + POSITION_LOGIT_SCALE_HELP
            + f" (default: {SDATT_POSITION_LOGIT_SCALE}, as the RNN's SDAtt: with 1 the heads "
            "saturated on KFTT en-ja, 22.7 %% of the valid steps at the first word and no "
            "correlation with the target step after 3 epochs; docs/architectures.md)")

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        layers = parse_layers(cfg, "sdatt_layers", "decoder")
        context = option(cfg, "sdatt_context", "single")
        if context not in SDATT_CONTEXTS:
            raise ValueError(f"--sdatt-context {context!r}: give one of {', '.join(SDATT_CONTEXTS)}")
        return SyntaxDistanceDecoder(
            cfg, tgt_dict, embed_tokens, sdatt_layers=layers,
            sdatt_heads=safe_getattr(cfg, "sdatt_heads", None),
            max_distance=option(cfg, "sdatt_distance", 4.0),
            sigma=safe_getattr(cfg, "sdatt_sigma", None),
            double_context=context == "double",
            logit_scale=position_logit_scale(cfg, "syntax_directed"),
            no_encoder_attn=cfg.no_cross_attention,
            alignment_layer=safe_getattr(cfg, "alignment_layer", None),
            alignment_heads=safe_getattr(cfg, "alignment_heads", None),
            side_input_keys=cls.side_input_keys(cfg),
        )


def _sdatt_defaults(args, context):
    args.sdatt_heads = option(args, "sdatt_heads", None)
    args.sdatt_layers = option(args, "sdatt_layers", None)
    args.sdatt_distance = option(args, "sdatt_distance", 4.0)
    args.sdatt_sigma = option(args, "sdatt_sigma", None)
    args.sdatt_context = option(args, "sdatt_context", context)


@register_model_architecture("sdatt_transformer", "sdatt_transformer")
def sdatt_transformer(args):
    """syntax_transformer sizes, single context."""
    _sdatt_defaults(args, "single")
    syntax_transformer(args)


@register_model_architecture("sdatt_transformer", "sdatt_transformer_iwslt_de_en")
def sdatt_transformer_iwslt_de_en(args):
    """syntax_transformer_iwslt_de_en sizes, single context."""
    _sdatt_defaults(args, "single")
    syntax_transformer_iwslt_de_en(args)


@register_model_architecture("sdatt_transformer", "sdatt_transformer_tiny")
def sdatt_transformer_tiny(args):
    """syntax_transformer_tiny sizes, single context."""
    _sdatt_defaults(args, "single")
    syntax_transformer_tiny(args)


@register_model_architecture("sdatt_transformer", "sdatt_double_transformer")
def sdatt_double_transformer(args):
    """syntax_transformer sizes, double context."""
    _sdatt_defaults(args, "double")
    syntax_transformer(args)


@register_model_architecture("sdatt_transformer", "sdatt_double_transformer_iwslt_de_en")
def sdatt_double_transformer_iwslt_de_en(args):
    """syntax_transformer_iwslt_de_en sizes, double context."""
    _sdatt_defaults(args, "double")
    syntax_transformer_iwslt_de_en(args)


@register_model_architecture("sdatt_transformer", "sdatt_double_transformer_tiny")
def sdatt_double_transformer_tiny(args):
    """syntax_transformer_tiny sizes, double context."""
    _sdatt_defaults(args, "double")
    syntax_transformer_tiny(args)
