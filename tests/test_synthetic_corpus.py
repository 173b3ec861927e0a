"""Tests for the embedded synthetic en->vf corpus (fairseq_syntax.data.synthetic_corpus)."""
import ast
import os

import conllu
import networkx as nx
import pytest

from fairseq_syntax.data import synthetic_corpus as sc


@pytest.fixture(scope="module")
def pairs():
    return sc.generate_pairs(600, seed=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("synthetic"))
    summary = sc.generate_corpus(out, seed=5, train=300, valid=40, test=50)
    return out, summary


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def root_and_subject(pair):
    """Index of the root (main verb) and of its nsubj child (the subject head noun)."""
    root = pair.heads.index(-1)
    subjects = [i for i, h in enumerate(pair.heads) if h == root and pair.deprels[i] == "nsubj"]
    assert len(subjects) == 1
    return root, subjects[0]


def test_module_is_torch_and_fairseq_free():
    with open(sc.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and not imported & {"torch", "fairseq", "numpy"}


def test_lexicon_is_unambiguous():
    lexicon = sc.target_lexicon()
    verbs = [form for form, (upos, _, _) in lexicon.items() if upos == "VERB"]
    assert len(verbs) == 2 * len(sc.VERBS)
    assert all(sc.verb_number(form) in ("sg", "pl") for form in verbs)
    assert all(sc.verb_number(form) is None for form in lexicon if form not in verbs)


def test_deterministic_for_a_seed_and_different_for_another():
    a, b, c = (sc.generate_pairs(50, seed) for seed in (7, 7, 8))
    assert a == b
    assert [p.source for p in a] != [p.source for p in c]


def test_pairs_are_distinct(pairs):
    assert len({" ".join(p.source) for p in pairs}) == len(pairs)


def test_gold_trees_are_trees(pairs):
    for p in pairs:
        assert len(p.heads) == len(p.deprels) == len(p.source) == len(p.upos)
        assert p.heads.count(-1) == 1 and p.deprels[p.heads.index(-1)] == "root"
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(p.heads)))
        graph.add_edges_from((h, d) for d, h in enumerate(p.heads) if h >= 0)
        assert nx.is_arborescence(graph), p.source


def test_tree_labels_follow_ud(pairs):
    for p in pairs:
        root, subject = root_and_subject(p)
        assert p.upos[root] == "VERB" and p.source[-1] == "." and p.deprels[-1] == "punct"
        for i, (head, rel) in enumerate(zip(p.heads, p.deprels)):
            if rel == "det":
                assert p.upos[i] == "DET" and p.upos[head] == "NOUN"
            elif rel == "case":
                assert p.upos[i] == "ADP" and p.deprels[head] == "nmod"
            elif rel == "acl:relcl":
                assert p.upos[i] == "VERB" and p.upos[head] == "NOUN"
            elif rel == "nsubj" and p.source[i] == "that":
                assert p.deprels[head] == "acl:relcl"


def test_source_verbs_carry_no_number(pairs):
    # the same past-tense form occurs with singular and plural subjects
    by_form = {}
    for p in pairs:
        root, subject = root_and_subject(p)
        by_form.setdefault(p.source[root], set()).add(sc.source_noun_number(p.source[subject]))
    assert any(numbers == {"sg", "pl"} for numbers in by_form.values())


def test_alignments_in_range_and_complete(pairs):
    for p in pairs:
        assert len(p.target) == len(p.source)
        assert [i for i, _ in p.alignment] == list(range(len(p.source)))
        assert all(0 <= j < len(p.target) for _, j in p.alignment)
        assert sorted(j for _, j in p.alignment) == list(range(len(p.target)))
        lexicon = sc.target_lexicon()
        for i, j in p.alignment:  # aligned words have the same part of speech
            assert lexicon[p.target[j]][0] == p.upos[i]


def test_main_verb_agrees_with_subject_head(pairs):
    for p in pairs:
        root, subject = root_and_subject(p)
        number = sc.source_noun_number(p.source[subject])
        assert number == p.main_verb_number
        assert sc.main_verb_number(" ".join(p.target)) == number
        assert p.target[-2] == p.target[dict(p.alignment)[root]]  # verb-final


def test_every_verb_agrees_with_its_own_subject(pairs):
    n_relative = 0
    for p in pairs:
        align = dict(p.alignment)
        for v, upos in enumerate(p.upos):
            if upos != "VERB":
                continue
            subject = next(i for i, h in enumerate(p.heads) if h == v and p.deprels[i] == "nsubj")
            if p.source[subject] == "that":  # relative clause: the modified noun
                subject, n_relative = p.heads[v], n_relative + 1
            assert sc.verb_number(p.target[align[v]]) == sc.source_noun_number(p.source[subject])
    assert n_relative > 50


def test_attractors_are_common(pairs):
    with_attractor = 0
    for p in pairs:
        root, subject = root_and_subject(p)
        number = sc.source_noun_number(p.source[subject])
        between = [sc.source_noun_number(t) for t in p.source[subject + 1:root]]
        with_attractor += any(n not in (None, number) for n in between)
    assert with_attractor > 0.3 * len(pairs)


def test_agreement_accuracy_by_hand():
    refs = ["ko vask mi mirn videt .", "kos vaski ko mirn kasen .", "ko vask ko pilk pamet ."]
    hyps = ["ko vask mi mirn videt.", "kos vaski ko mirn kaset .", "ko vask ko pilk ."]
    assert sc.agreement_accuracy(hyps, refs) == pytest.approx(1 / 3)
    assert sc.agreement_accuracy(["ko vask ke mirni pamen videt ."], ["x videt ."]) == 1.0
    assert sc.agreement_accuracy(["ko vask videt mirni pamen ."], ["x videt ."]) == 0.0
    hyps[1] = "kos vaski ko mirn kasen ."
    assert sc.agreement_accuracy(hyps, refs) == pytest.approx(2 / 3)
    assert sc.verb_number("videt") == "sg" and sc.verb_number("viden") == "pl"
    assert sc.verb_number("vask") is None and sc.verb_number("saw") is None
    with pytest.raises(ValueError):
        sc.agreement_accuracy(hyps, refs[:2])


def test_corpus_files(corpus):
    out, summary = corpus
    assert summary["sizes"] == {"train": 300, "valid": 40, "test": 50}
    sentences = {}
    for split, size in summary["sizes"].items():
        paths = summary["paths"][split]
        en, vf, align = (read_lines(paths[k]) for k in ("en", "vf", "align"))
        assert len(en) == len(vf) == len(align) == size
        with open(paths["en.conllu"], encoding="utf-8") as f:
            trees = conllu.parse(f.read())
        assert len(trees) == size
        for line, tree, target, links in zip(en, trees, vf, align):
            assert [t["form"] for t in tree] == line.split()
            assert tree.metadata["text"] == line
            assert sum(t["head"] == 0 for t in tree) == 1
            pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
            assert [i for i, _ in pairs] == list(range(len(line.split())))
            assert all(0 <= j < len(target.split()) for _, j in pairs)
        sentences[split] = set(en)
    assert not sentences["test"] & sentences["train"]
    assert not sentences["valid"] & sentences["train"]
    assert not sentences["test"] & sentences["valid"]


def test_conllu_matches_pairs(corpus):
    out, _ = corpus
    pairs = sc.generate_pairs(390, seed=5)[:50]  # the test split is drawn first
    with open(os.path.join(out, "test.en.conllu"), encoding="utf-8") as f:
        trees = conllu.parse(f.read())
    for p, tree in zip(pairs, trees):
        assert [t["head"] - 1 for t in tree] == p.heads
        assert [t["deprel"] for t in tree] == p.deprels
        assert [t["upos"] for t in tree] == p.upos


def test_main_writes_files(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert sc.main(["--out", str(out), "--seed", "2", "--train", "30", "--valid", "5",
                    "--test", "6"]) == 0
    for split, size in (("train", 30), ("valid", 5), ("test", 6)):
        for ext in ("en", "vf", "en.conllu", "align"):
            assert (out / f"{split}.{ext}").exists()
        assert len(read_lines(out / f"{split}.en")) == size
    printed = capsys.readouterr().out
    assert "30/5/6" in printed and str(out) in printed


def test_main_requires_out():
    with pytest.raises(SystemExit):
        sc.main([])


def test_score_main(tmp_path, capsys):
    ref = tmp_path / "ref.vf"
    hyp = tmp_path / "hyp.vf"
    ref.write_text("ko vask mi mirn videt .\nkos vaski ko mirn kasen .\nko vask pamet .\n")
    hyp.write_text("ko vask mi mirn videt .\nkos vaski ko mirn kaset .\nko vask pamet.\n")
    assert sc.score_main(["--hyp", str(hyp), "--ref", str(ref)]) == 0
    assert capsys.readouterr().out.strip() == "agreement accuracy: 66.67 (2/3)"


def test_score_main_mismatched_lengths(tmp_path, capsys):
    ref = tmp_path / "ref.vf"
    hyp = tmp_path / "hyp.vf"
    ref.write_text("ko vask videt .\nko vask videt .\n")
    hyp.write_text("ko vask videt .\n")
    with pytest.raises(SystemExit) as err:
        sc.score_main(["--hyp", str(hyp), "--ref", str(ref)])
    assert err.value.code == 2
    message = capsys.readouterr().err
    assert str(hyp) in message and str(ref) in message and "1" in message and "2" in message


def test_twenty_thousand_pairs():
    pairs = sc.generate_pairs(20000, seed=1)
    assert len(pairs) == 20000
    assert {p.main_verb_number for p in pairs} == {"sg", "pl"}
