"""Tree-to-sequence attention over words and phrases, folded onto the words (Eriguchi et al.
2016, eq. 13): what ``supervised_attention_cross_entropy`` compares with word alignments."""
import torch
from torch import Tensor


def fold_phrase_attention(weights: Tensor, tree: Tensor, src_nonpad: Tensor) -> Tensor:
    """Tree2seq's attention over words and phrases folded onto the source positions.

    ``weights`` ``[B, T, S + M]``: source positions first (leaf ``j`` is position ``j``,
    the source right-padded, eos not a leaf), then the ``M`` rows of ``tree [B, M, 2]``
    (internal node ``n + k`` is row ``k``, children before parents, padding rows ``-1``;
    see :mod:`fairseq_syntax.modules.tree_lstm`). Returns ``[B, T, S]``: each position's
    own weight plus, for every phrase that covers it, the phrase's weight divided by the
    number of leaves the phrase covers. A row that sums to one over words and phrases sums
    to one over the positions.
    """
    bsz, _, width = weights.shape
    src_len = src_nonpad.size(1)
    rows = tree.size(1)
    if width != src_len + rows:
        raise ValueError(
            f"the attention covers {width} positions, but the source has {src_len} and its "
            f"tree {rows} phrase rows (expected {src_len + rows})"
        )
    num_leaves = (src_nonpad.sum(1) - 1).view(-1, 1, 1)
    valid = tree[..., 0].ge(0)
    slots = torch.where(tree < num_leaves, tree, tree - num_leaves + src_len)  # buffer slots
    slots = slots.masked_fill(~valid.unsqueeze(-1), 0)
    # cover[b, slot, j] = 1 when leaf j is under the node in that slot
    cover = torch.zeros(bsz, src_len + rows, src_len, dtype=torch.float32, device=weights.device)
    cover[:, :src_len] = torch.eye(src_len, device=weights.device)
    batch = torch.arange(bsz, device=weights.device)
    for k in range(rows):  # children come before their parent
        both = cover[batch, slots[:, k, 0]] + cover[batch, slots[:, k, 1]]
        cover[:, src_len + k] = both * valid[:, k, None].to(both.dtype)
    fold = cover / cover.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.bmm(weights.float(), fold).to(weights.dtype)
