"""Model ``tree2seq``: Tree-to-Sequence Attentional NMT (Eriguchi et al. 2016).

The ``attentional_rnn`` backbone plus a binary Tree-LSTM over ``src_tree`` on the sequential
states (§3.1, eq. 11), decoder initialisation from a Tree-LSTM unit over (last sequential state,
root phrase) (eq. 12), and attention over the ``n`` words and ``n - 1`` phrases (eq. 13,
:class:`~fairseq_syntax.modules.phrase_attention.PhraseAttentionLayer`; alignments report words).

Leaves are the BiLSTM states at the tokens (eos is not a leaf), before dropout: hidden
``[h→_j; h←_j]`` and, with ``--leaf-cells lstm`` (default, the paper's), cells ``[c→_j; c←_j]``
(the encoder then runs its LSTM step by step,
:func:`~fairseq_syntax.modules.rnn_encoder.lstm_states_and_cells`; one-layer encoders only);
``--leaf-cells zero``: zero cells.  A sentence without a tree (no parse, or one
token) gets no phrases and a zero root in eq. 12, as in the paper.
"""
from dataclasses import dataclass, field
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model
from torch import Tensor

from fairseq_syntax.models.attentional_rnn import AttentionalRNNConfig, AttentionalRNNModel
from fairseq_syntax.modules.phrase_attention import PhraseAttentionLayer
from fairseq_syntax.modules.tree_lstm import BinaryTreeLSTM, TreeLSTMCell, check_internal_nodes

LEAF_CELLS = ChoiceEnum(["lstm", "zero"])


@dataclass
class TreeToSequenceConfig(AttentionalRNNConfig):
    leaf_cells: LEAF_CELLS = field(
        default="lstm",
        metadata={"help": "memory cells of the Tree-LSTM's leaves: 'lstm' = the sequential "
                  "BiLSTM's own memory cells at each token (the paper's choice; needs "
                  "--encoder-layers 1), 'zero' = zero cells (leaves carry hidden states only)"},
    )
    tree_forget_bias: float = field(
        default=1.0,
        metadata={"help": "initial bias of the Tree-LSTM forget gates (the paper uses 1.0)"},
    )


class TreeEncoderLayer(nn.Module):
    """Encoder extension: phrase states, phrase mask and the tree-initialised summary (eq. 12).

    Adds ``phrase_annotations [B, M, C]``, ``phrase_mask [B, M]`` (row ``k`` is node ``n + k``),
    ``word_phrase_annotations``/``word_phrase_mask``, and replaces ``summary_hidden``/``summary_cell``;
    reads the encoder's ``lstm_states`` (and ``lstm_cells`` for ``leaf_cells='lstm'``).
    """

    def __init__(self, dim: int, dropout: float, leaf_cells: str = "lstm", forget_bias: float = 1.0):
        super().__init__()
        self.tree_lstm = BinaryTreeLSTM(dim, forget_bias)
        self.init_cell = TreeLSTMCell(dim, forget_bias)
        self.dropout = dropout
        self.leaf_cells = leaf_cells
        self.encoder_internals = ("lstm_states", "lstm_cells") if leaf_cells == "lstm" else ("lstm_states",)

    def upgrade_state_dict_named(self, state_dict, name):
        # checkpoints from before the encoder exposed its cells held the encoder's LSTM
        # a second time, under this layer's "_lstm"
        for key in [k for k in state_dict if k.startswith(f"{name}._lstm.")]:
            del state_dict[key]

    def leaves(self, encoder_out: Dict[str, Tensor]):
        """Leaf hidden states and memory cells ``[B, S, C]``."""
        hidden = encoder_out["lstm_states"]
        if self.leaf_cells == "zero":
            return hidden, torch.zeros_like(hidden)
        return hidden, encoder_out["lstm_cells"]

    def forward(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        if "src_tree" not in encoder_out:
            raise KeyError(
                "tree2seq needs the source binary trees (net_input['src_tree']): train and "
                "decode with --task syntax_translation on a data-bin with tree side-files"
            )
        tree = encoder_out["src_tree"]
        num_leaves = (~encoder_out["padding_mask"]).sum(1) - 1  # tokens without eos
        leaf_h, leaf_c = self.leaves(encoder_out)
        phrase_h, phrase_c, valid = self.tree_lstm(leaf_h, leaf_c, tree, num_leaves)
        check_internal_nodes(valid, num_leaves)
        nodes = valid.sum(1)
        has_tree = nodes.gt(0).unsqueeze(1).to(phrase_h.dtype)
        root = (nodes - 1).clamp(min=0)
        rows = torch.arange(tree.size(0), device=tree.device)
        root_h, root_c = phrase_h[rows, root] * has_tree, phrase_c[rows, root] * has_tree
        summary_h, summary_c = self.init_cell(
            (encoder_out["summary_hidden"], encoder_out["summary_cell"]), (root_h, root_c)
        )
        out = dict(encoder_out)
        out["phrase_annotations"] = F.dropout(phrase_h, p=self.dropout, training=self.training)
        out["phrase_mask"] = ~valid
        # what PhraseAttentionLayer attends over (eq. 13): words, then phrases
        out["word_phrase_annotations"] = torch.cat([encoder_out["annotations"], out["phrase_annotations"]], dim=1)
        out["word_phrase_mask"] = torch.cat([encoder_out["padding_mask"], out["phrase_mask"]], dim=1)
        out["summary_hidden"] = summary_h
        out["summary_cell"] = summary_c
        return out


@register_model("tree2seq", dataclass=TreeToSequenceConfig)
class TreeToSequenceModel(AttentionalRNNModel):
    """Tree-to-sequence attentional NMT (Eriguchi, Hashimoto and Tsuruoka, ACL 2016).

    BlackOut (``--criterion blackout``) and the length prior (``--length-prior``) work with every arch.
    """

    @classmethod
    def side_inputs(cls, cfg):
        return {"tree"}

    @classmethod
    def build_attention(cls, cfg, query_dim: int, key_dim: int) -> nn.Module:
        return PhraseAttentionLayer(query_dim, key_dim, cfg.attention_score)

    @classmethod
    def build_encoder_extensions(cls, cfg, encoder_dim: int) -> List[nn.Module]:
        leaf_cells = getattr(cfg.leaf_cells, "value", cfg.leaf_cells)
        if leaf_cells == "lstm" and cfg.encoder_layers != 1:
            raise ValueError(
                "--leaf-cells lstm recovers the memory cells of a one-layer encoder; with "
                f"--encoder-layers {cfg.encoder_layers} use --leaf-cells zero"
            )
        return [TreeEncoderLayer(encoder_dim, cfg.dropout, leaf_cells, cfg.tree_forget_bias)]
