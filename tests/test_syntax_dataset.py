"""The syntax dataset: distances, collation order, side-file checks."""
import random

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset
from fairseq_syntax.data.tree_tensors import HEAD_PAD, PAD_DISTANCE, tree_distances
from model_utils import tiny_dictionary


def random_heads(n, rng):
    """A uniformly shaped random tree: each node after the first picks an earlier one."""
    order = list(range(n))
    rng.shuffle(order)
    heads = [-1] * n
    for k in range(1, n):
        heads[order[k]] = order[rng.randrange(k)]
    return heads


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 25), min_size=1, max_size=5), st.integers(0, 10**6))
def test_distances_equal_networkx_shortest_paths(lengths, seed):
    rng = random.Random(seed)
    trees = [random_heads(n, rng) for n in lengths]
    heads = torch.full((len(trees), max(lengths)), HEAD_PAD)
    for i, t in enumerate(trees):
        heads[i, : len(t)] = torch.tensor(t)
    dist = tree_distances(heads)
    for i, t in enumerate(trees):
        graph = nx.Graph()
        graph.add_nodes_from(range(len(t)))
        graph.add_edges_from((m, h) for m, h in enumerate(t) if h >= 0)
        expected = nx.floyd_warshall_numpy(graph, nodelist=range(len(t)))
        assert np.array_equal(dist[i, : len(t), : len(t)].numpy(), expected.astype(np.int64))
        assert (dist[i, len(t):] == PAD_DISTANCE).all() and (dist[i, :, len(t):] == PAD_DISTANCE).all()


def make_dataset(n_sentences=9, seed=0, **kwargs):
    rng = random.Random(seed)
    d = tiny_dictionary()
    src, tgt, heads, trees, aligns = [], [], [], [], []
    for i in range(n_sentences):
        n = rng.randint(1, 8)
        src.append(torch.tensor([rng.randrange(4, len(d)) for _ in range(n)] + [d.eos()]))
        m = rng.randint(1, 6)
        tgt.append(torch.tensor([rng.randrange(4, len(d)) for _ in range(m)] + [d.eos()]))
        h = random_heads(n, rng)
        heads.append(torch.tensor(h + [h.index(-1)]))
        trees.append(torch.tensor([[k, k + 1] for k in range(n - 1)]).view(-1))
        aligns.append(torch.tensor([[k % n, k % m] for k in range(rng.randint(1, 4))]).view(-1))
    ds = SyntaxLanguagePairDataset(
        src, np.array([len(s) for s in src]), d, tgt, np.array([len(t) for t in tgt]), d,
        left_pad_source=False, align_dataset=aligns, heads=heads, tree=trees,
        compute_distances=True, split="test", **kwargs,
    )
    return ds, heads, trees, aligns


def test_collated_side_tensors_follow_fairseqs_sort():
    ds, heads, trees, aligns = make_dataset()
    batch = ds.collater([ds[i] for i in range(len(ds))])
    net = batch["net_input"]
    ids = batch["id"].tolist()
    assert ids != sorted(ids), "fairseq sorts by source length: the test needs a reordering"
    for row, i in enumerate(ids):
        n = len(heads[i])
        assert torch.equal(net["src_tokens"][row, :n], ds.src[i])
        assert torch.equal(net["src_heads"][row, :n], heads[i])
        assert (net["src_heads"][row, n:] == HEAD_PAD).all()
        assert torch.equal(net["src_distances"][row, :n, :n], tree_distances(heads[i].unsqueeze(0))[0])
        k = trees[i].numel() // 2
        assert torch.equal(net["src_tree"][row, :k], trees[i].view(-1, 2))
        assert (net["src_tree"][row, k:] == -1).all()
        links = aligns[i].view(-1, 2)
        assert torch.equal(net["alignment_links"][row, : links.size(0)], links)
        assert (net["alignment_links"][row, links.size(0):] == -1).all()


def test_side_file_length_mismatch_names_split_and_sentence():
    ds, heads, trees, aligns = make_dataset()
    bad = list(heads)
    bad[5] = bad[5][:-1]
    with pytest.raises(ValueError, match=r"split 'test': sentence 5: the heads side-file"):
        SyntaxLanguagePairDataset(
            ds.src, ds.src_sizes, ds.src_dict, ds.tgt, ds.tgt_sizes, ds.tgt_dict,
            left_pad_source=False, heads=bad, split="test",
        )


def test_model_without_syntax_pays_nothing():
    ds, *_ = make_dataset()
    plain = SyntaxLanguagePairDataset(
        ds.src, ds.src_sizes, ds.src_dict, ds.tgt, ds.tgt_sizes, ds.tgt_dict, left_pad_source=False
    )
    batch = plain.collater([plain[i] for i in range(len(plain))])
    assert set(batch["net_input"]) == {"src_tokens", "src_lengths", "prev_output_tokens"}
