"""Matrix-tree marginals against brute-force enumeration of all single-root trees."""

import functools
import itertools
import math

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_syntax.modules.matrix_tree import dependency_marginals, log_partition

ROOT = -1


@functools.lru_cache(maxsize=None)
def single_root_trees(n):
    """All head vectors (head of each token, ROOT for the root) that are trees.

    Checked with networkx: the graph root -> root word, head -> modifier must be
    an arborescence over the n tokens plus the artificial root, and the root has
    exactly one child.  Returns an int array [T, n].
    """
    trees = []
    for heads in itertools.product(range(-1, n), repeat=n):
        if sum(h == ROOT for h in heads) != 1 or any(h == m for m, h in enumerate(heads)):
            continue
        g = nx.DiGraph()
        g.add_nodes_from(range(n + 1))  # node n is the artificial root
        g.add_edges_from((n if h == ROOT else h, m) for m, h in enumerate(heads))
        if nx.is_arborescence(g):
            trees.append(heads)
    return np.array(trees, dtype=np.int64).reshape(-1, n)


def brute_force(s, r):
    """Exact marginals and log Z by enumeration, float64 numpy.

    s: [n, n] head->modifier scores, r: [n] root scores.
    """
    n = r.shape[0]
    trees = single_root_trees(n)
    mods = np.arange(n)
    is_root = trees == ROOT
    heads = np.where(is_root, 0, trees)
    arc = np.where(is_root, r[None, :], s[heads, mods[None, :]])  # [T, n]
    tree_score = arc.sum(axis=1)
    log_z = np.logaddexp.reduce(tree_score)
    p = np.exp(tree_score - log_z)  # [T]
    edge = np.zeros((n, n))
    root = np.zeros(n)
    for m in range(n):
        np.add.at(edge[:, m], heads[~is_root[:, m], m], p[~is_root[:, m]])
        root[m] = p[is_root[:, m]].sum()
    return edge, root, log_z


def test_number_of_trees():
    # Single-root trees over n labelled tokens: n choices of root word times
    # n^(n-2) labelled trees rooted there (Cayley) = n^(n-1).
    for n in range(1, 6):
        assert len(single_root_trees(n)) == n ** (n - 1)


def random_scores(n, seed, scale, batch=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    s = scale * torch.randn(batch, n, n, generator=g, dtype=dtype)
    r = scale * torch.randn(batch, n, generator=g, dtype=dtype)
    return s, r


def check_against_brute_force(s, r):
    edge, root = dependency_marginals(s, r)
    log_z = log_partition(s, r)
    for b in range(s.shape[0]):
        e_bf, r_bf, z_bf = brute_force(s[b].numpy(), r[b].numpy())
        np.testing.assert_allclose(edge[b].numpy(), e_bf, rtol=0, atol=1e-8)
        np.testing.assert_allclose(root[b].numpy(), r_bf, rtol=0, atol=1e-8)
        assert abs(log_z[b].item() - z_bf) < 1e-8 * max(1.0, abs(z_bf))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.1, 1.0, 3.0, 10.0]),
)
def test_brute_force_random(n, seed, scale):
    s, r = random_scores(n, seed, scale, batch=2)
    check_against_brute_force(s, r)


@pytest.mark.parametrize("seed", [0, 1])
def test_brute_force_n6(seed):
    s, r = random_scores(6, seed, 2.0, batch=1)
    check_against_brute_force(s, r)


def test_brute_force_large_offset():
    # A large common offset must not overflow: exp(1000) is inf in float64.
    s, r = random_scores(4, 7, 1.0)
    edge, root = dependency_marginals(s + 1000.0, r + 1000.0)
    e_bf, r_bf, z_bf = brute_force(s[0].numpy(), r[0].numpy())
    np.testing.assert_allclose(edge[0].numpy(), e_bf, atol=1e-8)
    np.testing.assert_allclose(root[0].numpy(), r_bf, atol=1e-8)
    log_z = log_partition(s + 1000.0, r + 1000.0)
    assert abs(log_z.item() - (z_bf + 4 * 1000.0)) < 1e-8 * 4000


def test_clamped_scores_keep_a_dominant_cycle_finite_a_dominant_cycle_finite():
    """The SA-NMT arc-score clamp (structured_attention_rnn). Scores far apart, as a run reached before its NaN gradients (±187): a dominant
    2-cycle 0 <-> 1 makes the float32 Laplacian singular once the other arcs underflow
    to 0. Clamped, the float32 marginals are finite and equal float64 enumeration of the
    clamped scores' trees."""
    n = 4
    head = torch.full((1, n, n), -150.0)
    head[0, 0, 1] = head[0, 1, 0] = 150.0
    head[0, 2, 3] = 40.0
    root = torch.full((1, n), -150.0)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        dependency_marginals(head, root)  # unclamped float32
    bounded_head, bounded_root = head.clamp(-5, 7), root.clamp(-5, 7)
    edge, root_marginals = dependency_marginals(bounded_head, bounded_root)
    assert torch.isfinite(edge).all() and torch.isfinite(root_marginals).all()
    ref_edge, ref_root, _ = brute_force(bounded_head[0].double().numpy(),
                                        bounded_root[0].double().numpy())
    np.testing.assert_allclose(edge[0].double().numpy(), ref_edge, atol=1e-5)
    np.testing.assert_allclose(root_marginals[0].double().numpy(), ref_root, atol=1e-5)


def padded_batch(lengths, seed, where="end"):
    """Sentences of given lengths in one batch, garbage in the padded scores.

    Returns (s, r, mask, positions) with positions[b] the indices of the real
    tokens of sentence b inside the padded row.
    """
    g = torch.Generator().manual_seed(seed)
    bsz, n = len(lengths), max(lengths)
    s = 2.0 * torch.randn(bsz, n, n, generator=g, dtype=torch.float64)
    r = 2.0 * torch.randn(bsz, n, generator=g, dtype=torch.float64)
    mask = torch.zeros(bsz, n, dtype=torch.bool)
    positions = []
    for b, length in enumerate(lengths):
        if where == "end":
            pos = torch.arange(length)
        elif where == "start":
            pos = torch.arange(n - length, n)
        else:  # anywhere
            pos = torch.randperm(n, generator=g)[:length].sort().values
        mask[b, pos] = True
        positions.append(pos)
    garbage = 50.0 * torch.randn(bsz, n, n, generator=g, dtype=torch.float64)
    pad_arc = ~(mask.unsqueeze(2) & mask.unsqueeze(1))
    s = torch.where(pad_arc, garbage, s)
    r = torch.where(mask, r, 50.0 * torch.randn(bsz, n, generator=g, dtype=torch.float64))
    return s, r, mask, positions


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
    where=st.sampled_from(["end", "start", "anywhere"]),
)
def test_padding_matches_alone_and_brute_force(lengths, seed, where):
    if max(lengths) == 0:
        lengths = lengths + [1]
    s, r, mask, positions = padded_batch(lengths, seed, where)
    edge, root = dependency_marginals(s, r, mask)
    log_z = log_partition(s, r, mask)
    for b, pos in enumerate(positions):
        k = len(pos)
        s_b = s[b][pos][:, pos].unsqueeze(0)
        r_b = r[b][pos].unsqueeze(0)
        real_edge = edge[b][pos][:, pos]
        real_root = root[b][pos]
        if k == 0:
            assert log_z[b].item() == 0.0
        else:
            e_alone, r_alone = dependency_marginals(s_b, r_b)
            torch.testing.assert_close(real_edge, e_alone[0], rtol=0, atol=1e-10)
            torch.testing.assert_close(real_root, r_alone[0], rtol=0, atol=1e-10)
            e_bf, r_bf, z_bf = brute_force(s_b[0].numpy(), r_b[0].numpy())
            np.testing.assert_allclose(real_edge.numpy(), e_bf, atol=1e-8)
            np.testing.assert_allclose(real_root.numpy(), r_bf, atol=1e-8)
            assert abs(log_z[b].item() - z_bf) < 1e-8 * max(1.0, abs(z_bf))
        # padded outputs are exactly zero
        pad = ~mask[b]
        assert torch.all(edge[b][pad] == 0) and torch.all(edge[b][:, pad] == 0)
        assert torch.all(root[b][pad] == 0)


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
    where=st.sampled_from(["end", "start", "anywhere"]),
)
def test_columns_sum_to_one(lengths, seed, where):
    s, r, mask, _ = padded_batch(lengths, seed, where)
    edge, root = dependency_marginals(s, r, mask)
    col = edge.sum(dim=1) + root
    torch.testing.assert_close(col[mask], torch.ones_like(col[mask]), rtol=0, atol=1e-10)
    assert torch.all(col[~mask] == 0)
    assert torch.all(torch.diagonal(edge, dim1=1, dim2=2) == 0)
    assert torch.all(edge >= -1e-12) and torch.all(root >= -1e-12)


def test_mask_none_equals_all_true():
    s, r = random_scores(5, 3, 1.0, batch=3)
    e1, r1 = dependency_marginals(s, r)
    e2, r2 = dependency_marginals(s, r, torch.ones(3, 5, dtype=torch.bool))
    assert torch.equal(e1, e2) and torch.equal(r1, r2)


def test_gradient_of_log_partition_is_marginals():
    s, r, mask, _ = padded_batch([4, 2, 3], 11)
    s.requires_grad_(True)
    r.requires_grad_(True)
    log_partition(s, r, mask).sum().backward()
    edge, root = dependency_marginals(s.detach(), r.detach(), mask)
    torch.testing.assert_close(s.grad, edge, rtol=0, atol=1e-10)
    torch.testing.assert_close(r.grad, root, rtol=0, atol=1e-10)


def test_gradcheck_with_padding():
    s, r, mask, _ = padded_batch([4, 2, 3], 5, "anywhere")
    s.requires_grad_(True)
    r.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s_, r_: dependency_marginals(s_, r_, mask), (s, r), eps=1e-6, atol=1e-6
    )
    assert torch.autograd.gradcheck(
        lambda s_, r_: log_partition(s_, r_, mask), (s, r), eps=1e-6, atol=1e-6
    )


def test_large_n_stable():
    g = torch.Generator().manual_seed(0)
    bsz, n = 2, 256
    s = (10 * torch.randn(bsz, n, n, generator=g)).requires_grad_(True)
    r = (10 * torch.randn(bsz, n, generator=g)).requires_grad_(True)
    mask = torch.ones(bsz, n, dtype=torch.bool)
    mask[1, 200:] = False
    edge, root = dependency_marginals(s, r, mask)
    assert edge.dtype == torch.float32
    assert torch.isfinite(edge).all() and torch.isfinite(root).all()
    col = edge.sum(dim=1) + root
    assert (col[mask] - 1).abs().max().item() < 1e-3
    w_e = torch.randn(bsz, n, n, generator=g)
    w_r = torch.randn(bsz, n, generator=g)
    ((edge * w_e).sum() + (root * w_r).sum()).backward()
    assert torch.isfinite(s.grad).all() and torch.isfinite(r.grad).all()
    assert torch.isfinite(log_partition(s, r, mask)).all()
    # float32 agrees with float64
    e64, r64 = dependency_marginals(s.detach().double(), r.detach().double(), mask)
    assert (edge.detach().double() - e64).abs().max().item() < 1e-3
    assert (root.detach().double() - r64).abs().max().item() < 1e-3


def test_bf16_autocast():
    g = torch.Generator().manual_seed(0)
    bsz, n, d = 2, 64, 32
    x = torch.randn(bsz, n, d, generator=g)
    w = torch.randn(d, d, generator=g) / math.sqrt(d)
    v = torch.randn(d, generator=g)
    mask = torch.ones(bsz, n, dtype=torch.bool)
    mask[1, 50:] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        s = (x @ w) @ x.transpose(1, 2)  # bf16 under autocast
        r = x @ v
        assert s.dtype == torch.bfloat16
        edge, root = dependency_marginals(s, r, mask)
        log_z = log_partition(s, r, mask)
    assert edge.dtype == torch.bfloat16 and root.dtype == torch.bfloat16
    assert torch.isfinite(edge).all() and torch.isfinite(root).all()
    assert torch.isfinite(log_z).all()
    e32, r32 = dependency_marginals(s.float(), r.float(), mask)
    torch.testing.assert_close(edge.float(), e32, rtol=0, atol=1e-2)
    torch.testing.assert_close(root.float(), r32, rtol=0, atol=1e-2)
    # float32 inputs inside an autocast region: inverse still in float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        e_ac, r_ac = dependency_marginals(s.float(), r.float(), mask)
    assert e_ac.dtype == torch.float32
    torch.testing.assert_close(e_ac, e32, rtol=0, atol=1e-5)


def test_bad_shapes():
    s, r = random_scores(3, 0, 1.0)
    with pytest.raises(ValueError):
        dependency_marginals(s, r[:, :2])
    with pytest.raises(ValueError):
        dependency_marginals(s[:, :2], r)
    with pytest.raises(ValueError):
        dependency_marginals(s, r, torch.ones(1, 4, dtype=torch.bool))
