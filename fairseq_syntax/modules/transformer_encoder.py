"""The Transformer backbone's encoder: fairseq's own, over the right-padded source, carrying
the side inputs the model declared to the layers that read them and into ``encoder_out``."""
import contextlib
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
from fairseq.models.transformer import TransformerEncoderBase
from torch import Tensor

from fairseq_syntax.modules.rnn_encoder import LEFT_PADDED_SOURCE

# The keys fairseq's TransformerEncoderBase puts in encoder_out; every other entry (the side
# inputs, and what subclasses add) is one batch-first tensor.
FAIRSEQ_ENCODER_OUT_KEYS = frozenset((
    "encoder_out", "encoder_padding_mask", "encoder_embedding", "encoder_states",
    "fc_results", "src_tokens", "src_lengths",
))


def side_inputs_of(encoder_out: Optional[Dict[str, List[Tensor]]],
                   keys: Sequence[str]) -> Dict[str, Tensor]:
    """The side inputs ``keys`` that ``encoder_out`` carries, as ``{key: [B, ...] tensor}``."""
    if encoder_out is None:
        return {}
    return {k: encoder_out[k][0] for k in keys if len(encoder_out.get(k, ())) > 0}


@contextlib.contextmanager
def bound_side_inputs(layers: nn.Module, side_inputs: Dict[str, Tensor]):
    """Give every layer of ``layers`` (a ModuleList) that reads side inputs (its
    ``side_input_keys``) the batch's side inputs as its ``side_inputs`` attribute for the
    duration of one forward (fairseq's layer loop passes only ``x`` and masks), and take
    them away afterwards."""
    # children(), not iteration: a LayerDropModuleList's iterator skips layers at random
    bound = [layer for layer in layers.children() if getattr(layer, "side_input_keys", ())]
    for layer in bound:
        missing = [name for name in layer.side_input_keys if name not in side_inputs]
        if missing:
            raise ValueError(
                f"{type(layer).__name__} needs {', '.join(missing)} in the batch; train and "
                "decode with --task syntax_translation on a data-bin made by "
                "fairseq-syntax-preprocess"
            )
        layer.side_inputs = side_inputs
    try:
        yield
    finally:
        for layer in bound:
            layer.side_inputs = None


class SyntaxTransformerEncoder(TransformerEncoderBase):
    """fairseq's Transformer encoder (the one ``--arch transformer`` builds, with its own
    initialisation) over the right-padded source of ``--task syntax_translation``.

    fairseq builds the key padding mask from ``src_tokens.eq(pad)`` and the positions
    with ``make_positions`` (counting non-padding tokens from the left), so a
    right-padded sentence gets the same positions 1..n, and the same output, as the
    left-padded one of ``--task translation``. The side inputs ``side_input_keys`` (those
    the model declared, e.g. ``src_heads``) are handed to the layers that read them
    (:func:`bound_side_inputs`) and returned in ``encoder_out`` as one-element lists, batch
    first, so that :meth:`reorder_encoder_out` reorders them with the beam and the
    decoder's layers can read them; other keyword inputs are ignored.
    """

    def __init__(self, cfg, dictionary, embed_tokens, side_input_keys: Sequence[str] = (),
                 **kwargs):
        super().__init__(cfg, dictionary, embed_tokens, **kwargs)
        self.side_input_keys = tuple(side_input_keys)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None,
                **side_inputs):
        if src_tokens[:, 0].eq(self.padding_idx).any():
            raise ValueError(LEFT_PADDED_SOURCE)
        side = {k: side_inputs[k] for k in self.side_input_keys if k in side_inputs}
        with bound_side_inputs(self.layers, side):
            encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens,
                                          token_embeddings)
        encoder_out.update({k: [v] for k, v in side.items()})
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for name, value in encoder_out.items():
            if name not in FAIRSEQ_ENCODER_OUT_KEYS and len(value) > 0 and torch.is_tensor(value[0]):
                reordered[name] = [value[0].index_select(0, new_order)]
        return reordered
