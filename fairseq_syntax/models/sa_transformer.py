"""Model ``sa_transformer``: structured attention (SA-NMT; Tran & Bisk 2018, §4.1) in the
Transformer's encoder.

Layers ``--sa-layers`` (default the top one, where Tran & Bisk select heads) get ``--sa-heads``
(default 1) heads weighted by matrix-tree marginals over the source words
(:mod:`fairseq_syntax.modules.tree_marginal_attention`); trees are induced, no side input.
``fairseq-syntax-induced-trees`` scores them as for the RNN models (Table 3, ``SA`` group).

================================  ========================================
architecture                      sizes
================================  ========================================
``sa_transformer``                ``syntax_transformer`` (fairseq ``transformer``)
``sa_transformer_iwslt_de_en``    ``syntax_transformer_iwslt_de_en``
``sa_transformer_tiny``           ``syntax_transformer_tiny``
================================  ========================================
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_syntax.models.syntax_transformer import (
    SyntaxTransformerModel,
    option,
    syntax_transformer,
    syntax_transformer_iwslt_de_en,
    syntax_transformer_tiny,
)
from fairseq_syntax.modules.chosen_layers import parse_layers
from fairseq_syntax.modules.structured_attention import ARC_SCORE_CLAMP
from fairseq_syntax.modules.tree_marginal_attention import TreeMarginalEncoder


@register_model("sa_transformer")
class SATransformerModel(SyntaxTransformerModel):
    """The Transformer backbone with tree-marginal self-attention heads in its encoder."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--sa-heads", type=int, metavar="K",
            help="structured heads in each SA encoder layer: the first K self-attention heads "
            "attend with dependency-tree marginals (default: 1)")
        parser.add_argument(
            "--sa-layers", type=str, metavar="I,J,...",
            help="comma-separated encoder layers (0 = the bottom one) that have structured "
            "heads (default: the top layer, as Tran & Bisk's head selection on the encoder "
            "output); fairseq-syntax-induced-trees reads the highest of them")
        parser.add_argument(
            "--sa-arc-score-clamp", action="store_true",
            help="clamp the scaled arc and root scores of the structured heads to [-5, 7] "
            "before the matrix-tree marginals, as the authors' code and the sa_nmt* RNN models "
            "(default: off; the synthetic results in docs/RESULTS.md are unclamped)")

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        layers = parse_layers(cfg, "sa_layers", "encoder")
        return TreeMarginalEncoder(cfg, src_dict, embed_tokens, tree_layers=layers,
                                   tree_heads=option(cfg, "sa_heads", 1),
                                   arc_score_clamp=(ARC_SCORE_CLAMP if safe_getattr(
                                       cfg, "sa_arc_score_clamp", False) else None),
                                   side_input_keys=cls.side_input_keys(cfg))


def _sa_defaults(args):
    args.sa_heads = option(args, "sa_heads", 1)
    args.sa_layers = option(args, "sa_layers", None)
    args.sa_arc_score_clamp = option(args, "sa_arc_score_clamp", False)


@register_model_architecture("sa_transformer", "sa_transformer")
def sa_transformer(args):
    _sa_defaults(args)
    syntax_transformer(args)


@register_model_architecture("sa_transformer", "sa_transformer_iwslt_de_en")
def sa_transformer_iwslt_de_en(args):
    _sa_defaults(args)
    syntax_transformer_iwslt_de_en(args)


@register_model_architecture("sa_transformer", "sa_transformer_tiny")
def sa_transformer_tiny(args):
    _sa_defaults(args)
    syntax_transformer_tiny(args)
