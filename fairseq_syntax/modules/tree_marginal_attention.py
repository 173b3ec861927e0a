"""Tree-marginal self-attention heads in the Transformer encoder: SA-NMT's structured attention
(Tran & Bisk 2018, §4.1, eqs. 5-9; Kim et al. 2017; Liu & Lapata 2018).

The first ``tree_heads`` heads of chosen layers attend with matrix-tree marginals
(:func:`~fairseq_syntax.modules.matrix_tree.dependency_marginals`) over the source words, with a
learned root key ``u`` per head::

    s[h, m] = q_m · k_h / √d,   r[m] = q_m · u / √d
    α[m, h] = P(h → m) + δ(h, m) · P(root → m),   head_m = Σ_h α[m, h] v_h   (as the RNN model)

With ``arc_score_clamp=(lo, hi)`` the scores ``s`` and ``r`` are clamped to ``[lo, hi]`` first, as the
authors' code and the ``sa_nmt*`` RNN models do (``ARC_SCORE_CLAMP``).
Padding and the final ``eos`` are outside the tree and attend to themselves alone.  Other heads
are fairseq's softmax heads (padding filled with the dtype's lowest finite value); attention
dropout applies to all heads, as in fairseq's :class:`~fairseq.modules.MultiheadAttention`.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from fairseq_syntax.modules.chosen_layers import ChosenLayers, wrap_layer
from fairseq_syntax.modules.matrix_tree import dependency_marginals
from fairseq_syntax.modules.structured_attention import head_weights, word_mask
from fairseq_syntax.modules.transformer_encoder import SyntaxTransformerEncoder


def tree_marginal_weights(logits: Tensor, root_logits: Tensor, words: Tensor
                          ) -> Tuple[Tensor, Tensor, Tensor]:
    """Weights of tree-marginal heads and their marginals.

    ``logits`` ``[B, K, S, S]`` (``[b, k, m, h] = q_m · k_h / √d``, query rows as fairseq's),
    ``root_logits`` ``[B, K, S]``, ``words`` ``[B, S]``.  Returns ``(weights [B, K, S, S] rows α[m, :],
    head_marginals [B, K, S, S] (h, m), root_marginals [B, K, S])`` in the logits' dtype.
    """
    bsz, heads, src_len, _ = logits.shape
    mask = words.repeat_interleave(heads, dim=0)
    head, root = dependency_marginals(
        logits.transpose(2, 3).reshape(bsz * heads, src_len, src_len),
        root_logits.reshape(bsz * heads, src_len), mask)
    weights = head_weights(head, root) + torch.diag_embed((~mask).to(head.dtype))
    dtype = logits.dtype
    return (weights.view(bsz, heads, src_len, src_len).to(dtype),
            head.view(bsz, heads, src_len, src_len).to(dtype),
            root.view(bsz, heads, src_len).to(dtype))


class TreeMarginalSelfAttention(MultiheadAttention):
    """fairseq's self-attention whose first ``tree_heads`` heads use matrix-tree marginals.

    ``root_key`` ``[K, d]`` ~ N(0, 1/d) as the RNN model's root query; the last forward's marginals
    stay in :attr:`last_marginals` for the encoder.
    """

    def __init__(self, embed_dim: int, num_heads: int, tree_heads: int = 1,
                 arc_score_clamp: Optional[Tuple[float, float]] = None, **kwargs):
        super().__init__(embed_dim, num_heads, self_attention=True, **kwargs)
        if not 1 <= tree_heads <= num_heads:
            raise ValueError(f"--sa-heads {tree_heads}: the encoder layers have {num_heads} "
                             f"heads (--encoder-attention-heads); give 1 .. {num_heads}")
        if arc_score_clamp is not None and not arc_score_clamp[0] < arc_score_clamp[1]:
            raise ValueError(f"the arc-score clamp needs min < max, got {tuple(arc_score_clamp)}")
        self.tree_heads = tree_heads
        self.arc_score_clamp = arc_score_clamp
        self.root_key = nn.Parameter(torch.empty(tree_heads, self.head_dim))
        nn.init.normal_(self.root_key, std=self.head_dim ** -0.5)
        self.last_marginals: Optional[Tuple[Tensor, Tensor]] = None

    def extra_repr(self) -> str:
        return f"tree_heads={self.tree_heads}, arc_score_clamp={self.arc_score_clamp}"

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False):
        if incremental_state is not None or static_kv or before_softmax:
            raise ValueError("tree-marginal attention is the encoder's self-attention: it has no "
                             "incremental state, static keys or logits-only mode")
        if attn_mask is not None:
            raise ValueError("tree-marginal attention takes no attn_mask: a tree spans every "
                             "source word")
        tgt_len, bsz, embed_dim = query.shape
        heads, k, d = self.num_heads, self.tree_heads, self.head_dim
        q = (self.q_proj(query) * self.scaling).view(tgt_len, bsz, heads, d).permute(1, 2, 0, 3)
        keys = self.k_proj(query).view(tgt_len, bsz, heads, d).permute(1, 2, 0, 3)
        values = self.v_proj(query).view(tgt_len, bsz, heads, d).permute(1, 2, 0, 3)
        logits = torch.matmul(q, keys.transpose(2, 3))  # [B, H, T, S]
        if key_padding_mask is None:
            key_padding_mask = torch.zeros(bsz, tgt_len, dtype=torch.bool, device=query.device)
        padding = key_padding_mask.to(torch.bool)

        arc_logits = logits[:, :k]
        root_logits = torch.matmul(q[:, :k], self.root_key.to(q.dtype).unsqueeze(-1)).squeeze(-1)
        if self.arc_score_clamp is not None:
            arc_logits = arc_logits.clamp(*self.arc_score_clamp)
            root_logits = root_logits.clamp(*self.arc_score_clamp)
        tree, head, root = tree_marginal_weights(arc_logits, root_logits, word_mask(padding))
        self.last_marginals = (head, root)
        plain = logits[:, k:].masked_fill(padding[:, None, None, :], torch.finfo(logits.dtype).min)
        plain = utils.softmax(plain, dim=-1)  # float32
        weights_float = torch.cat([tree.float(), plain], dim=1)
        probs = self.dropout_module(weights_float.type_as(logits))
        attn = torch.matmul(probs, values)  # [B, H, T, d]
        attn = self.out_proj(attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))
        weights = None
        if need_weights or need_head_weights:
            weights = weights_float.transpose(1, 0)  # [H, B, T, S]
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights


class TreeMarginalEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with a :class:`TreeMarginalSelfAttention`."""

    def __init__(self, cfg, tree_heads: int, arc_score_clamp: Optional[Tuple[float, float]]):
        if getattr(cfg.encoder, "xformers_att_config", None) is not None:
            raise ValueError("tree-marginal attention runs on its own attention path: drop "
                             "--encoder-xformers-att-config")
        self.tree_heads = tree_heads
        self.arc_score_clamp = arc_score_clamp
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return TreeMarginalSelfAttention(
            embed_dim, cfg.encoder.attention_heads, tree_heads=self.tree_heads,
            arc_score_clamp=self.arc_score_clamp,
            dropout=cfg.attention_dropout, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class TreeMarginalEncoder(SyntaxTransformerEncoder):
    """The backbone's encoder with tree heads in layers ``tree_layers`` (default: the top one).

    ``encoder_out`` adds ``head_marginals`` ``[[B, S, S]]`` and ``root_marginals`` ``[[B, S]]`` of the
    first tree head of the highest tree layer (read by ``fairseq-syntax-induced-trees``).
    """

    def __init__(self, cfg, dictionary, embed_tokens, tree_layers, tree_heads: int,
                 arc_score_clamp: Optional[Tuple[float, float]] = None, **kwargs):
        layers = cfg.encoder.layers
        self.tree_layers = ChosenLayers(
            "--sa-layers", [layers - 1] if tree_layers is None else tree_layers, layers,
            "encoder", required=True)
        self.tree_heads = tree_heads
        self.arc_score_clamp = arc_score_clamp
        super().__init__(cfg, dictionary, embed_tokens, **kwargs)
        self.tree_attention = [self.layers[i].self_attn for i in sorted(self.tree_layers.indices)]

    def build_encoder_layer(self, cfg):
        if not self.tree_layers.next_is_chosen():
            return super().build_encoder_layer(cfg)
        return wrap_layer(TreeMarginalEncoderLayer(cfg, self.tree_heads, self.arc_score_clamp),
                          cfg)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None,
                **side_inputs):
        try:
            encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens,
                                          token_embeddings, **side_inputs)
            marginals = [a.last_marginals for a in self.tree_attention
                         if a.last_marginals is not None]  # LayerDrop may skip a layer
        finally:
            for attention in self.tree_attention:
                attention.last_marginals = None
        if marginals:
            head, root = marginals[-1]
            encoder_out["head_marginals"] = [head[:, 0]]
            encoder_out["root_marginals"] = [root[:, 0]]
        return encoder_out
