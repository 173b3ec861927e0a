"""Phrase memory for the Transformer (Eriguchi et al. 2016, eqs. 11, 13): a Tree-LSTM over the
encoder's states, its phrase states appended to the cross-attention memory.
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_syntax.modules.transformer_decoder import SyntaxTransformerDecoder
from fairseq_syntax.modules.transformer_encoder import SyntaxTransformerEncoder
from fairseq_syntax.modules.tree_lstm import BinaryTreeLSTM, check_internal_nodes


class PhraseMemoryEncoder(SyntaxTransformerEncoder):
    """The Transformer encoder followed by eq. 11 over ``src_tree`` (leaves: the token states, zero cells).

    Phrase states are layer-normalised and dropped out; the ``M`` phrase rows follow the ``S`` positions
    in ``encoder_out`` ``[S + M, B, C]`` and ``encoder_padding_mask`` ``[B, S + M]`` (eq. 13).
    """

    def __init__(self, cfg, dictionary, embed_tokens, forget_bias: float = 1.0, **kwargs):
        super().__init__(cfg, dictionary, embed_tokens, **kwargs)
        dim = cfg.encoder.embed_dim
        self.tree_lstm = BinaryTreeLSTM(dim, forget_bias)
        self.phrase_layer_norm = nn.LayerNorm(dim)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, **kwargs):
        encoder_out = super().forward(src_tokens, src_lengths, **kwargs)
        if "src_tree" not in encoder_out:
            raise KeyError(
                "tree2seq_transformer needs the source binary trees (src_tree): train and "
                "decode with --task syntax_translation on a data-bin with tree side-files"
            )
        tree = encoder_out["src_tree"][0]
        words = encoder_out["encoder_out"][0]  # [S, B, C]
        padding = encoder_out["encoder_padding_mask"][0]
        num_leaves = (~padding).sum(1) - 1
        leaf_h = words.transpose(0, 1)
        phrase_h, _, valid = self.tree_lstm(leaf_h, torch.zeros_like(leaf_h), tree, num_leaves)
        check_internal_nodes(valid, num_leaves)
        phrases = F.dropout(self.phrase_layer_norm(phrase_h), p=self.dropout_module.p,
                            training=self.training)
        encoder_out["encoder_out"] = [torch.cat([words, phrases.transpose(0, 1)], dim=0)]
        encoder_out["encoder_padding_mask"] = [torch.cat([padding, ~valid], dim=1)]
        return encoder_out


class PhraseMemoryDecoder(SyntaxTransformerDecoder):
    """Decoder over ``S`` words and ``M`` phrases: ``extra["memory_attn"][0]`` ``[B, T, S + M]``,
    ``extra["attn"][0]`` its word columns ``[B, T, S]``.
    """

    def extract_features(self, prev_output_tokens,
                         encoder_out: Optional[Dict[str, List[Tensor]]], *args, **kwargs):
        x, extra = super().extract_features(prev_output_tokens, encoder_out, *args, **kwargs)
        attn = extra["attn"][0] if extra.get("attn") else None
        if attn is not None and encoder_out is not None:
            src_len = attn.size(-1) - encoder_out["src_tree"][0].size(1)
            extra["memory_attn"] = [attn]
            extra["attn"] = [attn[..., :src_len]]
        return x, extra
