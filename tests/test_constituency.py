"""Bracketed constituency parses (fairseq_syntax.syntax.constituency) and
``fairseq-syntax-preprocess --ptb-suffix``: parsing, errors with file:line, the word-level
binarisation (unary chains collapsed, n-ary constituents right-factored) against hand-worked
trees and a recursive reference, and the tree side-file the console script writes."""
import json
import os
import random
import subprocess

import numpy as np
import pytest

from fairseq_syntax.syntax.constituency import (
    Constituent,
    binarize_constituents,
    check_leaves,
    parse_bracketed,
    read_bracketed_trees,
    word_trees_of_file,
)
from fairseq_syntax.syntax.dependency import (
    binarize_head_outward,
    check_binary_tree,
    hang_pieces_below_words,
)
from fairseq_syntax.syntax.errors import SyntaxInputError

# the big dog saw a cat that slept .   (leaves 0..8)
# unary chains: ROOT -> S, WHNP -> WDT, S -> VP -> VBD, every preterminal;
# ternary: NP (the big dog), S (NP VP .)
EXAMPLE = ("(ROOT (S (NP (DT the) (JJ big) (NN dog)) (VP (VBD saw) (NP (NP (DT a) (NN cat)) "
           "(SBAR (WHNP (WDT that)) (S (VP (VBD slept)))))) (. .)))")
EXAMPLE_WORDS = "the big dog saw a cat that slept .".split()
# worked by hand, post-order: NP (the big dog) right-factored: (big dog) = 9, (the 9) = 10;
# (a cat) = 11; SBAR: WHNP -> that = 6, S -> VP -> slept = 7, (6 7) = 12; NP = (11 12) = 13;
# VP = (saw 13) = 14; S (10, 14, .) right-factored: (14 8) = 15, (10 15) = 16; ROOT -> S.
EXAMPLE_TREE = [[1, 2], [0, 9], [4, 5], [6, 7], [11, 12], [3, 13], [14, 8], [10, 15]]
EXAMPLE_HEADS = [2, 2, 3, -1, 5, 3, 7, 5, 3]  # its dependency tree (UD style)


def spans(rows, n):
    """Leaf span (first, last) of every internal node of a binary tree."""
    cover = [(i, i) for i in range(n)]
    for left, right in np.asarray(rows).tolist():
        cover.append((cover[left][0], cover[right][1]))
    return cover[n:]


def test_hand_worked_unary_chains_and_ternary_nodes():
    tree = parse_bracketed(EXAMPLE)
    assert tree.leaves == EXAMPLE_WORDS
    rows = binarize_constituents(tree)
    assert rows.dtype == np.int64 and rows.tolist() == EXAMPLE_TREE
    check_binary_tree(rows, 9)
    assert spans(rows, 9) == [(1, 2), (0, 2), (4, 5), (6, 7), (4, 7), (3, 7), (3, 8), (0, 8)]
    # the docstring's example
    small = parse_bracketed("(S (NP (DT the) (JJ big) (NN dog)) (VP (VBD barked)) (. .))")
    assert binarize_constituents(small).tolist() == [[1, 2], [0, 5], [3, 4], [6, 7]]
    # head-outward binarisation of the same sentence's dependency tree differs: (cat (that
    # slept)) instead of ((a cat) (that slept))
    assert binarize_head_outward(EXAMPLE_HEADS).tolist() != EXAMPLE_TREE


def test_one_word_and_outer_bracket_without_label():
    assert binarize_constituents(parse_bracketed("(ROOT (S (INTJ (UH hello))))")).shape == (0, 2)
    tree = parse_bracketed("( (S (NP (NNS dogs)) (VP (VBP bark))) )")
    assert tree.root.label == "" and tree.leaves == ["dogs", "bark"]
    assert binarize_constituents(tree).tolist() == [[0, 1]]


def test_empty_elements_dropped_and_escapes():
    tree = parse_bracketed("( (S (NP-SBJ (-NONE- *T*-1)) (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) "
                           "(VP (VBD left) (NP (-NONE- *))) (. .)))")
    assert tree.leaves == ["-LRB-", "x", "-RRB-", "left", "."]
    # NP (( x )) right-factored: (x )) = 5, (( 5) = 6; S (NP, left, .): (left .) = 7, (6 7) = 8
    assert binarize_constituents(tree).tolist() == [[1, 2], [0, 5], [3, 4], [6, 7]]
    check_leaves(tree, ["(", "x", ")", "left", "."])
    check_leaves(tree, ["-LRB-", "x", "-RRB-", "left", "."])


def _random_constituent(rng, n_leaves):
    """A random n-ary tree with unary chains over leaves 0..n-1 (as Constituents)."""
    items = list(range(n_leaves))
    while len(items) > 1 or rng.random() < 0.3:
        k = min(len(items), rng.choice([1, 1, 2, 2, 3, 4]))
        start = rng.randrange(len(items) - k + 1)
        items[start:start + k] = [Constituent(rng.choice("ABC"), items[start:start + k])]
    return items[0] if isinstance(items[0], Constituent) else Constituent("X", items)


def _reference(node):
    """Nested tuples by the definition, recursively: a leaf is its index, a unary
    constituent is its child, children c1..ck are (c1, (c2, (... (c_{k-1}, ck))))."""
    if isinstance(node, int):
        return node
    parts = [_reference(c) for c in node.children]
    out = parts[-1]
    for part in reversed(parts[:-1]):
        out = (part, out)
    return out


def _nested(rows, n):
    made = list(range(n))
    for left, right in np.asarray(rows).tolist():
        made.append((made[left], made[right]))
    return made[-1]


def test_random_trees_against_recursive_reference():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 25)
        root = _random_constituent(rng, n)
        rows = binarize_constituents(root, n_leaves=n)
        check_binary_tree(rows, n)  # children before parents, root last, each node once
        assert _nested(rows, n) == _reference(root)


BAD_BRACKETS = [
    ("(S (NP the dog) (VP barked)", "unbalanced brackets: 1 '(' not closed at the end of the "
                                    "line (opened at column 1)"),
    ("(S (NP the dog) (VP barked)))", "unbalanced brackets: the ')' at column 29 closes nothing"),
    (") (S a)", "unbalanced brackets: the ')' at column 1 closes nothing"),
    ("(S (NP) (VP barked))", "empty constituent (NP) at column 4"),
    ("(S () (VP barked))", "empty constituent () at column 4"),
    ("(S (-NONE- *T*))", "the tree has no words"),
    ("the dog barked", "a bracketed tree starts with '(', found 'the' at column 1"),
    ("(S a) (S b)", "text after the tree's closing bracket: '(' at column 7"),
]


@pytest.mark.parametrize("line,message", BAD_BRACKETS)
def test_bad_brackets_name_file_line_and_column(tmp_path, line, message):
    path = tmp_path / "train.en.ptb"
    path.write_text("(S (NN ok))\n" + line + "\n", encoding="utf-8")
    with pytest.raises(SyntaxInputError) as err:
        read_bracketed_trees(str(path))
    assert str(err.value).startswith(f"{path}:2: {message}")


def test_leaf_mismatch_and_counts_name_file_line_and_word(tmp_path):
    ptb = tmp_path / "s.en.ptb"
    ptb.write_text("(S (NN a))\n(S (NP (DT the) (NNS dogs)) (VP (VBD barked)))\n",
                   encoding="utf-8")
    with pytest.raises(SyntaxInputError) as err:
        word_trees_of_file(str(ptb), [["a"], ["the", "dog", "barked"]], "s.en")
    assert str(err.value) == (
        f"{ptb}:2: the tree does not match s.en:2: word 2 is 'dogs' in the tree but 'dog' in "
        "the text (the tree has 3 leaves, the text 3 tokens; the leaves must equal the line's "
        "whitespace-separated tokens, with -LRB-/-RRB- for brackets)")
    with pytest.raises(SyntaxInputError) as err:
        word_trees_of_file(str(ptb), [["a"], ["the", "dogs"]], "s.en")
    assert "word 3 is 'barked' in the tree but (nothing) in the text" in str(err.value)
    with pytest.raises(SyntaxInputError) as err:
        word_trees_of_file(str(ptb), [["a"]], "s.en")
    assert str(err.value).startswith(f"{ptb}:2: 2 bracketed trees but s.en has 1 lines")
    with pytest.raises(SyntaxInputError) as err:
        word_trees_of_file(str(ptb), [["a"], ["the", "dogs", "barked"], ["x"]], "s.en")
    assert str(err.value).startswith(
        f"{ptb}: 2 bracketed trees but s.en has 3 lines: line 3 of s.en has no tree")
    trees = word_trees_of_file(str(ptb), [["a"], ["the", "dogs", "barked"]], "s.en")
    assert [t.tolist() for t in trees] == [[], [[0, 1], [3, 2]]]


# ----------------------------------------------------------------------- preprocessing

# (source words, heads, PTB tree, its hand-worked word-level binarisation, target)
CORPUS = {
    "train": [
        (EXAMPLE_WORDS, EXAMPLE_HEADS, EXAMPLE, EXAMPLE_TREE, "der große hund sah eine katze"),
        # NP (( (the dog) )): (the dog) = 6, (6 )) = 7, (( 7) = 8; S: (barked .) = 9, (8 9) = 10
        ("( the dog ) barked .".split(), [2, 2, 4, 2, -1, 4],
         "(ROOT (S (NP (-LRB- -LRB-) (NP (DT the) (NN dog)) (-RRB- -RRB-)) (VP (VBD barked)) "
         "(. .)))", [[1, 2], [6, 3], [0, 7], [4, 5], [8, 9]], "( der hund ) bellte ."),
        ("birds sang .".split(), [1, -1, 1], "(S (NP (NNS birds)) (VP (VBD sang)) (. .))",
         [[1, 2], [0, 3]], "vögel sangen ."),
    ],
    "valid": [
        ("a cat slept .".split(), [1, 2, -1, 2],
         "(ROOT (S (NP (DT a) (NN cat)) (VP (VBD slept)) (. .)))", [[0, 1], [2, 3], [4, 5]],
         "eine katze schlief ."),
    ],
}


def write_tiny_corpus(folder):
    for split, rows in CORPUS.items():
        base = os.path.join(folder, split)
        with open(f"{base}.en", "w", encoding="utf-8") as f:
            f.writelines(" ".join(r[0]) + "\n" for r in rows)
        with open(f"{base}.de", "w", encoding="utf-8") as f:
            f.writelines(r[4] + "\n" for r in rows)
        with open(f"{base}.en.ptb", "w", encoding="utf-8") as f:
            f.writelines(r[2] + "\n" for r in rows)
        with open(f"{base}.en.conllu", "w", encoding="utf-8") as f:
            for k, (words, heads, *_rest) in enumerate(rows):
                f.write(f"# sent_id = {k + 1}\n")
                f.writelines(f"{i + 1}\t{w}\t{w}\t_\t_\t_\t{h + 1}\tdep\t_\t_\n"
                             for i, (w, h) in enumerate(zip(words, heads)))
                f.write("\n")


def prep_args(folder, dest, *extra):
    return ["-s", "en", "-t", "de", "--trainpref", os.path.join(folder, "train"),
            "--validpref", os.path.join(folder, "valid"), "--destdir", str(dest), *extra]


def side(dest, split, kind):
    from fairseq_syntax.data.side_files import read_side_file, side_file_prefix

    ds = read_side_file(side_file_prefix(str(dest), split, "en", "de", kind))
    return [np.asarray(ds[k]).tolist() for k in range(len(ds))]


def source_counts(dest, split):
    """Pieces per source word, from the data-bin's token binary and dictionary."""
    from fairseq.data import Dictionary
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    vocab = Dictionary.load(os.path.join(str(dest), "dict.en.txt"))
    tokens = MMapIndexedDataset(os.path.join(str(dest), f"{split}.en-de.en"))
    out = []
    for k in range(len(tokens)):
        pieces = [vocab[int(t)] for t in tokens[k][:-1]]  # without eos
        counts = []
        for p in pieces:
            if p.startswith("\u2581") or not counts:
                counts.append(0)
            counts[-1] += 1
        out.append(counts)
    return out


def run_script(args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run(["fairseq-syntax-preprocess", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)


def run_in_process(args):
    from fairseq_syntax_preprocess.cli import main

    try:
        return main([str(a) for a in args])
    except SystemExit as err:
        return err.code


def test_console_script_writes_the_constituency_tree_side_file(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_tiny_corpus(str(raw))
    words_dest, pieces_dest = tmp_path / "bin-word", tmp_path / "bin-unigram"
    # a word-level sentencepiece model: one piece per word, so the side-file is the
    # hand-worked word tree itself
    proc = run_script(prep_args(raw, words_dest, "--ptb-suffix", "ptb", "--spm-model-type",
                                "word", "--vocab-size", "40"))
    assert proc.returncode == 0, proc.stderr
    for split, rows in CORPUS.items():
        assert source_counts(words_dest, split) == [[1] * len(r[0]) for r in rows]
        assert side(words_dest, split, "tree") == [
            np.asarray(r[3], dtype=np.int64).reshape(-1).tolist() for r in rows]
    manifest = json.load(open(words_dest / "syntax_manifest.json", encoding="utf-8"))
    assert manifest["tree_source"] == "constituency"
    assert manifest["constituency"]["files"] == [str(raw / "train.en.ptb"),
                                                 str(raw / "valid.en.ptb")]
    assert "right-factored" in manifest["binarisation"]
    assert "hang below it" in manifest["binarisation"]

    # subword pieces: each word's pieces hang below the constituency word tree
    proc = run_script(prep_args(raw, pieces_dest, "--ptb-suffix", "ptb", "--vocab-size", "60"))
    assert proc.returncode == 0, proc.stderr
    for split, rows in CORPUS.items():
        counts = source_counts(pieces_dest, split)
        assert any(c > 1 for sentence in counts for c in sentence)
        assert side(pieces_dest, split, "tree") == [
            hang_pieces_below_words(np.asarray(r[3]).reshape(-1, 2), c).reshape(-1).tolist()
            for r, c in zip(rows, counts)]

    # without --ptb-suffix: the head-outward tree of the same dependency parse; the heads
    # (and words) side-files do not depend on the constituency trees
    plain = tmp_path / "bin-plain"
    assert run_in_process(prep_args(raw, plain, "--spm-model-type", "word",
                                    "--vocab-size", "40")) == 0
    head_outward = binarize_head_outward(EXAMPLE_HEADS).reshape(-1).tolist()
    assert side(plain, "train", "tree")[0] == head_outward
    assert side(plain, "train", "tree")[0] != side(words_dest, "train", "tree")[0]
    for kind in ("heads", "words"):
        assert side(plain, "train", kind) == side(words_dest, "train", kind)
    assert json.load(open(plain / "syntax_manifest.json"))["tree_source"] == "dependency"


def _edit(path, line, text):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    lines[line - 1] = text
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


PREPROCESS_ERRORS = [
    ("train.en.ptb", 2, "(ROOT (S (NP (-LRB- -LRB-) (NP (DT the) (NN dog)) (-RRB- -RRB-)) "
     "(VP (VBD barked)) (. .))", "{raw}/train.en.ptb:2: unbalanced brackets: 1 '(' not closed "
     "at the end of the line (opened at column 1)"),
    ("train.en.ptb", 3, "(S (NP) (NP (NNS birds)) (VP (VBD sang)) (. .))",
     "{raw}/train.en.ptb:3: empty constituent (NP) at column 4"),
    ("train.en.ptb", 3, "(S (NP (NNS birds)) (VP (VBD sing)) (. .))",
     "{raw}/train.en.ptb:3: the tree does not match {raw}/train.en:3: word 2 is 'sing' in the "
     "tree but 'sang' in the text"),
    ("valid.en.ptb", 1, "(S (-NONE- *))", "{raw}/valid.en.ptb:1: the tree has no words"),
    ("valid.en.ptb", None, None, "{raw}/valid.en.ptb: bracketed source parse (--ptb-suffix) "
     "file not found (split valid)"),
]


@pytest.mark.parametrize("name,line,text,message", PREPROCESS_ERRORS)
def test_preprocess_errors_name_file_and_line_and_write_nothing(tmp_path, capsys, name, line,
                                                                text, message):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_tiny_corpus(str(raw))
    if line is None:
        os.remove(raw / name)
    else:
        _edit(raw / name, line, text)
    dest = tmp_path / "out" / "data-bin"
    assert run_in_process(prep_args(raw, dest, "--ptb-suffix", "ptb", "--vocab-size", "60")) == 1
    err = capsys.readouterr().err
    assert err.startswith("fairseq-syntax-preprocess: error: " + message.format(raw=raw)), err
    assert not (tmp_path / "out").exists()  # nothing half-written, not even the parent


def test_raw_input_warns_when_the_trees_were_constituency_trees(tmp_path, caplog):
    """fairseq-interactive has no bracketed parse of raw input: it says so once."""
    import logging

    import torch

    from fairseq_syntax.data.raw_input import RawInputAdapter, RawSource
    from fairseq_syntax.data.side_files import FORMAT_VERSION, MANIFEST
    from fairseq_syntax.syntax.conllu_io import ParsedSentence

    class Parser:
        def parse(self, sentences, **kwargs):
            return [ParsedSentence(list(words), [1, -1, 1]) for words in sentences]

    def source():
        return RawSource(["birds", "sang", "."], ["▁birds", "▁sang", "▁."], [1, 1, 1],
                         torch.tensor([4, 5, 6, 2]))

    warned = {}
    for tree_source in ("dependency", "constituency"):
        folder = tmp_path / tree_source
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps(
            {"format_version": FORMAT_VERSION, "tree_source": tree_source}))
        processor = RawInputAdapter(str(folder))
        processor._parser = Parser()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fairseq_syntax.data.raw_input"):
            for _ in range(2):
                sources = [source()]
                processor.parse(sources)
                assert sources[0].tree.tolist() == [[1, 2], [0, 3]]  # head-outward
        warned[tree_source] = [r.getMessage() for r in caplog.records
                               if "constituency" in r.getMessage()]
    assert warned["dependency"] == []
    assert len(warned["constituency"]) == 1
    assert "head-outward binarisation of the dependency parse" in warned["constituency"][0]
