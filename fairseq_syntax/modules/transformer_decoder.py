"""The Transformer backbone's decoder: fairseq's own, handing the side inputs that
``encoder_out`` carries to the layers that need them."""
from typing import Dict, List, Optional

from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor

from fairseq_syntax.modules.transformer_encoder import bound_side_inputs, side_inputs_of


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """fairseq's Transformer decoder (the one ``--arch transformer`` builds, with its own
    initialisation and incremental state). Layers that declare ``syntax_inputs`` get the
    side inputs of ``encoder_out`` (in the beam's current order) as ``side_inputs`` for
    the duration of each forward. ``extra["attn"][0]`` is ``[B, T, S]``, one layer's
    cross-attention averaged over heads (fairseq: the last layer, all heads), over the
    source positions (tokens then eos, right-padded), in training too.
    """

    def extract_features(self, prev_output_tokens,
                         encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state=None, full_context_alignment: bool = False,
                         alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        with bound_side_inputs(self.layers, side_inputs_of(encoder_out)):
            return super().extract_features(
                prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                alignment_layer, alignment_heads,
            )
