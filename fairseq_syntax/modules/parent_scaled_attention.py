"""Parent-scaled self-attention (PASCAL; Bugliarello & Okazaki 2020, §3).

A PASCAL head scales its scores by a Gaussian around each token's dependency parent::

    S̃[t, j] = (Q Kᵀ / √d)[t, j] · N(j; p_t, σ²),    head = softmax(S̃) V

``N`` a density as in the paper and the authors' code.  Pieces inherit their word's parent; a
parent word in pieces sits at their mean position (the authors' "mean" variant); the root word
and ``eos`` are their own parents.  Parent ignoring (§3): in training a row stays unscaled with
probability ``q``.  Deviations from e-bug/pascal (bugs there): it scales all heads of the last
sentences instead of the first ``P`` heads of each, and it mixes unpadded parent positions with
left-padded columns; here the source is right-padded.
"""
import math
from typing import Optional

import torch
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from fairseq_syntax.syntax.side_values import EOS_WORD, WORD_PAD
from fairseq_syntax.modules.chosen_layers import ChosenLayers, wrap_layer
from fairseq_syntax.modules.transformer_encoder import SyntaxTransformerEncoder


def parent_positions(heads: Tensor, words: Tensor) -> Tensor:
    """``[B, S]`` float position ``p_t`` of each position's parent, from ``src_heads`` and ``src_words``.

    A piece's parent is its word's head word (the root: itself) at the mean position of its pieces;
    eos is its own parent; padding gets 0.
    """
    real = words.ne(WORD_PAD)
    same_word = (words[:, :, None] == words[:, None, :]) & real[:, :, None] & real[:, None, :]
    positions = torch.arange(words.size(1), device=words.device, dtype=torch.float32)
    centre = (same_word.float() @ positions) / same_word.sum(-1).clamp(min=1)  # [B, S]
    first_piece = same_word.float().argmax(-1)  # first position of each token's word
    head_of_word = heads.gather(1, first_piece)
    is_root = head_of_word.lt(0) | words.eq(EOS_WORD)
    parent = centre.gather(1, head_of_word.clamp(min=0))
    return torch.where(is_root, centre, parent).masked_fill(~real, 0.0)


def parent_gaussian(parents: Tensor, sigma: float) -> Tensor:
    """``[B, S, S]`` float ``N(j; p_t, σ²)``."""
    j = torch.arange(parents.size(1), device=parents.device, dtype=torch.float32)
    d = j[None, None, :] - parents[:, :, None]
    return torch.exp(-d * d / (2.0 * sigma * sigma)) / math.sqrt(2.0 * math.pi * sigma * sigma)


class ParentScaledSelfAttention(MultiheadAttention):
    """fairseq's self-attention whose first ``pascal_heads`` heads scale ``Q Kᵀ / √d`` by
    :attr:`parent_weights` ``[B, S, S]`` through fairseq's ``apply_sparse_mask`` hook;
    ``skip_embed_dim_check`` keeps fairseq's path (the fused path has no hook).
    """

    def __init__(self, embed_dim: int, num_heads: int, pascal_heads: int = 1,
                 parent_ignoring: float = 0.0, **kwargs):
        super().__init__(embed_dim, num_heads, self_attention=True, **kwargs)
        if not 1 <= pascal_heads <= num_heads:
            raise ValueError(f"--pascal-heads {pascal_heads}: the encoder layers have "
                             f"{num_heads} heads (--encoder-attention-heads)")
        if not 0.0 <= parent_ignoring < 1.0:
            raise ValueError(f"--parent-ignoring {parent_ignoring} must be in [0, 1)")
        self.pascal_heads = pascal_heads
        self.parent_ignoring = parent_ignoring
        self.skip_embed_dim_check = True
        self.parent_weights: Optional[Tensor] = None

    def apply_sparse_mask(self, attn_weights: Tensor, tgt_len: int, src_len: int, bsz: int):
        if self.parent_weights is None:
            raise RuntimeError("ParentScaledSelfAttention needs parent_weights for this forward")
        scale = self.parent_weights.to(attn_weights.dtype)[:, None]  # [B, 1, T, S]
        scale = scale.expand(bsz, self.pascal_heads, tgt_len, src_len)
        if self.training and self.parent_ignoring > 0:
            keep = torch.rand(bsz, self.pascal_heads, tgt_len, 1, device=scale.device)
            scale = torch.where(keep >= self.parent_ignoring, scale, torch.ones_like(scale))
        weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        weights = torch.cat([weights[:, : self.pascal_heads] * scale,
                             weights[:, self.pascal_heads:]], dim=1)
        return weights.view(bsz * self.num_heads, tgt_len, src_len)


class ParentScaledEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer with a :class:`ParentScaledSelfAttention` (reads ``src_heads``/``src_words``)."""

    side_input_keys = ("src_heads", "src_words")

    def __init__(self, cfg, pascal_heads: int, sigma: float, parent_ignoring: float):
        if sigma <= 0:
            raise ValueError(f"--pascal-sigma must be > 0, got {sigma}")
        self.pascal_heads = pascal_heads
        self.sigma = sigma
        self.parent_ignoring = parent_ignoring
        super().__init__(cfg)
        self.side_inputs = None

    def build_self_attention(self, embed_dim, cfg):
        return ParentScaledSelfAttention(
            embed_dim, cfg.encoder.attention_heads, pascal_heads=self.pascal_heads,
            parent_ignoring=self.parent_ignoring, dropout=cfg.attention_dropout,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )

    def forward(self, x, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None):
        parents = parent_positions(self.side_inputs["src_heads"], self.side_inputs["src_words"])
        self.self_attn.parent_weights = parent_gaussian(parents, self.sigma)
        try:
            return super().forward(x, encoder_padding_mask, attn_mask)
        finally:
            self.self_attn.parent_weights = None


class ParentScaledEncoder(SyntaxTransformerEncoder):
    """The backbone's encoder with :class:`ParentScaledEncoderLayer` at ``pascal_layers`` (default all)."""

    def __init__(self, cfg, dictionary, embed_tokens, pascal_layers, pascal_heads: int,
                 sigma: float, parent_ignoring: float, **kwargs):
        layers = cfg.encoder.layers
        self.pascal_layers = ChosenLayers(
            "--pascal-layers", range(layers) if pascal_layers is None else pascal_layers,
            layers, "encoder")
        self.pascal_options = (pascal_heads, sigma, parent_ignoring)
        super().__init__(cfg, dictionary, embed_tokens, **kwargs)

    def build_encoder_layer(self, cfg):
        if not self.pascal_layers.next_is_chosen():
            return super().build_encoder_layer(cfg)
        return wrap_layer(ParentScaledEncoderLayer(cfg, *self.pascal_options), cfg)
