"""Tests for the embedded synthetic en->vf corpus (fairseq_syntax.data.synthetic_corpus)."""
import ast
import hashlib
import os
import statistics

import conllu
import networkx as nx
import pytest

from fairseq_syntax.cli import score_agreement, synthetic
from fairseq_syntax.data import synthetic_corpus as sc
from fairseq_syntax.evaluation import agreement
from fairseq_syntax.syntax.conllu_io import ParsedSentence, read_conllu_trees, write_conllu
from fairseq_syntax.syntax.pharaoh import format_pharaoh


@pytest.fixture(scope="module", params=["in-distribution", "gen"])
def pairs(request):
    """The tree/alignment/agreement checks run on both kinds of sentences."""
    if request.param == "gen":
        return sc.generate_gen_pairs(300, seed=3)
    return sc.generate_pairs(600, seed=3)


@pytest.fixture(scope="module")
def train_and_gen():
    return sc.generate_pairs(3000, seed=3), sc.generate_gen_pairs(300, seed=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("synthetic"))
    summary = sc.generate_corpus(out, seed=5, train=300, valid=40, test=50, gen=60)
    return out, summary


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def tree_depth(heads):
    """Longest root-to-word path of a tree (0-based heads, -1 for the root)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(heads)))
    graph.add_edges_from((h, d) for d, h in enumerate(heads) if h >= 0)
    return max(nx.shortest_path_length(graph, heads.index(-1)).values())


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
                assert p.upos[i] == "ADP" and p.deprels[head] in ("nmod", "obl")
            elif rel == "obl":  # the fronted PP's noun, before the subject
                assert p.heads[i] == root and p.upos[i] == "NOUN" and i < subject
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
        assert agreement.main_verb_number(" ".join(p.target)) == number
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
    assert agreement.agreement_accuracy(hyps, refs) == pytest.approx(1 / 3)
    assert agreement.agreement_accuracy(["ko vask ke mirni pamen videt ."], ["x videt ."]) == 1.0
    assert agreement.agreement_accuracy(["ko vask videt mirni pamen ."], ["x videt ."]) == 0.0
    hyps[1] = "kos vaski ko mirn kasen ."
    assert agreement.agreement_accuracy(hyps, refs) == pytest.approx(2 / 3)
    assert sc.verb_number("videt") == "sg" and sc.verb_number("viden") == "pl"
    assert sc.verb_number("vask") is None and sc.verb_number("saw") is None
    with pytest.raises(ValueError):
        agreement.agreement_accuracy(hyps, refs[:2])


def test_corpus_files(corpus):
    out, summary = corpus
    assert summary["sizes"] == {"train": 300, "valid": 40, "test": 50, "gen": 60}
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
    for split in ("train", "valid", "test"):
        assert not sentences["gen"] & sentences[split]
    longest = max(len(line.split()) for line in sentences["train"])
    assert min(len(line.split()) for line in sentences["gen"]) > longest


def test_conllu_matches_pairs(corpus):
    out, _ = corpus
    pairs = sc.generate_pairs(390, seed=5)[:50]  # the test split is drawn first
    with open(os.path.join(out, "test.en.conllu"), encoding="utf-8") as f:
        trees = conllu.parse(f.read())
    for p, tree in zip(pairs, trees):
        assert [t["head"] - 1 for t in tree] == p.heads
        assert [t["deprel"] for t in tree] == p.deprels
        assert [t["upos"] for t in tree] == p.upos
    with open(os.path.join(out, "gen.en.conllu"), encoding="utf-8") as f:
        trees = conllu.parse(f.read())
    for p, tree in zip(sc.generate_gen_pairs(60, seed=5), trees):
        assert [t["head"] - 1 for t in tree] == p.heads
        assert [t["deprel"] for t in tree] == p.deprels


def _constituent_spans(root):
    """(first, last) leaf of every constituent of a bracketed tree (unary ones included)."""
    from fairseq_syntax.syntax.constituency import Constituent

    spans, order, stack = {}, [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(c for c in node.children if isinstance(c, Constituent))
    for node in reversed(order):  # children first
        ends = [spans[id(c)] if isinstance(c, Constituent) else (c, c) for c in node.children]
        spans[id(node)] = (ends[0][0], ends[-1][1])
    return set(spans.values())


def test_bracketed_trees_match_words_and_gold_dependency_trees(corpus):
    """S.en.ptb: one tree per line of S.en whose leaves are its words, and consistent with
    the gold dependency tree both ways: every constituent, and every node of its word-level
    binarisation, is a connected piece of the dependency tree (contiguous, so the words of a
    constituent hang together through their heads), and every word's dependency subtree
    (the word and all its dependents) spans a constituent. Checked with networkx."""
    from fairseq_syntax.syntax.constituency import binarize_constituents, read_bracketed_trees

    out, summary = corpus
    for split, size in summary["sizes"].items():
        paths = summary["paths"][split]
        words = [line.split() for line in read_lines(paths["en"])]
        brackets = read_bracketed_trees(paths["en.ptb"])
        deps = read_conllu_trees(paths["en.conllu"])
        assert len(brackets) == len(deps) == size
        for line, tree, dep in zip(words, brackets, deps):
            assert tree.leaves == line
            n = len(line)
            undirected = nx.Graph()
            undirected.add_nodes_from(range(n))
            undirected.add_edges_from((d, h) for d, h in enumerate(dep.heads) if h >= 0)
            directed = nx.DiGraph((h, d) for d, h in enumerate(dep.heads) if h >= 0)
            constituents = _constituent_spans(tree.root)
            rows = binarize_constituents(tree).tolist()
            cover = [(i, i) for i in range(n)]
            for left, right in rows:
                cover.append((cover[left][0], cover[right][1]))
            assert constituents <= set(cover)
            for first, last in set(cover) | constituents:
                assert nx.is_connected(undirected.subgraph(range(first, last + 1))), (
                    line[first:last + 1], tree.leaves)
            for w in range(n):
                below = {w} | nx.descendants(directed, w)
                span = (min(below), max(below))
                assert len(below) == span[1] - span[0] + 1  # projective
                assert span in constituents | {(w, w)}, (line[span[0]:span[1] + 1])


def test_bracketed_trees_follow_the_phrase_structure_by_hand():
    pair = sc.generate_pairs(1, seed=1)[0]
    assert " ".join(pair.source) == (
        "with some dogs the white bear near some pilots liked the young girl .")
    assert pair.brackets == (
        "(ROOT (S (PP (IN with) (NP (DT some) (NNS dogs))) (NP (NP (DT the) (JJ white) "
        "(NN bear)) (PP (IN near) (NP (DT some) (NNS pilots)))) (VP (VBD liked) (NP (DT the) "
        "(JJ young) (NN girl))) (. .)))")
    relative = next(p for p in sc.generate_pairs(50, seed=1) if "that" in p.source)
    assert " ".join(relative.source) == (
        "the boy that helped the bakers that followed some boys called some brown pilots .")
    assert relative.brackets == (
        "(ROOT (S (NP (NP (DT the) (NN boy)) (SBAR (WHNP (WDT that)) (S (VP (VBD helped) "
        "(NP (NP (DT the) (NNS bakers)) (SBAR (WHNP (WDT that)) (S (VP (VBD followed) "
        "(NP (DT some) (NNS boys)))))))))) (VP (VBD called) (NP (DT some) (JJ brown) "
        "(NNS pilots))) (. .)))")


def test_in_distribution_splits_unchanged(corpus, tmp_path):
    out, _ = corpus
    pairs = sc.generate_pairs(390, seed=5)
    chunks = {"test": pairs[:50], "valid": pairs[50:90], "train": pairs[90:]}
    for split, chunk in chunks.items():
        assert read_lines(os.path.join(out, f"{split}.en")) == [" ".join(p.source) for p in chunk]
        assert read_lines(os.path.join(out, f"{split}.vf")) == [" ".join(p.target) for p in chunk]
        assert read_lines(os.path.join(out, f"{split}.align")) == [
            format_pharaoh(p.alignment) for p in chunk]
    # gen=0 writes no gen files and the same in-distribution files
    summary = sc.generate_corpus(str(tmp_path), seed=5, train=300, valid=40, test=50, gen=0)
    assert set(summary["sizes"]) == set(summary["paths"]) == {"train", "valid", "test"}
    assert not any(name.startswith("gen.") for name in os.listdir(tmp_path))
    for split in chunks:
        for ext in ("en", "vf", "en.conllu", "en.ptb", "align"):
            assert read_lines(tmp_path / f"{split}.{ext}") == read_lines(
                os.path.join(out, f"{split}.{ext}"))


def test_seed_one_pairs_are_pinned():
    # published numbers use the seed-1 corpus: its sentences must never change
    pairs = sc.generate_pairs(1000, seed=1)
    text = "\n".join(" ".join(p.source) + " ||| " + " ".join(p.target) for p in pairs)
    assert " ".join(pairs[0].source) == "with some dogs the white bear near some pilots liked the young girl ."
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "c0ff6609d9c613b9568d358b9e2a05e0999014f3ec2c3e110d2018ede458f59a")


def test_gen_is_deterministic_and_seeded_from_the_corpus_seed():
    a = sc.generate_gen_pairs(20, seed=3)
    assert a == sc.generate_gen_pairs(20, seed=3)
    assert a == sc.generate_pairs(20, 3 + 1000003, sc.GENERALISATION, min_length=46)
    assert [p.source for p in a] != [p.source for p in sc.generate_gen_pairs(20, seed=4)]
    assert sc.generate_gen_pairs(50, seed=3)[:20] == a


def test_gen_is_longer_than_any_training_sentence(train_and_gen):
    train, gen = train_and_gen
    assert sc.max_source_length() == 45 and sc.DEFAULT_PARAMS == sc.GrammarParams()
    assert max(len(p.source) for p in train) <= sc.max_source_length()
    assert min(len(p.source) for p in gen) > sc.max_source_length()
    assert len({" ".join(p.source) for p in gen}) == len(gen)


def test_gen_has_more_attractors_and_deeper_trees(train_and_gen):
    train, gen = train_and_gen
    attractors = {name: [agreement.attractors(p.source, p.heads) for p in pairs]
                  for name, pairs in (("train", train), ("gen", gen))}
    depths = {name: [tree_depth(p.heads) for p in pairs]
              for name, pairs in (("train", train), ("gen", gen))}
    assert statistics.mean(attractors["gen"]) > statistics.mean(attractors["train"]) + 2
    assert min(attractors["gen"]) >= 2  # every gen sentence is long-distance
    assert statistics.mean(depths["gen"]) > statistics.mean(depths["train"]) + 2
    assert max(depths["gen"]) > max(depths["train"])
    for p in gen:  # every noun between subject head and verb is an attractor
        root, subject = root_and_subject(p)
        number = sc.source_noun_number(p.source[subject])
        assert sc.source_noun_number(p.source[subject + 1]) is None
        assert all(sc.source_noun_number(t) in (None, sc.PL if number == sc.SG else sc.SG)
                   for t in p.source[subject + 1:root])
        # every gen sentence opens with a fronted PP: the first noun is an attractor
        assert p.upos[0] == "ADP" and p.deprels[p.heads[0]] == "obl"
        first_noun = next(t for t in p.source if sc.source_noun_number(t))
        assert sc.source_noun_number(first_noun) != number


# long-distance: "cats" and "birds" (plural) stand between "dog" and "saw"
LONG = ParsedSentence("the dog near the cats with the birds saw a mouse .".split(),
                      [1, 8, 4, 4, 1, 7, 7, 4, -1, 10, 8, 8],
                      ["det", "nsubj", "case", "det", "nmod", "case", "det", "nmod", "root",
                       "det", "obj", "punct"])
# not long-distance: "cat" has the subject's number, only "birds" is an attractor, and
# nouns after the verb do not count
SHORT = ParsedSentence("the dog near the cat with the birds saw the mice .".split(),
                       LONG.heads, LONG.deprels)
LONG_REF = "ko vask kos mirni kos pilki kon pres mi sirt videt ."
SHORT_REF = "ko vask ko mirn kos pilki kon pres kos sirti videt ."


def test_attractors_by_hand():
    assert agreement.attractors(LONG.words, LONG.heads) == 2
    assert agreement.attractors(SHORT.words, SHORT.heads) == 1
    assert agreement.attractors("the dogs saw the cat .".split(), [1, 2, -1, 4, 2, 2]) == 0
    # a fronted PP: "cats" (obl of the verb) is an attractor before the subject "dog", the
    # noun dependent of the verb closest to it ("cats" as the subject would give 1)
    fronted = "near the cats the dog with the birds saw a mouse .".split()
    assert agreement.attractors(fronted, [2, 2, 8, 4, 8, 7, 7, 4, -1, 10, 8, 8]) == 2


def test_agreement_report_by_hand():
    refs = [LONG_REF, SHORT_REF]
    report = agreement.agreement_report([LONG_REF, SHORT_REF.replace("videt", "viden")], refs,
                                 [LONG, SHORT])
    assert report == agreement.AgreementReport(50.0, 1, 2, 100.0, 1, 1)
    trees = [(LONG.words, LONG.heads), (SHORT.words, SHORT.heads)]  # plain pairs work too
    report = agreement.agreement_report([LONG_REF.replace("videt", "viden"), SHORT_REF], refs, trees)
    assert report == agreement.AgreementReport(50.0, 1, 2, 0.0, 0, 1)
    report = agreement.agreement_report([SHORT_REF], [SHORT_REF], [SHORT])
    assert report == agreement.AgreementReport(100.0, 1, 1, 0.0, 0, 0)
    with pytest.raises(ValueError):
        agreement.agreement_report(refs, refs, [LONG])


def test_score_main_long_distance(tmp_path, capsys):
    ref, hyp, src = tmp_path / "ref.vf", tmp_path / "hyp.vf", tmp_path / "src.conllu"
    ref.write_text(f"{LONG_REF}\n{SHORT_REF}\n")
    hyp.write_text(LONG_REF.replace("videt", "viden") + f"\n{SHORT_REF}\n")
    write_conllu(str(src), [LONG, SHORT])
    assert score_agreement.main(["--hyp", str(hyp), "--ref", str(ref), "--src-conllu", str(src)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "agreement accuracy: 50.00 (1/2)", "long-distance agreement accuracy: 0.00 (0/1)"]
    write_conllu(str(src), [LONG])
    with pytest.raises(SystemExit) as err:
        score_agreement.main(["--hyp", str(hyp), "--ref", str(ref), "--src-conllu", str(src)])
    assert err.value.code == 2 and str(src) in capsys.readouterr().err


def test_score_main_names_the_file_and_line_of_bad_input(tmp_path, capsys):
    ref, hyp = tmp_path / "ref.vf", tmp_path / "hyp.vf"
    ref.write_text(f"{LONG_REF}\n{SHORT_REF}\n")
    hyp.write_bytes(b"\n" + SHORT_REF.encode() + b" \xff\n")  # an empty hypothesis is a line
    with pytest.raises(SystemExit) as err:
        score_agreement.main(["--hyp", str(hyp), "--ref", str(ref)])
    assert err.value.code == 2
    assert f"{hyp}:2: not valid UTF-8: byte 0xff" in capsys.readouterr().err
    hyp.write_text(f"\n{SHORT_REF}\n")
    assert score_agreement.main(["--hyp", str(hyp), "--ref", str(ref)]) == 0
    assert capsys.readouterr().out == "agreement accuracy: 50.00 (1/2)\n"


def test_score_main_bleu_is_sacrebleu_of_the_detokenised_text(tmp_path, capsys):
    from sacrebleu.metrics import BLEU

    ref, hyp = tmp_path / "ref.vf", tmp_path / "hyp.vf"
    ref.write_text(f"{LONG_REF}\n{SHORT_REF}\n")
    hyp.write_text(LONG_REF.replace("videt", "viden") + f"\n{SHORT_REF}\n")
    assert sc.detokenize("ko vask videt .") == "ko vask videt."
    assert score_agreement.main(["--hyp", str(hyp), "--ref", str(ref), "--bleu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = BLEU().corpus_score([LONG_REF.replace("videt", "viden")[:-2] + ".", SHORT_REF[:-2] + "."],
                                   [[LONG_REF[:-2] + ".", SHORT_REF[:-2] + "."]]).score
    assert lines[1].startswith(f"BLEU (detokenised): {expected:.2f} (nrefs:1|")
    assert 0 < expected < 100


def test_score_main_on_the_gen_split(corpus, capsys):
    out, _ = corpus
    gold = os.path.join(out, "gen.vf")
    assert score_agreement.main(["--hyp", gold, "--ref", gold,
                          "--src-conllu", os.path.join(out, "gen.en.conllu")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "agreement accuracy: 100.00 (60/60)", "long-distance agreement accuracy: 100.00 (60/60)"]
    trees = read_conllu_trees(os.path.join(out, "test.en.conllu"))
    refs = read_lines(os.path.join(out, "test.vf"))
    report = agreement.agreement_report(refs, refs, trees)
    assert 0 < report.long_distance_total < report.total == 50


def test_main_writes_files(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert synthetic.main(["--out", str(out), "--seed", "2", "--train", "30", "--valid", "5",
                    "--test", "6", "--gen", "7"]) == 0
    for split, size in (("train", 30), ("valid", 5), ("test", 6), ("gen", 7)):
        for ext in ("en", "vf", "en.conllu", "en.ptb", "align"):
            assert (out / f"{split}.{ext}").exists()
        assert len(read_lines(out / f"{split}.en")) == size
    printed = capsys.readouterr().out
    assert "30/5/6" in printed and str(out) in printed


def test_main_requires_out():
    with pytest.raises(SystemExit):
        synthetic.main([])


def test_score_main(tmp_path, capsys):
    ref = tmp_path / "ref.vf"
    hyp = tmp_path / "hyp.vf"
    ref.write_text("ko vask mi mirn videt .\nkos vaski ko mirn kasen .\nko vask pamet .\n")
    hyp.write_text("ko vask mi mirn videt .\nkos vaski ko mirn kaset .\nko vask pamet.\n")
    assert score_agreement.main(["--hyp", str(hyp), "--ref", str(ref)]) == 0
    assert capsys.readouterr().out.strip() == "agreement accuracy: 66.67 (2/3)"


def test_score_main_mismatched_lengths(tmp_path, capsys):
    ref = tmp_path / "ref.vf"
    hyp = tmp_path / "hyp.vf"
    ref.write_text("ko vask videt .\nko vask videt .\n")
    hyp.write_text("ko vask videt .\n")
    with pytest.raises(SystemExit) as err:
        score_agreement.main(["--hyp", str(hyp), "--ref", str(ref)])
    assert err.value.code == 2
    message = capsys.readouterr().err
    assert str(hyp) in message and str(ref) in message and "1" in message and "2" in message


def test_twenty_thousand_pairs():
    pairs = sc.generate_pairs(20000, seed=1)
    assert len(pairs) == 20000
    assert {p.main_verb_number for p in pairs} == {"sg", "pl"}


def test_score_main_baseline_is_sacrebleu_paired_test(corpus, tmp_path, capsys):
    """--baseline prints Δ and p of agreement and of detokenised BLEU as sacreBLEU's own
    PairedTest gives them for the two outputs."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    out, _ = corpus
    refs = read_lines(os.path.join(out, "gen.vf"))

    def cut(every):  # every `every`-th sentence loses its second half (and its main verb)
        return [" ".join(r.split()[: len(r.split()) // 2]) + " ." if k % every == 0 else r
                for k, r in enumerate(refs)]

    system, baseline = cut(3), cut(2)
    (tmp_path / "sys.vf").write_text("\n".join(system) + "\n")
    (tmp_path / "base.vf").write_text("\n".join(baseline) + "\n")
    assert score_agreement.main([
        "--hyp", str(tmp_path / "sys.vf"), "--ref", os.path.join(out, "gen.vf"), "--bleu",
        "--baseline", str(tmp_path / "base.vf")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[2] == f"paired bootstrap against {tmp_path / 'base.vf'} (1000 resamples):"
    for line, metric, texts in [
            (printed[3], agreement.AgreementMetric(), (system, baseline, refs)),
            (printed[4], BLEU(), [[sc.detokenize(s) for s in t] for t in (system, baseline, refs)])]:
        hyp, base, ref = texts
        _, results = PairedTest([("baseline", base), ("system", hyp)], {"m": metric}, [ref],
                                test_type="bs", n_samples=1000)()
        base_result, result = next(v for k, v in results.items() if k != "System")
        delta = result.score - base_result.score
        assert delta != 0
        assert line.split(": ")[1].startswith(f"{delta:+.2f} [")
        assert line.endswith(f"p = {result.p_value:.3f}")
