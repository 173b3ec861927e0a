"""The backbone encoder: a bidirectional LSTM over the right-padded source."""
from typing import Dict, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqEncoder
from torch import Tensor

from fairseq_syntax.modules.lstm_cell import lstm_update
from fairseq_syntax.modules.step_product import read_every_step, step_product

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
    states before dropout, and ``lstm_cells``, its memory cells (one-layer encoders: the
    LSTM then runs step by step, :func:`lstm_states_and_cells`); they leave the dict once
    the extensions ran.
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
        if "lstm_cells" in self.internals:
            out, cells = lstm_states_and_cells(self.lstm, x, ~padding_mask)
            last = (~padding_mask).sum(1) - 1
            summary_hidden, summary_cell = final_states(out, last), final_states(cells, last)
        else:
            lengths = (~padding_mask).sum(1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            packed_out, (h, c) = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(
                packed_out, batch_first=True, total_length=src_tokens.size(1)
            )
            summary_hidden, summary_cell = torch.cat([h[-2], h[-1]], dim=-1), torch.cat([c[-2], c[-1]], dim=-1)
        encoder_out = {
            "annotations": F.dropout(out, p=self.dropout, training=self.training),
            "padding_mask": padding_mask,
            "summary_hidden": summary_hidden,
            "summary_cell": summary_cell,
        }
        encoder_out.update({k: side_inputs[k] for k in self.side_input_keys if k in side_inputs})
        if "lstm_states" in self.internals:
            encoder_out["lstm_states"] = out
        if "lstm_cells" in self.internals:
            encoder_out["lstm_cells"] = cells
        for extension in self.extensions:
            encoder_out = extension(encoder_out)
        for key in self.internals:
            encoder_out.pop(key, None)
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        return {k: v.index_select(0, new_order) for k, v in encoder_out.items()}

    def max_positions(self):
        return int(1e5)


def lstm_states_and_cells(lstm: nn.LSTM, x: Tensor, real: Tensor) -> Tuple[Tensor, Tensor]:
    """Hidden states and memory cells ``[B, S, H * directions]`` of a one-layer batch-first
    ``nn.LSTM`` at every position of the right-padded ``x [B, S, E]`` (``real [B, S]``: True at
    tokens), both zero at padding.

    ``nn.LSTM`` returns ``h_t`` for every step but ``c_t`` for the last step only, so this runs
    the same LSTM (its own weights and gate order i, f, g, o) step by step:
    ``c_t = f_t ⊙ c_{t-1} + i_t ⊙ g_t``, ``h_t = o_t ⊙ tanh(c_t)``, the input projection of all
    steps one product, and so is the recurrent weights' gradient (:mod:`~fairseq_syntax.modules.step_product`).
    Zeroing ``h`` and ``c`` at padding restarts the backward direction from zero state at each
    sentence's last token: ``h`` equals ``nn.LSTM``'s output on the packed sequence.
    """
    if lstm.num_layers != 1 or not lstm.batch_first or lstm.proj_size:
        raise ValueError("states and cells of every position: a one-layer batch-first LSTM only")
    steps = x.size(1)
    keep = real.unsqueeze(-1).to(x.dtype).unbind(1)
    states, cells = [], []
    for direction in range(2 if lstm.bidirectional else 1):
        suffix = "_reverse" if direction else ""
        bias = getattr(lstm, "bias_ih_l0" + suffix) + getattr(lstm, "bias_hh_l0" + suffix) if lstm.bias else None
        inputs = F.linear(x, getattr(lstm, "weight_ih_l0" + suffix), bias).unbind(1)
        recurrent = read_every_step(getattr(lstm, "weight_hh_l0" + suffix).t().contiguous())
        h = c = x.new_zeros(x.size(0), lstm.hidden_size)
        h_steps, c_steps = [None] * steps, [None] * steps
        for t in (range(steps - 1, -1, -1) if direction else range(steps)):
            h, c = lstm_update(inputs[t] + step_product(h, recurrent), c)
            h, c = h * keep[t], c * keep[t]
            h_steps[t], c_steps[t] = h, c
        states.append(torch.stack(h_steps, dim=1))
        cells.append(torch.stack(c_steps, dim=1))
    return torch.cat(states, dim=-1), torch.cat(cells, dim=-1)


def final_states(per_position: Tensor, last: Tensor) -> Tensor:
    """``[B, S, 2H]`` states of a bidirectional LSTM -> ``[B, 2H]``: the forward direction's at
    the last token ``last [B]``, the backward direction's at the first (``nn.LSTM``'s ``h_n``)."""
    hidden = per_position.size(-1) // 2
    rows = torch.arange(per_position.size(0), device=per_position.device)
    return torch.cat([per_position[rows, last, :hidden], per_position[:, 0, hidden:]], dim=-1)
