"""The Transformer backbone's encoder: fairseq's own, over the right-padded source, carrying
the batch's side inputs to the layers that need them and into ``encoder_out``."""
import contextlib
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq.models.transformer import TransformerEncoderBase
from torch import Tensor

from fairseq_syntax.modules.rnn_encoder import LEFT_PADDED_SOURCE

# The keys fairseq's TransformerEncoderBase puts in encoder_out; every other key is a
# side input (src_heads, src_words, src_distances, src_tree, alignment_links).
FAIRSEQ_ENCODER_OUT_KEYS = frozenset((
    "encoder_out", "encoder_padding_mask", "encoder_embedding", "encoder_states",
    "fc_results", "src_tokens", "src_lengths",
))


def side_inputs_of(encoder_out: Optional[Dict[str, List[Tensor]]]) -> Dict[str, Tensor]:
    """The side inputs an ``encoder_out`` carries, as ``{name: [B, ...] tensor}``."""
    if encoder_out is None:
        return {}
    return {k: v[0] for k, v in encoder_out.items()
            if k not in FAIRSEQ_ENCODER_OUT_KEYS and len(v) > 0 and torch.is_tensor(v[0])}


@contextlib.contextmanager
def bound_side_inputs(layers: nn.Module, side_inputs: Dict[str, Tensor]):
    """Give every layer of ``layers`` (a ModuleList) that declares ``syntax_inputs`` the
    batch's side inputs as its ``side_inputs`` attribute for the duration of one forward
    (fairseq's layer loop passes only ``x`` and masks), and take them away afterwards."""
    # children(), not iteration: a LayerDropModuleList's iterator skips layers at random
    bound = [layer for layer in layers.children() if getattr(layer, "syntax_inputs", ())]
    for layer in bound:
        missing = [name for name in layer.syntax_inputs if name not in side_inputs]
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
    left-padded one of ``--task translation``. Side inputs (``src_heads``,
    ``src_distances``, ...) are handed to the layers that declare them in
    ``syntax_inputs`` (:func:`bound_side_inputs`) and returned in ``encoder_out`` as
    one-element lists, batch first, so that :meth:`reorder_encoder_out` reorders them with
    the beam and the decoder's layers can read them.
    """

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None,
                **side_inputs):
        if src_tokens[:, 0].eq(self.padding_idx).any():
            raise ValueError(LEFT_PADDED_SOURCE)
        side = {k: v for k, v in side_inputs.items() if torch.is_tensor(v)}
        with bound_side_inputs(self.layers, side):
            encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens,
                                          token_embeddings)
        encoder_out.update({k: [v] for k, v in side.items()})
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for name, value in side_inputs_of(encoder_out).items():
            reordered[name] = [value.index_select(0, new_order)]
        return reordered
