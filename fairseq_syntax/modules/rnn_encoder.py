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

#: What an encoder extension may ask to see besides the encoder output (its
#: ``encoder_internals``): the top LSTM layer's states before dropout, and its memory cells.
INTERNALS = ("lstm_states", "lstm_cells")


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
    An extension whose ``encoder_internals`` names entries of :data:`INTERNALS` also finds
    them in the dict it takes, ``[B, S, 2H]``: ``lstm_states``, the top layer's hidden
    states before dropout, and ``lstm_cells``, its memory cells (:meth:`memory_cells`,
    one-layer encoders); they leave the dict once the extensions ran.
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
        self.internals = tuple(dict.fromkeys(
            key for extension in extensions for key in getattr(extension, "encoder_internals", ())
        ))
        unknown = set(self.internals) - set(INTERNALS)
        if unknown:
            raise ValueError(f"unknown encoder internals {sorted(unknown)}; known: {INTERNALS}")
        if "lstm_cells" in self.internals and num_layers != 1:
            raise ValueError("the memory cells of every position are recovered for a one-layer "
                             f"encoder only, got {num_layers} layers")

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
        if "lstm_states" in self.internals:
            encoder_out["lstm_states"] = out
        if "lstm_cells" in self.internals:
            encoder_out["lstm_cells"] = self.memory_cells(packed, packed_out, lengths, src_tokens.size(1))
        for extension in self.extensions:
            encoder_out = extension(encoder_out)
        for key in self.internals:
            encoder_out.pop(key, None)
        return encoder_out

    def memory_cells(self, lstm_input, lstm_output, lengths: Tensor, total_length: int) -> Tensor:
        """Memory cells ``[B, total_length, 2H]`` of the one-layer LSTM at every position,
        from what it was called with and returned (:func:`sequential_memory_cells`)."""
        cells = sequential_memory_cells(self.lstm, lstm_input, lstm_output, lengths)
        if cells.size(1) < total_length:
            cells = F.pad(cells, (0, 0, 0, total_length - cells.size(1)))
        return cells

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        return {k: v.index_select(0, new_order) for k, v in encoder_out.items()}

    def max_positions(self):
        return int(1e5)


def _unpack(sequence, total_length: int) -> Tensor:
    if isinstance(sequence, nn.utils.rnn.PackedSequence):
        out, _ = nn.utils.rnn.pad_packed_sequence(sequence, batch_first=True, total_length=total_length)
        return out
    return sequence


def _rows(bias, rows):
    return None if bias is None else bias[rows]


def sequential_memory_cells(lstm: nn.LSTM, layer_input, layer_output, lengths: Tensor) -> Tensor:
    """Memory cells ``c_t`` of a one-layer (bi)directional ``nn.LSTM`` at every position.

    ``nn.LSTM`` returns ``h_t`` for every step but ``c_t`` for the last step only. With
    the step's input ``x_t`` and the previous hidden state ``h_{t-1}`` (its own output
    one step earlier; ``h_{t+1}`` for the backward direction) all gates of all steps are
    one batched product, and ``c_t = f_t ⊙ c_{t-1} + i_t ⊙ g_t`` is an elementwise scan
    over time. The result equals the cells the LSTM computed (and differentiates like
    them: each step is the LSTM's own cell function of the same inputs).

    ``layer_input``/``layer_output``: what the LSTM was called with and returned
    (batch-first, packed or padded); ``lengths [B]``. Returns ``[B, S, H * directions]``
    (forward cells first, like the outputs); zero at padding.
    """
    if lstm.num_layers != 1 or not lstm.batch_first or lstm.proj_size:
        raise ValueError("memory cells can be recovered for a one-layer batch-first LSTM only")
    lengths = lengths.to(layer_input.data.device if hasattr(layer_input, "data") else layer_input.device)
    total = int(lengths.max())
    x = _unpack(layer_input, total)
    out = _unpack(layer_output, total)
    bsz, steps = x.shape[:2]
    hidden = lstm.hidden_size
    real = (torch.arange(steps, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    cells = []
    for direction in range(2 if lstm.bidirectional else 1):
        suffix = "_reverse" if direction else ""
        h = out[..., direction * hidden:(direction + 1) * hidden].masked_fill(~real, 0.0)
        zero = h.new_zeros(bsz, 1, hidden)
        prev_h = torch.cat([h[:, 1:], zero], 1) if direction else torch.cat([zero, h[:, :-1]], 1)
        # c_t needs the input, forget and cell gates only: the first 3H rows of the weights
        # (nn.LSTM orders them i, f, g, o)
        rows = slice(0, 3 * hidden)
        gates = F.linear(x, getattr(lstm, "weight_ih_l0" + suffix)[rows], _rows(getattr(lstm, "bias_ih_l0" + suffix, None), rows))
        gates = gates + F.linear(prev_h, getattr(lstm, "weight_hh_l0" + suffix)[rows], _rows(getattr(lstm, "bias_hh_l0" + suffix, None), rows))
        i, f, g = gates.chunk(3, dim=-1)
        update = (torch.sigmoid(i) * torch.tanh(g)).masked_fill(~real, 0.0)
        forget = torch.sigmoid(f)
        order = range(steps - 1, -1, -1) if direction else range(steps)
        c = h.new_zeros(bsz, hidden)
        per_step = [None] * steps
        for t in order:
            c = forget[:, t] * c + update[:, t]
            per_step[t] = c
        cells.append(torch.stack(per_step, dim=1))
    # the backward scan starts at padding with c = 0 and update 0, so it enters each
    # sentence's last token with c = 0 (f * 0 + 0 stays 0 through the padding)
    return torch.cat(cells, dim=-1).masked_fill(~real, 0.0)
