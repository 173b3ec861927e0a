"""Model ``pascal_transformer``: parent-scaled self-attention (PASCAL; Bugliarello &
Okazaki 2020, "Enhancing Machine Translation with Dependency-Aware Self-Attention"), the
peer baseline of the syntax-aware Transformers.

The ``syntax_transformer`` backbone whose encoder layers each have ``--pascal-heads``
(default 1, as the paper) self-attention heads whose scores are scaled by a Gaussian
``N(j; p_t, σ²)`` of the distance to the token's dependency parent before the softmax
(:mod:`fairseq_syntax.modules.parent_scaled_attention`). Parameter-free: the model has
the backbone's parameters. It reads the data-bin's heads and words side-files
(``src_heads``, ``src_words``).

==================================  =========================================
architecture                        sizes
==================================  =========================================
``pascal_transformer``              ``syntax_transformer`` (fairseq ``transformer``)
``pascal_transformer_iwslt_de_en``  ``syntax_transformer_iwslt_de_en``
``pascal_transformer_tiny``         ``syntax_transformer_tiny``
==================================  =========================================
"""
from fairseq.models import register_model, register_model_architecture

from fairseq_syntax.models.syntax_transformer import (
    SyntaxTransformerModel,
    option,
    syntax_transformer,
    syntax_transformer_iwslt_de_en,
    syntax_transformer_tiny,
)
from fairseq_syntax.modules.chosen_layers import parse_layers
from fairseq_syntax.modules.parent_scaled_attention import ParentScaledEncoder


@register_model("pascal_transformer")
class PascalTransformerModel(SyntaxTransformerModel):
    """The Transformer backbone with parent-scaled self-attention heads in its encoder."""

    @classmethod
    def side_inputs(cls, cfg):
        return {"heads", "words"}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--pascal-heads", type=int, metavar="K",
            help="parent-scaled heads in each PASCAL encoder layer (the first K heads; "
            "paper: 1)")
        parser.add_argument(
            "--pascal-layers", type=str, metavar="I,J,...",
            help="comma-separated encoder layers (0 = the bottom one) that have PASCAL "
            "heads (default: every layer, as the paper)")
        parser.add_argument(
            "--pascal-sigma", type=float, metavar="S",
            help="standard deviation σ of the Gaussian around the parent position, in "
            "subword positions (paper and authors' default: 1)")
        parser.add_argument(
            "--parent-ignoring", type=float, metavar="Q",
            help="in training, leave each row of a PASCAL head unscaled with probability Q "
            "(the paper's parent ignoring; default 0)")

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        layers = parse_layers(cfg, "pascal_layers", "encoder")
        return ParentScaledEncoder(
            cfg, src_dict, embed_tokens, pascal_layers=layers,
            pascal_heads=option(cfg, "pascal_heads", 1),
            sigma=option(cfg, "pascal_sigma", 1.0),
            parent_ignoring=option(cfg, "parent_ignoring", 0.0),
            side_input_keys=cls.side_input_keys(cfg),
        )


def _pascal_defaults(args):
    args.pascal_heads = option(args, "pascal_heads", 1)
    args.pascal_layers = option(args, "pascal_layers", None)
    args.pascal_sigma = option(args, "pascal_sigma", 1.0)
    args.parent_ignoring = option(args, "parent_ignoring", 0.0)


@register_model_architecture("pascal_transformer", "pascal_transformer")
def pascal_transformer(args):
    _pascal_defaults(args)
    syntax_transformer(args)


@register_model_architecture("pascal_transformer", "pascal_transformer_iwslt_de_en")
def pascal_transformer_iwslt_de_en(args):
    _pascal_defaults(args)
    syntax_transformer_iwslt_de_en(args)


@register_model_architecture("pascal_transformer", "pascal_transformer_tiny")
def pascal_transformer_tiny(args):
    _pascal_defaults(args)
    syntax_transformer_tiny(args)
