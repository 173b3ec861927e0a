"""The backbone decoder: stacked LSTM with input feeding around a pluggable attentional layer."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from fairseq_syntax.modules.lstm_cell import lstm_update
from fairseq_syntax.modules.step_product import read_every_step, step_product

STATE_KEY = "rnn_state"
EXTRA = "extra."  # prefix of the per-step outputs an attentional layer puts in its state


class RNNDecoder(FairseqIncrementalDecoder):
    """Stacked LSTM decoder with input feeding (Luong et al. 2015, section 3.3).

    Step ``t``: ``h_t = LSTM([y_{t-1}; h̃_{t-1}], h_{t-1})``; the ``attention`` module
    (see :class:`~fairseq_syntax.modules.global_attention.GlobalAttentionLayer` for its
    interface) turns the top ``h_t`` into ``h̃_t`` and the weights over source positions;
    ``p(y_t) = softmax(W_s h̃_t)``, with ``W_s`` factored through ``out_embed_dim`` when
    that differs from ``h̃``'s size (fairseq lstm's ``additional_fc``). Dropout follows
    fairseq's lstm: on ``h̃_t`` before input feeding and the output layer, and after the
    projection. The initial state ``(h_0, c_0)`` of every layer is the encoder's
    ``summary_hidden``/``summary_cell``, projected only when its size differs from the
    decoder's, as in fairseq's lstm.

    The decoder state (LSTM states, ``h̃``, and the attention module's own state) is one
    flat dict of batch-first tensors, cached in the incremental state and reordered for
    beam search as a whole. Attention weights are returned in training and in
    generation as ``extra["attn"][0]``, ``[B, T, S]`` over the source positions
    (tokens then eos, right-padded) that the alignments use. When the layer attends over
    more than the source positions (tree2seq: the words, then ``M`` phrase rows),
    ``extra["memory_attn"][0]`` ``[B, T, S + M]`` holds all its weights. A layer may also
    put per-step ``[B, ...]`` tensors in the state it returns under keys ``"extra." +
    name``: they are not kept in the state but come back stacked over the steps as
    ``extra[name][0]`` ``[B, T, ...]`` (local-p: ``attn_before_gaussian``, which the
    supervised-attention criterion reads).
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 dropout: float, encoder_dim: int, attention: nn.Module,
                 share_input_output_embed: bool = False, out_embed_dim: Optional[int] = None):
        super().__init__(dictionary)
        self.dropout = dropout
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=padding_idx)
        nn.init.normal_(self.embed_tokens.weight, mean=0, std=embed_dim ** -0.5)
        nn.init.constant_(self.embed_tokens.weight[padding_idx], 0)
        self.attention = attention
        feed_dim = attention.output_dim
        self.layers = nn.ModuleList(
            nn.LSTMCell(embed_dim + feed_dim if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        project = encoder_dim != hidden_size  # else the encoder's final states themselves
        self.init_hidden = nn.Linear(encoder_dim, hidden_size) if project else None
        self.init_cell = nn.Linear(encoder_dim, hidden_size) if project else None
        out_embed_dim = out_embed_dim or feed_dim
        if share_input_output_embed and out_embed_dim != embed_dim:
            raise ValueError(
                f"tied embeddings need --decoder-out-embed-dim equal to --decoder-embed-dim "
                f"({embed_dim}), got {out_embed_dim}"
            )
        self.project_out = nn.Linear(feed_dim, out_embed_dim) if out_embed_dim != feed_dim else None
        self.fc_out = nn.Linear(out_embed_dim, len(dictionary))
        if share_input_output_embed:
            self.fc_out.weight = self.embed_tokens.weight

    def initial_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        hidden, cell = encoder_out["summary_hidden"], encoder_out["summary_cell"]
        if self.init_hidden is not None:
            hidden, cell = self.init_hidden(hidden), self.init_cell(cell)
        state = {"input_feed": hidden.new_zeros(hidden.size(0), self.attention.output_dim)}
        for i in range(self.num_layers):  # one tensor per layer: no stacking or slicing per step
            state[f"hidden{i}"], state[f"cell{i}"] = hidden, cell
        for key, value in self.attention.init_state(encoder_out).items():
            state["attention." + key] = value
        return state

    def step_weights(self) -> Optional[List[Tuple[Tensor, Tensor]]]:
        """Per layer ``([W_ih W_hh]ᵀ, b_ih + b_hh)`` with the weights' gradient formed once per
        batch (:mod:`~fairseq_syntax.modules.step_product`); None without gradients (generation)."""
        if not torch.is_grad_enabled():
            return None
        # [K, 4H] contiguous: on CPU the step's product and its backward are faster than on Wᵀ views
        return [(read_every_step(torch.cat([cell.weight_ih, cell.weight_hh], dim=1).t().contiguous()),
                 cell.bias_ih + cell.bias_hh) for cell in self.layers]

    def step(self, embedded: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor],
             dropout_mask: Optional[Tensor] = None, lstm_weights: Optional[List[Tuple[Tensor, Tensor]]] = None):
        """One decoding step: ``[B, E]`` embedded previous token -> (h̃_t, weights, state,
        the layer's per-step extras); ``dropout_mask`` (scaled, ``[B, F]``) is applied to
        ``h̃_t``; ``lstm_weights``: :meth:`step_weights`, else the LSTM cells run as they are."""
        x = [embedded, state["input_feed"]]
        new_state = {}
        for i, cell in enumerate(self.layers):
            if lstm_weights is None:
                h, c = cell(torch.cat(x, dim=-1), (state[f"hidden{i}"], state[f"cell{i}"]))
            else:
                h, c = lstm_cell([*x, state[f"hidden{i}"]], state[f"cell{i}"], *lstm_weights[i])
            if i + 1 < self.num_layers:
                x = [F.dropout(h, p=self.dropout, training=self.training)]
            new_state[f"hidden{i}"], new_state[f"cell{i}"] = h, c
        attention_state = {k[len("attention."):]: v for k, v in state.items() if k.startswith("attention.")}
        out, weights, attention_state = self.attention(h, encoder_out, attention_state)
        extras = {k[len(EXTRA):]: v for k, v in attention_state.items() if k.startswith(EXTRA)}
        if dropout_mask is not None:
            out = out * dropout_mask
        new_state["input_feed"] = out
        new_state.update({"attention." + k: v for k, v in attention_state.items()
                          if not k.startswith(EXTRA)})
        return out, weights, new_state, extras

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **kwargs):
        state = None
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            state = self.get_incremental_state(incremental_state, STATE_KEY)
        if state is None:
            state = self.initial_state(encoder_out)
        embedded = F.dropout(self.embed_tokens(prev_output_tokens), p=self.dropout, training=self.training)
        bsz, steps = prev_output_tokens.size()
        masks = [None] * steps  # dropout on h̃_t, drawn for all steps at once
        if self.training and self.dropout > 0:
            masks = F.dropout(embedded.new_ones(bsz, steps, self.attention.output_dim), p=self.dropout).unbind(1)
        outs: List[Tensor] = []
        attns: List[Tensor] = []
        step_extras: Dict[str, List[Tensor]] = {}
        lstm_weights = self.step_weights()
        # unbind, not embedded[:, t]: one gradient of [B, T, E] for all steps, not one per step
        for t, embedded_t in enumerate(embedded.unbind(1)):
            out, weights, state, extras = self.step(embedded_t, encoder_out, state, masks[t], lstm_weights)
            outs.append(out)
            attns.append(weights)
            for key, value in extras.items():
                step_extras.setdefault(key, []).append(value)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, STATE_KEY, state)
        src_len = encoder_out["padding_mask"].size(1)
        memory_attn = torch.stack(attns, dim=1)
        extra = {"attn": [memory_attn[:, :, :src_len]]}
        if memory_attn.size(2) > src_len:
            extra["memory_attn"] = [memory_attn]
        for key, values in step_extras.items():
            extra[key] = [torch.stack(values, dim=1)]
        return torch.stack(outs, dim=1), extra

    def pre_output(self, features: Tensor) -> Tensor:
        """``h̃_t`` as it enters ``fc_out``: through ``project_out`` (and dropout) if any."""
        if self.project_out is None:
            return features
        return F.dropout(self.project_out(features), p=self.dropout, training=self.training)

    def output_layer(self, features: Tensor) -> Tensor:
        return self.fc_out(self.pre_output(features))

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(features), extra

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        state: Optional[Dict[str, Tensor]] = self.get_incremental_state(incremental_state, STATE_KEY)
        if state is None:
            return
        reordered = {k: v.index_select(0, new_order) for k, v in state.items()}
        self.set_incremental_state(incremental_state, STATE_KEY, reordered)

    def max_positions(self):
        return int(1e5)


def lstm_cell(inputs: List[Tensor], c: Tensor, weight: Tensor, bias: Tensor) -> Tuple[Tensor, Tensor]:
    """``nn.LSTMCell``'s step (gates i, f, g, o) on ``[x; h]`` (``inputs``, concatenated), with
    ``weight = [W_ih W_hh]ᵀ`` and ``bias = b_ih + b_hh``."""
    return lstm_update(step_product(torch.cat(inputs, dim=-1), weight) + bias, c)
