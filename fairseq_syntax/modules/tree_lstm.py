"""Binary Tree-LSTM over phrase trees (Eriguchi et al. 2016, eq. 11; Tai et al. 2015).

Trees as in DESIGN.md §2: ``tree [B, M, 2]`` rows ``(left, right)``, leaves ``0 .. n-1``, internal
node ``k`` is ``n + k``, children first, padding rows ``-1`` (no parse: padding only).  One batched
evaluation of eq. 11 per tree level (height), over all sentences: no loop over nodes.
"""
from typing import List, NamedTuple, Optional, Tuple

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
        rows = tree.size(1)
        _, valid = tree_slots(tree, num_leaves, leaf_slots)
        levels = tree_levels(tree, num_leaves, leaf_slots)
        # store and row of every leaf slot and internal node of sentence b: store 0 holds
        # the leaves (row b * S + j), store l the nodes of level l in their level order
        store = tree.new_zeros(bsz, leaf_slots + rows)
        row = torch.arange(leaf_slots, device=tree.device).repeat(bsz, 1) \
            + leaf_slots * torch.arange(bsz, device=tree.device).unsqueeze(1)
        row = torch.cat([row, tree.new_zeros(bsz, rows)], dim=1)
        for level, nodes in enumerate(levels, start=1):
            store[nodes.batch, leaf_slots + nodes.node] = level
            row[nodes.batch, leaf_slots + nodes.node] = torch.arange(len(nodes.node), device=tree.device)
        children = [
            (store[nodes.batch, nodes.left], row[nodes.batch, nodes.left],
             store[nodes.batch, nodes.right], row[nodes.batch, nodes.right])
            for nodes in levels
        ]
        leaves = torch.cat([leaf_h, leaf_c], dim=-1).reshape(bsz * leaf_slots, 2 * dim)
        gates = self.cell.gates
        nodes_hc = TreeLSTMLevels.apply(
            leaves, gates.weight.to(leaves.dtype), gates.bias.to(leaves.dtype), children
        )
        phrases = leaf_h.new_zeros(bsz, rows, 2 * dim)
        if levels:
            offsets = torch.tensor([0] + [len(nodes.node) for nodes in levels], device=tree.device).cumsum(0)
            flat = offsets[(store[:, leaf_slots:] - 1).clamp(min=0)] + row[:, leaf_slots:]
            phrases[valid] = nodes_hc.index_select(0, flat[valid])
        phrase_h, phrase_c = phrases.split(dim, dim=-1)
        return phrase_h, phrase_c, valid


class TreeLSTMLevels(torch.autograd.Function):
    """Eq. 11 over the levels of a batch of trees, with a hand-written backward pass.

    ``forward(leaves [L, 2d] (h | c), weight [5d, 2d], bias [5d], children)``, ``children[l] =
    (left_store, left_row, right_store, right_row)`` for level ``l + 1`` (store 0: the leaves) ->
    ``[N, 2d]`` states of all internal nodes.  Backward walks the levels down and forms
    ``∂W = Σ ∂gates ⊗ [h_l; h_r]`` as one product at the end (autograd: one ``5d × 2d`` per level).
    """

    @staticmethod
    def forward(ctx, leaves: Tensor, weight: Tensor, bias: Tensor, children):
        dim = weight.size(1) // 2
        stores, saved = [leaves], []
        routes = [(_route(ls, lr), _route(rs, rr)) for ls, lr, rs, rr in children]
        with torch.autocast(leaves.device.type, enabled=False):
            for left_route, right_route in routes:
                left = _gather(stores, left_route)
                right = _gather(stores, right_route)
                x = torch.cat([left[:, :dim], right[:, :dim]], dim=1)
                pre = torch.addmm(bias, x, weight.t())
                sig, u = torch.sigmoid(pre[:, :4 * dim]), torch.tanh(pre[:, 4 * dim:])
                i, f_l, f_r, o = sig.chunk(4, dim=1)
                c = i * u + f_l * left[:, dim:] + f_r * right[:, dim:]
                tanh_c = torch.tanh(c)
                stores.append(torch.cat([o * tanh_c, c], dim=1))
                saved.append((x, sig, u, left[:, dim:], right[:, dim:], tanh_c))
        ctx.save_for_backward(weight)
        ctx.saved, ctx.routes, ctx.num_leaves = saved, routes, leaves.size(0)
        return torch.cat(stores[1:]) if children else leaves.new_zeros(0, 2 * dim)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_nodes: Tensor):
        (weight,) = ctx.saved_tensors
        dim = weight.size(1) // 2
        sizes = [len(x) for x, *_ in ctx.saved]
        grads = [grad_nodes.new_zeros(ctx.num_leaves, 2 * dim)] + list(grad_nodes.clone().split(sizes))
        grad_pre = [None] * len(sizes)
        for level in reversed(range(len(sizes))):
            x, sig, u, c_l, c_r, tanh_c = ctx.saved[level]
            i, f_l, f_r, o = sig.chunk(4, dim=1)
            d_h, d_c = grads[level + 1].split(dim, dim=1)
            d_c = d_c + d_h * o * (1 - tanh_c * tanh_c)
            d_sig = torch.cat([d_c * u, d_c * c_l, d_c * c_r, d_h * tanh_c], dim=1) * sig * (1 - sig)
            grad_pre[level] = torch.cat([d_sig, d_c * i * (1 - u * u)], dim=1)
            d_x = grad_pre[level] @ weight
            left_route, right_route = ctx.routes[level]
            _scatter_add(grads, left_route, torch.cat([d_x[:, :dim], d_c * f_l], dim=1))
            _scatter_add(grads, right_route, torch.cat([d_x[:, dim:], d_c * f_r], dim=1))
        if not sizes:
            return grads[0], torch.zeros_like(weight), weight.new_zeros(weight.size(0)), None
        grad_pre_all = torch.cat(grad_pre)
        grad_weight = grad_pre_all.t() @ torch.cat([x for x, *_ in ctx.saved])
        return grads[0], grad_weight, grad_pre_all.sum(0), None


Route = Tuple[List[Tuple[int, Tensor, Tensor]], Optional[Tensor]]


def _route(store: Tensor, row: Tensor) -> Route:
    """How to read ``stores[store[i]][row[i]]``: per store, its positions and rows, plus the permutation
    restoring order (None for one store).  Computed in forward, reused in backward.
    """
    groups = []
    for j in store.unique().tolist():
        pick = store.eq(j).nonzero(as_tuple=True)[0]
        groups.append((j, pick, row[pick]))
    order = torch.argsort(torch.cat([pick for _, pick, _ in groups])) if len(groups) > 1 else None
    return groups, order


def _gather(stores: List[Tensor], route: Route) -> Tensor:
    """``stores[store[i]][row[i]]`` for every ``i``."""
    groups, order = route
    pieces = [stores[j].index_select(0, rows) for j, _, rows in groups]
    return pieces[0] if order is None else torch.cat(pieces).index_select(0, order)


def _scatter_add(grads: List[Tensor], route: Route, values: Tensor) -> None:
    """``grads[store[i]][row[i]] += values[i]`` (adjoint of :func:`_gather`)."""
    for j, pick, rows in route[0]:
        grads[j].index_add_(0, rows, values.index_select(0, pick))
