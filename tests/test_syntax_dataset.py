"""The syntax dataset: distances, collation order, side-file checks."""
import random

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset
from fairseq_syntax.data.tree_tensors import (
    EOS_DISTANCE,
    HEAD_PAD,
    PAD_DISTANCE,
    WORD_PAD,
    tree_distances,
    word_distances,
)
from fairseq_syntax.syntax.dependency import project_heads_to_subwords
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


def word_level_reference(word_heads, counts):
    """The distance matrix over pieces + eos by its definition (docs/design.md §3.3), from
    networkx shortest paths over the *word* tree: pieces of words a and b at d(a, b), eos
    at EOS_DISTANCE from every piece and 0 from itself."""
    graph = nx.Graph()
    graph.add_nodes_from(range(len(word_heads)))
    graph.add_edges_from((m, h) for m, h in enumerate(word_heads) if h >= 0)
    word_dist = dict(nx.all_pairs_shortest_path_length(graph))
    word_of = [w for w, c in enumerate(counts) for _ in range(c)]
    n = len(word_of)
    out = np.full((n + 1, n + 1), EOS_DISTANCE, dtype=np.int64)
    out[n, n] = 0
    for j in range(n):
        for k in range(n):
            out[j, k] = word_dist[word_of[j]][word_of[k]]
    return out


def random_sentence(rng, max_words=6, max_pieces=3):
    """A random word tree, pieces per word, and its heads and words side-file rows."""
    n_words = rng.randint(1, max_words)
    word_heads = random_heads(n_words, rng)
    counts = [rng.randint(1, max_pieces) for _ in range(n_words)]
    heads = project_heads_to_subwords(word_heads, counts)
    words = [w for w, c in enumerate(counts) for _ in range(c)] + [-1]
    return word_heads, counts, torch.tensor(heads), torch.tensor(words)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(0, 10**6))
def test_word_distances_equal_networkx_over_the_word_tree(batch_size, seed):
    rng = random.Random(seed)
    sentences = [random_sentence(rng, max_words=10, max_pieces=4) for _ in range(batch_size)]
    width = max(len(s[2]) for s in sentences) + rng.randint(0, 2)
    heads = torch.full((batch_size, width), HEAD_PAD)
    words = torch.full((batch_size, width), WORD_PAD)
    for b, (_, _, h, w) in enumerate(sentences):
        heads[b, : len(h)] = h
        words[b, : len(w)] = w
    dist = word_distances(heads, words)
    for b, (word_heads, counts, h, _) in enumerate(sentences):
        n = len(h)
        assert np.array_equal(dist[b, :n, :n].numpy(), word_level_reference(word_heads, counts))
        assert (dist[b, n:] == PAD_DISTANCE).all() and (dist[b, :, n:] == PAD_DISTANCE).all()


def test_word_distances_hand_worked():
    # The un·believ·able dog barked <eos>: The->dog, unbelievable->dog, dog->barked.
    # Over pieces the old tree distances put "un" and "able" 1 apart, "The" and "able" 3
    # apart and eos 1 from "barked"; over words they are 0, 2 and EOS_DISTANCE.
    heads = torch.tensor([project_heads_to_subwords([2, 2, 3, -1], [1, 3, 1, 1])])
    words = torch.tensor([[0, 1, 1, 1, 2, 3, -1]])
    dist = word_distances(heads, words)[0]
    E = EOS_DISTANCE
    assert dist.tolist() == [
        [0, 2, 2, 2, 1, 2, E],
        [2, 0, 0, 0, 1, 2, E],
        [2, 0, 0, 0, 1, 2, E],
        [2, 0, 0, 0, 1, 2, E],
        [1, 1, 1, 1, 0, 1, E],
        [2, 2, 2, 2, 1, 0, E],
        [E, E, E, E, E, E, 0],
    ]


def test_word_distances_need_matching_padding():
    heads = torch.tensor([[1, -1, 1, HEAD_PAD]])
    words = torch.tensor([[0, 1, -1, -1]])
    with pytest.raises(ValueError, match="different padding"):
        word_distances(heads, words)


def make_dataset(n_sentences=9, seed=0, **kwargs):
    rng = random.Random(seed)
    d = tiny_dictionary()
    src, tgt, heads, words, trees, aligns, refs = [], [], [], [], [], [], []
    for i in range(n_sentences):
        word_heads, counts, h, w = random_sentence(rng)
        n = sum(counts)
        src.append(torch.tensor([rng.randrange(4, len(d)) for _ in range(n)] + [d.eos()]))
        m = rng.randint(1, 6)
        tgt.append(torch.tensor([rng.randrange(4, len(d)) for _ in range(m)] + [d.eos()]))
        heads.append(h)
        words.append(w)
        refs.append(word_level_reference(word_heads, counts))
        trees.append(torch.tensor([[k, k + 1] for k in range(n - 1)]).view(-1))
        aligns.append(torch.tensor([[k % n, k % m] for k in range(rng.randint(1, 4))]).view(-1))
    ds = SyntaxLanguagePairDataset(
        src, np.array([len(s) for s in src]), d, tgt, np.array([len(t) for t in tgt]), d,
        left_pad_source=False, alignments=aligns, heads=heads, words=words, tree=trees,
        inputs={"distances", "tree", "alignments"}, split="test", **kwargs,
    )
    ds.references = refs
    return ds, heads, trees, aligns


def test_collated_side_tensors_follow_fairseqs_sort():
    ds, heads, trees, aligns = make_dataset()
    batch = ds.collater([ds[i] for i in range(len(ds))])
    net = batch["net_input"]
    ids = batch["id"].tolist()
    assert ids != sorted(ids), "fairseq sorts by source length: the test needs a reordering"
    assert any(len(set(w.tolist())) < len(w) for w in ds.words), "some word has several pieces"
    for row, i in enumerate(ids):
        n = len(heads[i])
        assert torch.equal(net["src_tokens"][row, :n], ds.src[i])
        assert torch.equal(net["src_heads"][row, :n], heads[i])
        assert (net["src_heads"][row, n:] == HEAD_PAD).all()
        assert torch.equal(net["src_words"][row, :n], ds.words[i])
        assert (net["src_words"][row, n:] == WORD_PAD).all()
        assert np.array_equal(net["src_distances"][row, :n, :n].numpy(), ds.references[i])
        assert (net["src_distances"][row, n:] == PAD_DISTANCE).all()
        k = trees[i].numel() // 2
        assert torch.equal(net["src_tree"][row, :k], trees[i].view(-1, 2))
        assert (net["src_tree"][row, k:] == -1).all()
        links = aligns[i].view(-1, 2)
        assert torch.equal(batch["alignment_links"][row, : links.size(0)], links)
        assert (batch["alignment_links"][row, links.size(0):] == -1).all()


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


# ------------------------------------------------------------- data-bins: format version


def _setup_task(databin, extra=()):
    from fairseq import options, tasks

    from conftest import USER_DIR

    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation", "--cpu", *extra])
    return tasks.setup_task(args)


def _as_version_1(databin, dest):
    """A copy of a data-bin as format 1 wrote it: no words side-file, no recorded command."""
    import json
    import shutil

    shutil.copytree(databin, dest)
    for path in dest.glob("*.words.*"):
        path.unlink()
    manifest = json.loads((dest / "syntax_manifest.json").read_text())
    manifest["format_version"] = 1
    del manifest["command"]
    (dest / "syntax_manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_version_1_data_bin_is_refused_with_the_command_that_rebuilds_it(
        synthetic_databin, tmp_path):
    import shlex

    from conftest import run_cli

    old = tmp_path / "old-bin"
    _as_version_1(synthetic_databin, old)
    for option in ("--load-distances", "--load-tree", "--load-heads"):
        task = _setup_task(old, [option])
        with pytest.raises(ValueError, match="format 1.*this code reads format 2") as err:
            task.load_dataset("valid")
    task = _setup_task(old)  # a model that needs no side-file still loads it
    task.load_dataset("valid")
    assert len(task.datasets["valid"]) == 40

    # the command named in the error rebuilds it: same tokens (its own spm.model), format 2
    command = str(err.value).splitlines()[-1].strip()
    argv = shlex.split(command)
    assert argv[0] == "fairseq-syntax-preprocess" and "--force" in argv
    assert argv[argv.index("--destdir") + 1] == str(old)
    run_cli(argv)
    task = _setup_task(old, ["--load-distances", "--load-tree"])
    task.load_dataset("valid")
    new = task.datasets["valid"]
    for split in ("train", "valid", "test"):
        for suffix in ("en.bin", "vf.bin", "en.words.bin", "en.tree.bin", "en.heads.bin"):
            name = f"{split}.en-vf.{suffix}"
            assert (old / name).read_bytes() == (synthetic_databin / name).read_bytes(), name
    assert new.words is not None and new.inputs == {"distances", "heads", "words", "tree"}


def test_recorded_command_is_the_rebuild_command(synthetic_databin):
    import json

    from fairseq_syntax.data.side_files import rebuild_command

    manifest = json.loads((synthetic_databin / "syntax_manifest.json").read_text())
    manifest["format_version"] = 1
    command = rebuild_command(str(synthetic_databin), manifest)
    assert command.startswith(f"cd {manifest['command']['cwd']} && fairseq-syntax-preprocess ")
    assert f"--destdir {synthetic_databin}" in command and command.endswith("--force")


# ------------------------------------------- raw input (fairseq-interactive) = side-files


class GoldParser:
    """Stands in for the spaCy parser: the gold trees of the synthetic corpus."""

    def __init__(self, conllu):
        from fairseq_syntax.syntax.conllu_io import read_conllu_trees

        self.trees = {tuple(t.words): t for t in read_conllu_trees(conllu)}

    def parse(self, sentences, **kwargs):
        return [self.trees[tuple(words)] for words in sentences]


def test_raw_input_gives_the_side_files_distances_and_trees(synthetic_raw, synthetic_databin):
    """fairseq-interactive's path (raw line -> words -> spm.model pieces -> parse -> side
    tensors) and the data-bin's side-files give the same heads, words, word-level
    distances and trees, on sentences with multi-piece words."""
    from fairseq_syntax.data.raw_input import side_tensors

    task = _setup_task(synthetic_databin, ["--load-distances", "--load-tree"])
    task.load_dataset("valid")
    stored = task.datasets["valid"]
    lines = (synthetic_raw / "valid.en").read_text().splitlines()
    multi = [i for i in range(len(lines))
             if len(set(stored.words[i].tolist())) < len(stored.words[i])]
    assert len(multi) >= 5, "the test needs sentences with words split into pieces"
    chosen = multi[:8]
    task.raw_input_adapter()._parser = GoldParser(str(synthetic_raw / "valid.en.conllu"))
    tokens, lengths = task.get_interactive_tokens_and_lengths([lines[i] for i in chosen],
                                                              lambda x: x)
    raw = task.build_dataset_for_inference(tokens, lengths)
    raw_batch = raw.collater([raw[k] for k in range(len(raw))])
    sources = [task.raw_input_adapter().batch.lookup(t, task.source_dictionary.pad()) for t in tokens]
    width = max(len(t) for t in tokens)
    bare = side_tensors(sources, width, {"distances", "tree"})
    for k, i in enumerate(chosen):
        want = stored.collater([stored[i]])["net_input"]
        n = len(tokens[k])
        assert torch.equal(tokens[k], stored.src[i])
        row = raw_batch["id"].tolist().index(k)
        got = raw_batch["net_input"]
        for key in ("src_heads", "src_words"):
            assert torch.equal(got[key][row, :n], want[key][0]), key
            assert torch.equal(bare[key][k, :n], want[key][0]), key
        assert torch.equal(got["src_distances"][row, :n, :n], want["src_distances"][0])
        assert torch.equal(bare["src_distances"][k, :n, :n], want["src_distances"][0])
        assert torch.equal(got["src_tree"][row, : n - 2], want["src_tree"][0])
        assert torch.equal(bare["src_tree"][k, : n - 2], want["src_tree"][0])
        assert want["src_distances"][0, :-1, -1].eq(EOS_DISTANCE).all()
