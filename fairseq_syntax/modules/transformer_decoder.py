"""The Transformer backbone's decoder: fairseq's own, handing the side inputs that
``encoder_out`` carries to the layers that read them."""
from typing import Dict, List, Optional, Sequence

from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor

from fairseq_syntax.modules.transformer_encoder import bound_side_inputs, side_inputs_of


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """fairseq's Transformer decoder; layers get the side inputs they declare (``side_input_keys``)
    from ``encoder_out``, in the beam's order, as ``side_inputs``.

    ``extra["attn"][0]`` ``[B, T, S]``: layer ``alignment_layer`` (default the last, negative from
    the top), averaged over its first ``alignment_heads`` heads, in training and decoding alike, so
    ``--print-alignment`` and ``supervised_attention_cross_entropy`` (Mi et al. 2016) see the same heads.
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn: bool = False,
                 output_projection=None, alignment_layer: Optional[int] = None,
                 alignment_heads: Optional[int] = None, side_input_keys: Sequence[str] = ()):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.side_input_keys = tuple(side_input_keys)
        layers = cfg.decoder.layers
        if alignment_layer is not None:
            if not -layers <= alignment_layer < layers:
                raise ValueError(
                    f"--alignment-layer {alignment_layer} is out of range: the decoder has "
                    f"{layers} layers (0 .. {layers - 1}, or -1 .. -{layers} from the top)"
                )
            alignment_layer %= layers
        heads = cfg.decoder.attention_heads
        if alignment_heads is not None and not 1 <= alignment_heads <= heads:
            raise ValueError(
                f"--alignment-heads {alignment_heads} is out of range: the decoder's "
                f"cross-attention has {heads} heads (--decoder-attention-heads)"
            )
        self.alignment_layer = alignment_layer
        self.alignment_heads = alignment_heads

    def extract_features(self, prev_output_tokens,
                         encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state=None, full_context_alignment: bool = False,
                         alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        if alignment_layer is None:
            alignment_layer = self.alignment_layer
        if alignment_heads is None:
            alignment_heads = self.alignment_heads
        with bound_side_inputs(self.layers, side_inputs_of(encoder_out, self.side_input_keys)):
            return super().extract_features(
                prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                alignment_layer, alignment_heads,
            )
