"""Syntax-distance cross-attention: SDAtt (Chen et al. 2017, eqs. 5, 9-11; double context eq. 14)
on the Transformer's encoder-decoder attention.

Each chosen head ``h`` predicts ``p[t, h] = L · sigmoid(s · v_hᵀ tanh(W_h x_t))`` (eq. 5, ``L``
the last word and ``s`` the logit scale, as in :mod:`~fairseq_syntax.modules.local_attention`)
from its query ``x_t``; the tree distance row ``M[p]`` (eq. 9) is interpolated between ``⌊p⌋``
and ``⌈p⌉`` so the predictor gets a gradient, and the Gaussian (eq. 10) is added to the logits
in log space::

    logit[t, h, j] = q·k / √d - M[p][j]² / 2σ²   on N = {j real : M[p][j] <= max(n, min_k M[p][k])}

and the lowest finite value outside ``N`` (eq. 11): the RNN's ``--syntax-gaussian weights``
reading.  ``σ = n/2``, ``n = 4``.  The row's smallest distance is taken out of the bias (same
softmax, bias in ``[-n²/2σ², 0]``, exact in half precision).  Double context: the chosen heads
keep their global softmax and add a syntax-directed one; output ``out_proj(c^g) + W_s(c^s)``
(eq. 14's ``L_cg c^g + L_cs c^s``); the global weights are returned.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from fairseq_syntax.modules.chosen_layers import ChosenLayers, wrap_layer
from fairseq_syntax.modules.local_attention import distance_rows, last_words
from fairseq_syntax.syntax.side_values import EOS_DISTANCE, PAD_DISTANCE
from fairseq_syntax.modules.transformer_decoder import SyntaxTransformerDecoder


class HeadPositionPredictor(nn.Module):
    """One eq. 5 predictor per head: ``p[b, h, t] = L_b · sigmoid(s · v_hᵀ tanh(W_h x[t, b]))``,
    ``L_b`` the last word (:func:`~fairseq_syntax.modules.local_attention.last_words`: never
    eos), ``s`` the logit scale (as the RNN's :class:`~fairseq_syntax.modules.local_attention.
    PositionPredictor`; the paper's ``s = 1``).

    ``W_h`` is ``[hidden_dim, embed_dim]`` (all heads' in one Linear, Xavier-uniform as
    fairseq's projections), ``v_h`` ``[hidden_dim]`` ~ N(0, 1/hidden_dim).
    """

    def __init__(self, embed_dim: int, heads: int, hidden_dim: int, logit_scale: float = 1.0):
        super().__init__()
        self.heads, self.hidden_dim = heads, hidden_dim
        self.logit_scale = float(logit_scale)
        self.proj = nn.Linear(embed_dim, heads * hidden_dim, bias=False)
        self.v = nn.Parameter(torch.empty(heads, hidden_dim))
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.normal_(self.v, std=hidden_dim ** -0.5)

    def forward(self, query: Tensor, last_position: Tensor) -> Tensor:
        """``query`` ``[T, B, D]``, ``last_position`` ``[B]`` -> ``[B, K, T]`` float32 in ``[0, L]``."""
        tgt_len, bsz, _ = query.shape
        hidden = torch.tanh(self.proj(query)).view(tgt_len, bsz, self.heads, self.hidden_dim)
        # [T, B, K], in float32 as p's precision matters
        logit = (hidden.float() * self.v.float()).sum(-1) * self.logit_scale
        return last_position.float()[:, None, None] * torch.sigmoid(logit).permute(1, 2, 0)


def syntax_distance_logits(scores: Tensor, rows: Tensor, padding_mask: Tensor,
                           max_distance: float, sigma: float) -> Tensor:
    """``scores - M[p][j]² / 2σ²`` on ``N`` (eq. 11), the dtype's lowest finite value outside it.

    ``scores`` ``[B, K, T, S]`` (``-inf`` allowed at padding), ``rows`` ``[B, K, T, S]`` float32,
    ``padding_mask`` ``[B, S]`` -> finite ``[B, K, T, S]`` in ``scores.dtype``, computed in float32.
    """
    pad = padding_mask[:, None, None, :]
    nearest = rows.masked_fill(pad, float("inf")).amin(-1, keepdim=True).detach()
    outside = rows.gt(nearest.clamp(min=float(max_distance))) | pad
    inside_rows = torch.where(outside, nearest, rows)
    bias = (nearest.pow(2) - inside_rows.pow(2)) / (2.0 * sigma * sigma)
    lowest = torch.finfo(scores.dtype).min
    logits = (scores.float() + bias).masked_fill(outside, lowest).clamp(min=lowest)
    return logits.to(scores.dtype)


class SyntaxDistanceCrossAttention(MultiheadAttention):
    """fairseq's cross-attention whose first ``sdatt_heads`` heads are syntax-directed; :attr:`distances`
    ``[B, S, S]`` is set by the layer for one forward.

    Single context: the bias goes in through fairseq's ``apply_sparse_mask`` hook (``static_kv``
    never takes the fused path).  Double context: built from fairseq's ``before_softmax`` logits.
    """

    def __init__(self, embed_dim: int, num_heads: int, sdatt_heads: int, max_distance: float,
                 sigma: float, double_context: bool = False, logit_scale: float = 1.0,
                 **kwargs):
        super().__init__(embed_dim, num_heads, encoder_decoder_attention=True, **kwargs)
        if not 1 <= sdatt_heads <= num_heads:
            raise ValueError(f"--sdatt-heads {sdatt_heads}: the decoder's cross-attention has "
                             f"{num_heads} heads (--decoder-attention-heads); give 1 .. {num_heads}")
        if not 0 <= max_distance < EOS_DISTANCE:
            raise ValueError(
                f"--sdatt-distance {max_distance}: give a distance n with 0 <= n < "
                f"{EOS_DISTANCE} (EOS_DISTANCE, eos's distance from every word)")
        if not sigma > 0:
            raise ValueError(f"--sdatt-sigma must be > 0, got {sigma}")
        self.sdatt_heads = sdatt_heads
        self.max_distance = float(max_distance)
        self.sigma = float(sigma)
        self.double_context = double_context
        self.predictor = HeadPositionPredictor(embed_dim, sdatt_heads, self.head_dim, logit_scale)
        self.syntax_out_proj = None
        if double_context:
            self.syntax_out_proj = nn.Linear(sdatt_heads * self.head_dim, embed_dim, bias=False)
            nn.init.xavier_uniform_(self.syntax_out_proj.weight)
        self.skip_embed_dim_check = True  # fairseq's path only (its one other effect: no size assert)
        self.distances: Optional[Tensor] = None
        self._syntax: Optional[Tuple[Tensor, Tensor]] = None
        self.last_positions: Optional[Tensor] = None  # [B, K, T] of the last forward (analysis)

    def extra_repr(self) -> str:
        return (f"sdatt_heads={self.sdatt_heads}, max_distance={self.max_distance}, "
                f"sigma={self.sigma}, double_context={self.double_context}, "
                f"logit_scale={self.predictor.logit_scale}")

    def syntax_rows(self, query: Tensor) -> Tuple[Tensor, Tensor]:
        """``M[p]`` ``[B, K, T, S]`` for the predicted positions and the padding mask ``[B, S]``."""
        distances = self.distances
        if distances is None:
            raise RuntimeError("SyntaxDistanceCrossAttention needs distances for this forward")
        tgt_len, bsz, _ = query.shape
        if distances.size(0) != bsz:  # the encoder output is shared by bsz / kv_bsz queries
            distances = distances.repeat_interleave(bsz // distances.size(0), dim=0)
        padding = distances.diagonal(dim1=1, dim2=2).eq(PAD_DISTANCE)
        last = (~padding).sum(1) - 1
        positions = self.predictor(query, last_words(last))  # a word, never eos
        self.last_positions = positions.detach()
        rows = distance_rows(distances, positions.flatten(1), last)
        return rows.view(bsz, self.sdatt_heads, tgt_len, -1), padding

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False):
        rows, padding = self.syntax_rows(query)
        if key is not None and rows.size(-1) != key.size(0):
            raise ValueError(f"src_distances is {rows.size(-1)} wide but the source is "
                             f"{key.size(0)} positions: the side inputs do not match the batch")
        if not self.double_context or before_softmax:
            # single context: the chosen heads' logits are biased; double context asked for
            # its logits (before_softmax): the global ones, unbiased
            self._syntax = None if self.double_context else (rows, padding)
            try:
                return super().forward(query, key, value, key_padding_mask, incremental_state,
                                       need_weights, static_kv, attn_mask, before_softmax,
                                       need_head_weights)
            finally:
                self._syntax = None
        logits, v = super().forward(query, key, value, key_padding_mask, incremental_state,
                                    static_kv=static_kv, attn_mask=attn_mask, before_softmax=True)
        return self._double_context(query, logits, v, rows, padding, need_weights or need_head_weights,
                                    need_head_weights)

    def apply_sparse_mask(self, attn_weights: Tensor, tgt_len: int, src_len: int, bsz: int):
        if self._syntax is None:
            return attn_weights
        rows, padding = self._syntax
        k = self.sdatt_heads
        scores = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        biased = syntax_distance_logits(scores[:, :k], rows, padding, self.max_distance, self.sigma)
        return torch.cat([biased, scores[:, k:]], dim=1).view(bsz * self.num_heads, tgt_len, src_len)

    def _double_context(self, query: Tensor, logits: Tensor, v: Tensor, rows: Tensor,
                        padding: Tensor, need_weights: bool, need_head_weights: bool):
        """Eq. 14: ``out_proj(c^g) + W_s(c^s)`` from fairseq's logits ``[B·H, T, S]`` (padding
        at ``-inf``) and values ``[B'·H, S, d]``; the softmax, dropout and weights as in
        fairseq's :class:`MultiheadAttention`."""
        tgt_len, bsz, embed_dim = query.shape
        heads, k, src_len = self.num_heads, self.sdatt_heads, logits.size(-1)
        scores = logits.view(bsz, heads, tgt_len, src_len)
        global_float = utils.softmax(scores, dim=-1)
        syntax_logits = syntax_distance_logits(scores[:, :k], rows, padding, self.max_distance,
                                               self.sigma)
        syntax_float = utils.softmax(syntax_logits, dim=-1)
        probs = self.dropout_module(torch.cat([global_float, syntax_float], dim=1).type_as(logits))
        v = v.view(-1, heads, src_len, self.head_dim)
        if v.size(0) != bsz:
            v = v.repeat_interleave(bsz // v.size(0), dim=0)
        contexts = torch.matmul(probs, torch.cat([v, v[:, :k]], dim=1))  # [B, H + K, T, d]
        contexts = contexts.permute(2, 0, 1, 3)  # [T, B, H + K, d]
        attn = self.out_proj(contexts[:, :, :heads].reshape(tgt_len, bsz, embed_dim))
        attn = attn + self.syntax_out_proj(contexts[:, :, heads:].reshape(tgt_len, bsz, -1))
        weights = None
        if need_weights:
            weights = global_float.transpose(1, 0)  # [H, B, T, S]
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights


class SyntaxDistanceDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with a :class:`SyntaxDistanceCrossAttention`; it reads the
    batch's ``src_distances`` (handed over by the decoder, in the beam's order)."""

    side_input_keys = ("src_distances",)

    def __init__(self, cfg, no_encoder_attn: bool, sdatt_heads: int, max_distance: float,
                 sigma: float, double_context: bool, logit_scale: float = 1.0):
        if no_encoder_attn:
            raise ValueError("syntax-distance cross-attention needs the cross-attention: "
                             "drop --no-cross-attention")
        self.sdatt_options = dict(sdatt_heads=sdatt_heads, max_distance=max_distance,
                                  sigma=sigma, double_context=double_context,
                                  logit_scale=logit_scale)
        super().__init__(cfg, no_encoder_attn)
        self.side_inputs = None

    def build_encoder_attention(self, embed_dim, cfg):
        if getattr(cfg.encoder, "xformers_att_config", None) is not None:
            raise ValueError("syntax-distance cross-attention runs on fairseq's attention "
                             "path: drop --encoder-xformers-att-config")
        return SyntaxDistanceCrossAttention(
            embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
            **self.sdatt_options,
        )

    def forward(self, x, encoder_out: Optional[Tensor] = None,
                encoder_padding_mask: Optional[Tensor] = None, incremental_state=None,
                *args, **kwargs):
        self.encoder_attn.distances = self.side_inputs["src_distances"]
        try:
            return super().forward(x, encoder_out, encoder_padding_mask, incremental_state,
                                   *args, **kwargs)
        finally:
            self.encoder_attn.distances = None


class SyntaxDistanceDecoder(SyntaxTransformerDecoder):
    """The backbone's decoder whose layers ``sdatt_layers`` (all by default) are
    :class:`SyntaxDistanceDecoderLayer`."""

    def __init__(self, cfg, dictionary, embed_tokens, sdatt_layers, sdatt_heads: Optional[int],
                 max_distance: float, sigma: Optional[float], double_context: bool,
                 logit_scale: float = 1.0, **kwargs):
        layers = cfg.decoder.layers
        self.sdatt_layers = ChosenLayers(
            "--sdatt-layers", range(layers) if sdatt_layers is None else sdatt_layers,
            layers, "decoder")
        self.sdatt_options = dict(
            sdatt_heads=cfg.decoder.attention_heads if sdatt_heads is None else sdatt_heads,
            max_distance=max_distance,
            sigma=max_distance / 2.0 if sigma is None else sigma,
            double_context=double_context,
            logit_scale=logit_scale,
        )
        super().__init__(cfg, dictionary, embed_tokens, **kwargs)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if not self.sdatt_layers.next_is_chosen():
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return wrap_layer(SyntaxDistanceDecoderLayer(cfg, no_encoder_attn, **self.sdatt_options),
                          cfg)
