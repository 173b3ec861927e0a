"""Model ``syntax_transformer``: fairseq's Transformer (Vaswani et al. 2017) on
``--task syntax_translation``, the backbone the Transformer mechanisms extend.

==================================  ==========================================================
architecture                        sizes (fairseq's own preset)
==================================  ==========================================================
``syntax_transformer``              ``transformer``: 6 + 6 layers, 512, FFN 2048, 8 heads
``syntax_transformer_iwslt_de_en``  ``transformer_iwslt_de_en``: 6 + 6 layers, 512, FFN
                                    1024, 4 heads
``syntax_transformer_tiny``         ``transformer_tiny``: 2 + 2 layers, 64, FFN 64, 2 heads
==================================  ==========================================================

Every ``--arch transformer`` option applies; encoder and decoder are fairseq's, subclassed, with
fairseq's initialisation (same parameters and outputs as ``transformer_tiny`` from one seed; the
source is right-padded here).  Supervised cross-attention (Mi et al. 2016, eq. 7):
``--criterion supervised_attention_cross_entropy`` supervises layer ``--alignment-layer``
averaged over its first ``--alignment-heads`` heads (as ``transformer_align``), the heads
``--print-alignment`` prints.
"""
from typing import Optional, Set

from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr
from fairseq.models.transformer import (
    TransformerModel,
    base_architecture,
    tiny_architecture,
    transformer_iwslt_de_en,
)

from fairseq_syntax.data.side_inputs import model_input_keys
from fairseq_syntax.modules.transformer_decoder import SyntaxTransformerDecoder
from fairseq_syntax.modules.transformer_encoder import SyntaxTransformerEncoder


@register_model("syntax_transformer")
class SyntaxTransformerModel(TransformerModel):
    """fairseq's Transformer on the right-padded source; mechanisms override ``build_encoder``/
    ``build_decoder`` and declare :meth:`side_inputs`, which layers find in ``side_inputs``.
    """

    decoder_class = SyntaxTransformerDecoder  # a subclass's decoder with the same arguments

    @classmethod
    def side_inputs(cls, cfg) -> Set[str]:
        """Names of :data:`~fairseq_syntax.data.side_inputs.SIDE_INPUTS` read with the options ``cfg``."""
        return set()

    @classmethod
    def side_input_keys(cls, cfg):
        """Batch keys of :meth:`side_inputs`."""
        return model_input_keys(cls.side_inputs(cfg))

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--alignment-layer", type=int, metavar="N",
            help="decoder layer whose cross-attention is returned as extra['attn'] (printed "
            "by --print-alignment, supervised by --criterion "
            "supervised_attention_cross_entropy): 0 is the bottom layer, -1 the top one "
            "(default: the top one, as fairseq's transformer)")
        parser.add_argument(
            "--alignment-heads", type=int, metavar="K",
            help="average the attention of the first K heads of --alignment-layer only, as "
            "fairseq's transformer_align (default: all heads)")

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(cfg, src_dict, embed_tokens,
                                        side_input_keys=cls.side_input_keys(cfg))

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return cls.decoder_class(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention,
            alignment_layer=safe_getattr(cfg, "alignment_layer", None),
            alignment_heads=safe_getattr(cfg, "alignment_heads", None),
            side_input_keys=cls.side_input_keys(cfg),
        )

    def forward(self, src_tokens, src_lengths, prev_output_tokens,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None,
                **side_inputs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens, **side_inputs)
        return self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
        )


def option(cfg, name, default):
    """``cfg.name``, or ``default`` when it is unset or None (an architecture's options)."""
    value = safe_getattr(cfg, name, None)
    return default if value is None else value


@register_model_architecture("syntax_transformer", "syntax_transformer")
def syntax_transformer(args):
    args.alignment_layer = safe_getattr(args, "alignment_layer", None)
    args.alignment_heads = safe_getattr(args, "alignment_heads", None)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "syntax_transformer_iwslt_de_en")
def syntax_transformer_iwslt_de_en(args):
    transformer_iwslt_de_en(args)
    syntax_transformer(args)


@register_model_architecture("syntax_transformer", "syntax_transformer_tiny")
def syntax_transformer_tiny(args):
    tiny_architecture(args)
    syntax_transformer(args)
