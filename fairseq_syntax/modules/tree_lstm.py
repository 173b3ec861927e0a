"""Binary Tree-LSTM over phrase trees (Eriguchi et al. 2016, eq. 11; Tai et al. 2015).

Trees as in docs/design.md §3.4: ``tree [B, M, 2]`` rows ``(left, right)``, leaves ``0 .. n-1``,
internal node ``k`` is ``n + k``, children first, padding rows ``-1`` (no parse: padding only).  One
batched evaluation of eq. 11 per tree level (height), over all sentences: no loop over nodes.
"""
from typing import List, NamedTuple, Tuple

import torch
import torch.nn as nn
from torch import Tensor


class TreeLSTMCell(nn.Module):
    """Binary Tree-LSTM unit, Eriguchi et al. (2016) eq. 11.

    ``c = i ⊙ u + f_l ⊙ c_l + f_r ⊙ c_r``, ``h = o ⊙ tanh(c)``; gates ``i, f_l, f_r, o, u`` from one
    ``Linear(2d, 5d)`` on ``[h_l; h_r]``.  Forget-gate biases start at 1.0 as in the paper.
    """

    def __init__(self, dim: int, forget_bias: float = 1.0):
        super().__init__()
        self.dim = dim
        self.forget_bias = forget_bias
        self.gates = nn.Linear(2 * dim, 5 * dim)
        self.init_biases_()

    def init_biases_(self):
        """Biases zero, forget gates ``forget_bias`` (kept by :func:`init_uniform_`)."""
        with torch.no_grad():
            self.gates.bias.zero_()
            self.gates.bias[self.dim: 3 * self.dim].fill_(self.forget_bias)

    def forward(self, left: Tuple[Tensor, Tensor], right: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tensor]:
        """``(h_l, c_l), (h_r, c_r)`` each ``[..., d]`` -> ``(h, c)`` of the parent."""
        (h_l, c_l), (h_r, c_r) = left, right
        i, f_l, f_r, o, u = self.gates(torch.cat([h_l, h_r], dim=-1)).chunk(5, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class TreeLevel(NamedTuple):
    """One level's internal nodes: sentence ``batch[j]``, tree row ``node[j]``, children's buffer slots."""

    batch: Tensor
    node: Tensor
    left: Tensor
    right: Tensor


def tree_slots(tree: Tensor, num_leaves: Tensor, leaf_slots: int) -> Tuple[Tensor, Tensor]:
    """Children of each internal node as slots of a per-sentence buffer.

    Buffer: ``leaf_slots`` leaf slots, then slot ``leaf_slots + k`` for internal node ``k``.  Returns
    ``(slots [B, M, 2], valid [B, M])``; padding rows get slot 0 and ``valid`` False.
    """
    valid = tree[..., 0].ge(0)
    n = num_leaves.view(-1, 1, 1)
    slots = torch.where(tree < n, tree, tree - n + leaf_slots)
    return slots.masked_fill(~valid.unsqueeze(-1), 0), valid


def tree_levels(tree: Tensor, num_leaves: Tensor, leaf_slots: int) -> List[TreeLevel]:
    """Internal nodes grouped by height, lowest first (one vectorised pass per level).

    Raises ``ValueError`` for a child that is neither a leaf nor an earlier node.
    """
    bsz, rows = tree.shape[:2]
    slots, valid = tree_slots(tree, num_leaves, leaf_slots)
    child_ok = (tree.ge(0) & (tree < num_leaves.view(-1, 1, 1) + torch.arange(rows, device=tree.device).view(1, -1, 1))).all(-1)
    if (valid & ~child_ok).any():
        b, k = (valid & ~child_ok).nonzero()[0].tolist()
        raise ValueError(
            f"binary tree of batch row {b}: node {k} has children {tree[b, k].tolist()}, "
            f"but only leaves 0..{int(num_leaves[b]) - 1} and earlier nodes can be children"
        )
    done = torch.zeros(bsz, leaf_slots + rows, dtype=torch.bool, device=tree.device)
    done[:, :leaf_slots] = True
    pending = valid.clone()
    flat_slots = slots.view(bsz, -1)
    levels: List[TreeLevel] = []
    for _ in range(rows):
        if not pending.any():
            break
        children_done = done.gather(1, flat_slots).view(bsz, rows, 2).all(-1)
        ready = pending & children_done
        batch, node = ready.nonzero(as_tuple=True)
        levels.append(TreeLevel(batch, node, slots[batch, node, 0], slots[batch, node, 1]))
        pending &= ~ready
        done[batch, leaf_slots + node] = True
    return levels


def check_internal_nodes(valid: Tensor, num_leaves: Tensor) -> None:
    """``ValueError`` unless each tree has ``n - 1`` internal nodes (or none) for its ``n`` leaves."""
    nodes = valid.sum(1)
    bad = nodes.ne(0) & nodes.ne(num_leaves - 1)
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ValueError(
            f"batch row {b}: the binary tree has {int(nodes[b])} internal nodes for "
            f"{int(num_leaves[b])} tokens (expected n - 1, or none without a parse)"
        )


class BinaryTreeLSTM(nn.Module):
    """Phrase states of a batch of binary trees over given leaf states.

    ``forward(leaf_h, leaf_c [B, S, d], tree [B, M, 2], num_leaves [B])`` -> ``(phrase_h, phrase_c)``
    ``[B, M, d]`` (padding rows 0) and ``valid [B, M]``.  Weights: :class:`TreeLSTMCell`; evaluation:
    :class:`TreeLSTMLevels`.
    """

    def __init__(self, dim: int, forget_bias: float = 1.0):
        super().__init__()
        self.cell = TreeLSTMCell(dim, forget_bias)

    def forward(self, leaf_h: Tensor, leaf_c: Tensor, tree: Tensor, num_leaves: Tensor):
        bsz, leaf_slots, dim = leaf_h.shape
        _, valid = tree_slots(tree, num_leaves, leaf_slots)
        levels = tree_levels(tree, num_leaves, leaf_slots)
        # row of every leaf slot and internal node of sentence b in TreeLSTMLevels' buffer:
        # leaf slot j at b * S + j, then the internal nodes level after level
        row = torch.arange(bsz * leaf_slots, device=tree.device).view(bsz, leaf_slots)
        row = torch.cat([row, tree.new_zeros(tree.shape[:2])], dim=1)
        start = bsz * leaf_slots
        for nodes in levels:
            row[nodes.batch, leaf_slots + nodes.node] = torch.arange(start, start + len(nodes.node), device=tree.device)
            start += len(nodes.node)
        children = [torch.stack([row[nodes.batch, nodes.left], row[nodes.batch, nodes.right]], dim=1).view(-1)
                    for nodes in levels]
        gates = self.cell.gates
        h, c = TreeLSTMLevels.apply(
            leaf_h.reshape(-1, dim), leaf_c.reshape(-1, dim), gates.weight.to(leaf_h.dtype),
            gates.bias.to(leaf_h.dtype), children,
        )
        nodes = row[:, leaf_slots:][valid]
        phrase_h = leaf_h.new_zeros(valid.shape + (dim,))
        phrase_c = leaf_h.new_zeros(valid.shape + (dim,))
        phrase_h[valid] = h.index_select(0, nodes)
        phrase_c[valid] = c.index_select(0, nodes)
        return phrase_h, phrase_c, valid


class TreeLSTMLevels(torch.autograd.Function):
    """Eq. 11 over the levels of a batch of trees, with a hand-written backward pass.

    ``forward(leaf_h, leaf_c [L, d], weight [5d, 2d], bias [5d], children)`` -> ``(h, c)`` ``[L + N, d]``:
    the leaves, then the ``N`` internal nodes level after level; ``children[l]`` ``[2 k_l]`` holds the
    rows of the left and right child of each node of level ``l + 1``, interleaved, so one gather gives
    ``[h_l; h_r]``.  Backward walks the levels down and forms ``∂W = Σ ∂gates ⊗ [h_l; h_r]`` as one
    product at the end (autograd: one ``5d × 2d`` per level).
    """

    @staticmethod
    def forward(ctx, leaf_h: Tensor, leaf_c: Tensor, weight: Tensor, bias: Tensor, children: List[Tensor]):
        num_leaves, dim = leaf_h.shape
        sizes = [len(rows) // 2 for rows in children]
        total = num_leaves + sum(sizes)
        h, c = leaf_h.new_empty(total, dim), leaf_c.new_empty(total, dim)
        h[:num_leaves], c[:num_leaves] = leaf_h, leaf_c
        x = leaf_h.new_empty(total - num_leaves, 2 * dim)  # [h_l; h_r] of every node
        saved, start = [], num_leaves
        with torch.autocast(leaf_h.device.type, enabled=False):
            for rows, size in zip(children, sizes):
                end = start + size
                x_level = x[start - num_leaves:end - num_leaves]
                torch.index_select(h, 0, rows, out=x_level.view(2 * size, dim))
                c_children = c.index_select(0, rows).view(size, 2 * dim)  # [c_l; c_r]
                gates = torch.addmm(bias, x_level, weight.t())
                sig, u = gates[:, :4 * dim].sigmoid_(), gates[:, 4 * dim:].tanh_()  # i, f_l, f_r, o
                kept = sig[:, dim:3 * dim] * c_children  # [f_l ⊙ c_l; f_r ⊙ c_r]
                c_new = torch.addcmul(kept[:, :dim], sig[:, :dim], u, out=c[start:end])
                c_new += kept[:, dim:]
                tanh_c = torch.tanh(c_new)
                torch.mul(sig[:, 3 * dim:], tanh_c, out=h[start:end])
                saved.append((gates, c_children, tanh_c))
                start = end
        ctx.save_for_backward(weight, x)
        ctx.saved, ctx.children, ctx.num_leaves = saved, children, num_leaves
        return h, c

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h: Tensor, grad_c: Tensor):
        weight, x = ctx.saved_tensors
        dim, num_leaves = weight.size(1) // 2, ctx.num_leaves
        grad_h, grad_c = grad_h.clone(), grad_c.clone()
        grad_gates = x.new_empty(x.size(0), 5 * dim)
        end = grad_h.size(0)
        for rows, (gates, c_children, tanh_c) in zip(reversed(ctx.children), reversed(ctx.saved)):
            size = len(gates)
            start = end - size
            d_h, d_c = grad_h[start:end], grad_c[start:end]
            i, f, o, u = gates[:, :dim], gates[:, dim:3 * dim], gates[:, 3 * dim:4 * dim], gates[:, 4 * dim:]
            d_c = torch.addcmul(d_c, d_h * o, 1 - tanh_c * tanh_c)
            d_gates = grad_gates[start - num_leaves:end - num_leaves]
            torch.mul(d_c, u, out=d_gates[:, :dim])
            torch.mul(c_children.view(size, 2, dim), d_c.unsqueeze(1), out=d_gates[:, dim:3 * dim].view(size, 2, dim))
            torch.mul(d_h, tanh_c, out=d_gates[:, 3 * dim:4 * dim])
            sig = gates[:, :4 * dim]
            d_gates[:, :4 * dim] *= sig * (1 - sig)
            torch.mul(d_c * i, 1 - u * u, out=d_gates[:, 4 * dim:])
            grad_h.index_add_(0, rows, (d_gates @ weight).view(2 * size, dim))
            grad_c.index_add_(0, rows, (f.reshape(size, 2, dim) * d_c.unsqueeze(1)).view(2 * size, dim))
            end = start
        grad_weight = grad_gates.t() @ x
        return grad_h[:num_leaves], grad_c[:num_leaves], grad_weight, grad_gates.sum(0), None
