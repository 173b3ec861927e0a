"""The backbone encoder: a bidirectional LSTM over the right-padded source."""
from typing import Dict, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqEncoder
from torch import Tensor

# --left-pad-source is a switch without a value in fairseq: it flips the task's default
# (True under --task translation, False under --task syntax_translation).
LEFT_PADDED_SOURCE = (
    "the source is left-padded; syntax models need a right-padded source: under --task "
    "translation (left-padded by default) add --left-pad-source, a switch that turns left "
    "padding off there; under --task syntax_translation (right-padded by default) drop "
    "--left-pad-source"
)


class RNNEncoder(FairseqEncoder):
    """Bidirectional LSTM encoder; its output is a dict of batch-first tensors.

    ``annotations`` ``[B, S, 2H]`` (one per source position, eos included),
    ``padding_mask`` ``[B, S]``, ``summary_hidden``/``summary_cell`` ``[B, 2H]`` (the top
    layer's last forward and first backward states, which initialise the decoder), and
    the batch's side inputs ``side_input_keys`` (those the model declared, e.g.
    ``src_tree``) unchanged; other keyword inputs are ignored.
    ``extensions`` (e.g. a Tree-LSTM or a structured self-attention) each take and
    return that dict, adding or replacing entries. Every tensor in it has the batch on
    dimension 0, so ``reorder_encoder_out`` needs no knowledge of the extensions.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 dropout: float, extensions: Sequence[nn.Module] = (),
                 side_input_keys: Sequence[str] = ()):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, mean=0, std=embed_dim ** -0.5)
        nn.init.constant_(self.embed_tokens.weight[self.padding_idx], 0)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers=num_layers, batch_first=True,
                            bidirectional=True, dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = dropout
        self.output_dim = 2 * hidden_size
        self.extensions = nn.ModuleList(extensions)
        self.side_input_keys = tuple(side_input_keys)

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **side_inputs) -> Dict[str, Tensor]:
        padding_mask = src_tokens.eq(self.padding_idx)
        if padding_mask[:, 0].any():
            raise ValueError(LEFT_PADDED_SOURCE)
        x = F.dropout(self.embed_tokens(src_tokens), p=self.dropout, training=self.training)
        lengths = (~padding_mask).sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed_out, (h, c) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, batch_first=True, total_length=src_tokens.size(1)
        )
        encoder_out = {
            "annotations": F.dropout(out, p=self.dropout, training=self.training),
            "padding_mask": padding_mask,
            "summary_hidden": torch.cat([h[-2], h[-1]], dim=-1),
            "summary_cell": torch.cat([c[-2], c[-1]], dim=-1),
        }
        encoder_out.update({k: side_inputs[k] for k in self.side_input_keys if k in side_inputs})
        for extension in self.extensions:
            encoder_out = extension(encoder_out)
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        return {k: v.index_select(0, new_order) for k, v in encoder_out.items()}

    def max_positions(self):
        return int(1e5)
