"""Model ``tree2seq_transformer``: Tree-to-Sequence attention (Eriguchi et al. 2016) on the
Transformer as a phrase memory (:mod:`fairseq_syntax.modules.phrase_memory`).

A Tree-LSTM (eq. 11) over the encoder's output along ``src_tree`` appends ``n - 1`` phrase rows to
every cross-attention's memory (one softmax, eq. 13).  Leaves have zero cells (no LSTM cells);
eq. 12 has no counterpart (no initial decoder state); a sentence without a parse gets no phrases.
``supervised_attention_cross_entropy`` folds each phrase's weight onto its words.

====================================  ==================================
architecture                          sizes
====================================  ==================================
``tree2seq_transformer``              ``syntax_transformer``
``tree2seq_transformer_iwslt_de_en``  ``syntax_transformer_iwslt_de_en``
``tree2seq_transformer_tiny``         ``syntax_transformer_tiny``
====================================  ==================================
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_syntax.models.syntax_transformer import (
    SyntaxTransformerModel,
    syntax_transformer,
    syntax_transformer_iwslt_de_en,
    syntax_transformer_tiny,
)
from fairseq_syntax.modules.phrase_memory import PhraseMemoryDecoder, PhraseMemoryEncoder


@register_model("tree2seq_transformer")
class TreeToSequenceTransformerModel(SyntaxTransformerModel):
    """The Transformer backbone whose cross-attention memory holds the source's phrases."""

    decoder_class = PhraseMemoryDecoder

    @classmethod
    def side_inputs(cls, cfg):
        return {"tree"}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--tree-forget-bias", type=float, metavar="B",
            help="initial bias of the Tree-LSTM forget gates (Eriguchi et al.: 1.0)")

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return PhraseMemoryEncoder(cfg, src_dict, embed_tokens,
                                   forget_bias=safe_getattr(cfg, "tree_forget_bias", 1.0),
                                   side_input_keys=cls.side_input_keys(cfg))


def _tree_defaults(args):
    if safe_getattr(args, "tree_forget_bias", None) is None:
        args.tree_forget_bias = 1.0


@register_model_architecture("tree2seq_transformer", "tree2seq_transformer")
def tree2seq_transformer(args):
    _tree_defaults(args)
    syntax_transformer(args)


@register_model_architecture("tree2seq_transformer", "tree2seq_transformer_iwslt_de_en")
def tree2seq_transformer_iwslt_de_en(args):
    _tree_defaults(args)
    syntax_transformer_iwslt_de_en(args)


@register_model_architecture("tree2seq_transformer", "tree2seq_transformer_tiny")
def tree2seq_transformer_tiny(args):
    _tree_defaults(args)
    syntax_transformer_tiny(args)
