"""fairseq-syntax-preprocess end to end, through the installed console script.

All command runs of this module are started at once (a thread pool over subprocesses)
when the first test needs them, so the module's wall time is that of the slowest few.
"""
import hashlib
import json
import os
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fairseq_syntax.syntax.dependency import (
    binarize_head_outward,
    hang_pieces_below_words,
    project_heads_to_subwords,
)
from fairseq_syntax.syntax.pharaoh import project_alignment_to_subwords

SCRIPT = "fairseq-syntax-preprocess"
SRC, TGT = "de", "en"

# ----------------------------------------------------------------------------- corpus

DET = {"the": "le", "a": "un", "this": "ce"}
ADJ = {"big": "grand", "small": "petit", "extraordinary": "extraordinaire", "green": "vert"}
NOUN = {"dog": "chien", "cat": "chat", "elephant": "elephant", "bird": "oiseau",
        "unbelievability": "incroyabilite"}
VERB = {"sees": "voit", "chases": "chasse", "likes": "aime", "photographs": "photographie"}
ADV = {"quickly": "vite", "rarely": "rarement"}


def make_pair(rng):
    """A source sentence with its tree, a French-like target (adjectives after the noun)
    and the word alignment."""
    src, heads, rels, tgt, links = [], [], [], [], []

    def noun_phrase(head_of_np):
        det, noun = rng.choice(sorted(DET)), rng.choice(sorted(NOUN))
        adj = rng.choice(sorted(ADJ)) if rng.random() < 0.5 else None
        start = len(src)
        n_idx = start + (2 if adj else 1)
        src.append(det)
        heads.append(n_idx)
        rels.append("det")
        tgt_det = len(tgt)
        tgt.append(DET[det])
        links.append((start, tgt_det))
        if adj:
            src.append(adj)
            heads.append(n_idx)
            rels.append("amod")
        src.append(noun)
        heads.append(head_of_np)
        rels.append("nsubj" if head_of_np is None else "obj")
        links.append((n_idx, len(tgt)))
        tgt.append(NOUN[noun])
        if adj:
            links.append((start + 1, len(tgt)))
            tgt.append(ADJ[adj])
        return n_idx

    # subject NP, verb, object NP, optional adverb; the verb's index is known after the NP
    subj_start = len(src)
    subj = noun_phrase(None)
    verb = len(src)
    heads[subj] = verb
    src.append(rng.choice(sorted(VERB)))
    heads.append(-1)
    rels.append("root")
    links.append((verb, len(tgt)))
    tgt.append(VERB[src[verb]])
    noun_phrase(verb)
    if rng.random() < 0.4:
        src.append(rng.choice(sorted(ADV)))
        heads.append(verb)
        rels.append("advmod")
        links.append((len(src) - 1, len(tgt)))
        tgt.append(ADV[src[-1]])
    assert subj_start == 0
    return src, heads, rels, tgt, sorted(links)


def conllu_block(sent_id, words, heads, rels):
    lines = [f"# sent_id = {sent_id}", "# text = " + " ".join(words)]
    for i, (w, h, r) in enumerate(zip(words, heads, rels)):
        lines.append(f"{i + 1}\t{w}\t{w}\t_\t_\t_\t{h + 1}\t{r}\t_\t_")
    return "\n".join(lines) + "\n\n"


def write_corpus(folder, prefix, n, seed, align=True):
    """Write ``{prefix}.de``, ``.en``, ``.de.conllu`` and (optionally) ``.align``."""
    rng = random.Random(seed)
    pairs = [make_pair(rng) for _ in range(n)]
    base = os.path.join(folder, prefix)
    with open(f"{base}.{SRC}", "w", encoding="utf-8") as f:
        f.writelines(" ".join(p[0]) + "\n" for p in pairs)
    with open(f"{base}.{TGT}", "w", encoding="utf-8") as f:
        f.writelines(" ".join(p[3]) + "\n" for p in pairs)
    with open(f"{base}.{SRC}.conllu", "w", encoding="utf-8") as f:
        f.writelines(conllu_block(k + 1, p[0], p[1], p[2]) for k, p in enumerate(pairs))
    if align:
        with open(f"{base}.align", "w", encoding="utf-8") as f:
            f.writelines(" ".join(f"{i}-{j}" for i, j in p[4]) + "\n" for p in pairs)
    return pairs


def sentence_lines(path):
    """Start line of every sentence of a CoNLL-U file written by :func:`write_corpus`."""
    starts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.startswith("# sent_id"):
                starts.append(number)
    return starts


# ----------------------------------------------------------------------------- running


def run_script(args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


def base_args(folder, dest, align=True, valid=False, test=False):
    args = ["-s", SRC, "-t", TGT, "--trainpref", os.path.join(folder, "train"),
            "--destdir", dest]
    if valid:
        args += ["--validpref", os.path.join(folder, "valid")]
    if test:
        args += ["--testpref", os.path.join(folder, "test")]
    if align:
        args += ["--align-suffix", "align"]
    return args


def _edit_lines(path, k, fn):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines = fn(lines, k)
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))


def _edit_conllu_sentence(path, k, fn):
    """Apply ``fn(rows)`` to the token rows (lists of columns) of sentence k."""
    with open(path, encoding="utf-8") as f:
        blocks = f.read().split("\n\n")
    lines = blocks[k].split("\n")
    comments = [l for l in lines if l.startswith("#")]
    rows = [l.split("\t") for l in lines if not l.startswith("#")]
    fn(rows)
    blocks[k] = "\n".join(comments + ["\t".join(r) for r in rows])
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(blocks))


def _set_head(rows, word_id, head):
    rows[word_id - 1][6] = str(head)


N_BAD = 12  # sentences in each bad-input corpus
K = 4  # the (0-based) sentence the bad cases break


def _bad_cases():
    """name -> (how to break the corpus, (file suffix, line getter), message pattern)."""
    s_en = f"train.{TGT}"
    s_de = f"train.{SRC}"
    s_pa = f"train.{SRC}.conllu"

    def parse_line(folder):
        return sentence_lines(os.path.join(folder, s_pa))[K]

    def root_of(pair):
        return pair[1].index(-1) + 1

    return {
        "source_vs_target_count": (
            lambda folder, pairs: _edit_lines(os.path.join(folder, s_en), None,
                                              lambda l, k: l[:-2] + [b""]),
            (s_de, lambda folder: N_BAD), [s_en, f"has {N_BAD} lines but", f"has {N_BAD - 1} lines"],
        ),
        "parse_vs_text_count": (
            lambda folder, pairs: _edit_lines(
                os.path.join(folder, s_pa), None,
                lambda l, k: l + [b"# sent_id = extra", b"1\tthe\t_\t_\t_\t_\t0\troot\t_\t_", b"", b""]),
            (s_pa, lambda folder: sentence_lines(os.path.join(folder, s_pa))[-1]),
            [s_de, f"has {N_BAD + 1} sentences", f"sentence {N_BAD + 1}"],
        ),
        "alignment_vs_text_count": (
            lambda folder, pairs: _edit_lines(os.path.join(folder, "train.align"), None,
                                              lambda l, k: l[:-1] + [b"0-0", b""]),
            ("train.align", lambda folder: N_BAD + 1), [s_de, f"has {N_BAD + 1} lines"],
        ),
        "words_mismatch": (
            lambda folder, pairs: _edit_conllu_sentence(
                os.path.join(folder, s_pa), K, lambda rows: rows[1].__setitem__(1, "Hund")),
            (s_pa, parse_line), [f"{s_de}:{K + 1}", "word 2 is 'Hund' in the parse"],
        ),
        "cycle": (
            # the object noun now heads its determiner and the determiner heads the noun
            lambda folder, pairs: _edit_conllu_sentence(
                os.path.join(folder, s_pa), K,
                lambda rows: _set_head(rows, pairs[K][2].index("obj") + 1,
                                       root_of(pairs[K]) + 1)),
            (s_pa, parse_line), ["cycle: words"],
        ),
        "no_root": (
            lambda folder, pairs: _edit_conllu_sentence(
                os.path.join(folder, s_pa), K,
                lambda rows: _set_head(rows, root_of(pairs[K]), 1)),
            (s_pa, parse_line), ["no root"],
        ),
        "several_roots": (
            lambda folder, pairs: _edit_conllu_sentence(
                os.path.join(folder, s_pa), K, lambda rows: _set_head(rows, 1, 0)),
            (s_pa, parse_line), ["several roots: words 1 ("],
        ),
        "head_out_of_range": (
            lambda folder, pairs: _edit_conllu_sentence(
                os.path.join(folder, s_pa), K, lambda rows: _set_head(rows, 1, 42)),
            (s_pa, parse_line), ["has head 42, out of range"],
        ),
        "alignment_out_of_range": (
            lambda folder, pairs: _edit_lines(
                os.path.join(folder, "train.align"), K,
                lambda l, k: l[:k] + [l[k] + b" 0-37"] + l[k + 1:]),
            ("train.align", lambda folder: K + 1), ["'0-37': target index 37 is out of range"],
        ),
        "empty_line": (
            lambda folder, pairs: _edit_lines(os.path.join(folder, s_de), K,
                                              lambda l, k: l[:k] + [b""] + l[k + 1:]),
            (s_de, lambda folder: K + 1), ["empty line"],
        ),
        "non_utf8": (
            lambda folder, pairs: _edit_lines(os.path.join(folder, s_en), K,
                                              lambda l, k: l[:k] + [l[k] + b" caf\xe9"] + l[k + 1:]),
            (s_en, lambda folder: K + 1), ["not valid UTF-8: byte 0xe9"],
        ),
        # a zero-width space, which sentencepiece's normalisation removes: the pair would
        # train on an empty target (its one link points at the space)
        "target_of_no_pieces": (
            lambda folder, pairs: (
                _edit_lines(os.path.join(folder, s_en), K,
                            lambda l, k: l[:k] + ["\u200b".encode()] + l[k + 1:]),
                _edit_lines(os.path.join(folder, "train.align"), K,
                            lambda l, k: l[:k] + [b"0-0"] + l[k + 1:])),
            (s_en, lambda folder: K + 1), ["the target encodes to no sentencepiece pieces"],
        ),
        # conllu would read 3 columns, so the check must refuse it before any reading
        "global_columns": (
            lambda folder, pairs: _edit_lines(os.path.join(folder, s_pa), None,
                                              lambda l, k: [b"# global.columns = ID FORM HEAD"] + l),
            (s_pa, lambda folder: 1), ["# global.columns names other columns than CoNLL-U's ten"],
        ),
        # sentence K's tree left out: blamed where the text and the trees part, not at the end
        "tree_missing": (
            lambda folder, pairs: _drop_conllu_sentence(os.path.join(folder, s_pa), K),
            (s_pa, parse_line), [f"{s_de}:{K + 1}"],
        ),
    }


def _drop_conllu_sentence(path, k):
    with open(path, encoding="utf-8") as f:
        blocks = f.read().split("\n\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(blocks[:k] + blocks[k + 1:]))


BAD_CASES = _bad_cases()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Prepare every corpus of this module and start every command run at once."""
    root = tmp_path_factory.mktemp("preprocess")
    jobs = {}
    info = {}

    # the good corpus: train and valid with alignments, test without
    good = root / "good"
    good.mkdir()
    pairs = write_corpus(str(good), "train", 48, seed=1)
    valid_pairs = write_corpus(str(good), "valid", 8, seed=2)
    write_corpus(str(good), "test", 6, seed=3, align=False)
    info["good"] = {"folder": str(good), "pairs": pairs, "valid_pairs": valid_pairs}
    jobs["good"] = base_args(str(good), str(root / "good-bin"), valid=True, test=True) + [
        "--vocab-size", "100", "--workers", "2"]

    for name, (breaker, (suffix, line_of), patterns) in BAD_CASES.items():
        folder = root / f"bad-{name}"
        folder.mkdir()
        bad_pairs = write_corpus(str(folder), "train", N_BAD, seed=7)
        breaker(str(folder), bad_pairs)
        info[name] = {
            "folder": str(folder),
            "dest": str(folder / "out" / "data-bin"),
            "where": f"{folder / suffix}:{line_of(str(folder))}: ",
            "patterns": patterns,
        }
        jobs[name] = base_args(str(folder), info[name]["dest"])

    # the slow run first
    order = ["good"] + [n for n in jobs if n != "good"]
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        futures = {name: pool.submit(run_script, jobs[name]) for name in order}
        results = {name: f.result() for name, f in futures.items()}
    return {"root": root, "info": info, "results": results}


def assert_ok(proc):
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


# ----------------------------------------------------------------------------- good run


@pytest.fixture(scope="module")
def good(runs):
    assert_ok(runs["results"]["good"])
    return runs["root"] / "good-bin", runs["info"]["good"]


def test_fairseq_files_exist_and_load(good):
    from fairseq.data import Dictionary, data_utils

    dest, _ = good
    for lang in (SRC, TGT):
        assert (dest / f"dict.{lang}.txt").is_file()
    for split in ("train", "valid", "test"):
        for lang in (SRC, TGT):
            d = Dictionary.load(str(dest / f"dict.{lang}.txt"))
            ds = data_utils.load_indexed_dataset(str(dest / f"{split}.{SRC}-{TGT}.{lang}"), d)
            assert ds is not None and len(ds) > 0
            assert all(int(ds[i][-1]) == d.eos() for i in range(len(ds)))
    assert (dest / "spm.model").is_file()
    assert not (dest / f"test.align.{SRC}-{TGT}.bin").exists()
    # nothing left next to the data-bin
    assert sorted(p.name for p in dest.parent.iterdir() if p.name.startswith(".")) == []


def test_plain_fairseq_reads_the_databin(good):
    """fairseq's own translation loader, alignments included, without the plugin."""
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import load_langpair_dataset

    dest, info = good
    src_dict = Dictionary.load(str(dest / f"dict.{SRC}.txt"))
    tgt_dict = Dictionary.load(str(dest / f"dict.{TGT}.txt"))
    for split, n, aligned in (("train", 48, True), ("valid", 8, True), ("test", 6, False)):
        ds = load_langpair_dataset(
            str(dest), split, SRC, src_dict, TGT, tgt_dict, combine=False,
            dataset_impl="mmap", upsample_primary=1, left_pad_source=False,
            left_pad_target=False, max_source_positions=1024, max_target_positions=1024,
            load_alignments=aligned,
        )
        assert len(ds) == n
        if aligned:
            batch = ds.collater([ds[i] for i in range(4)])
            assert batch["alignments"].numel() > 0


def _sizes(prefix):
    """Token counts (with eos) of an indexed dataset, copied out of its mmap."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dataset = MMapIndexedDataset(str(prefix))
    return np.array(dataset.sizes)


def _side(dest, split, kind):
    from fairseq_syntax.data.side_files import read_side_file, side_file_prefix

    ds = read_side_file(side_file_prefix(str(dest), split, SRC, TGT, kind))
    assert ds is not None, f"{split} {kind} side-file missing"
    return ds


def test_side_files_match_token_binaries(good):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dest, _ = good
    for split, n in (("train", 48), ("valid", 8), ("test", 6)):
        tokens = MMapIndexedDataset(str(dest / f"{split}.{SRC}-{TGT}.{SRC}"))
        heads, tree = _side(dest, split, "heads"), _side(dest, split, "tree")
        words = _side(dest, split, "words")
        assert len(tokens) == len(heads) == len(words) == len(tree) == n
        for k in range(n):
            length = int(tokens.sizes[k]) - 1  # without eos
            assert int(heads.sizes[k]) == length + 1
            assert int(words.sizes[k]) == length + 1
            assert np.asarray(words[k])[-1] == -1  # eos is not a word
            assert int(tree.sizes[k]) == 2 * (length - 1)
            row = np.asarray(heads[k])
            assert row[-1] == row.tolist().index(-1)  # eos attaches to the root piece


def test_round_trip_one_sentence(good):
    import sentencepiece as spm
    from fairseq.data import Dictionary
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dest, info = good
    sp = spm.SentencePieceProcessor(model_file=str(dest / "spm.model"))
    src_dict = Dictionary.load(str(dest / f"dict.{SRC}.txt"))
    tgt_dict = Dictionary.load(str(dest / f"dict.{TGT}.txt"))
    tokens = MMapIndexedDataset(str(dest / f"train.{SRC}-{TGT}.{SRC}"))
    tgt_tokens = MMapIndexedDataset(str(dest / f"train.{SRC}-{TGT}.{TGT}"))
    heads, tree = _side(dest, "train", "heads"), _side(dest, "train", "tree")
    words_file = _side(dest, "train", "words")
    align = MMapIndexedDataset(str(dest / f"train.align.{SRC}-{TGT}"))
    checked_split = 0
    for k in (0, 5, 17):
        words, gold_heads, _, tgt_words, links = info["pairs"][k]
        pieces = sp.encode(words, out_type=str)
        counts = [len(p) for p in pieces]
        decoded = [src_dict[int(i)] for i in tokens[k][:-1]]
        assert decoded == [p for ps in pieces for p in ps]
        expected_heads = project_heads_to_subwords(gold_heads, counts)
        assert np.asarray(heads[k]).tolist() == expected_heads
        # the word tree binarised head-outward, each word's pieces hung below it
        assert np.asarray(tree[k]).tolist() == hang_pieces_below_words(
            binarize_head_outward(gold_heads), counts).reshape(-1).tolist()
        assert np.asarray(words_file[k]).tolist() == [
            w for w, c in enumerate(counts) for _ in range(c)] + [-1]
        tgt_pieces = sp.encode(tgt_words, out_type=str)
        assert [tgt_dict[int(i)] for i in tgt_tokens[k][:-1]] == [p for ps in tgt_pieces
                                                                 for p in ps]
        expected_links = project_alignment_to_subwords(links, counts,
                                                       [len(p) for p in tgt_pieces])
        assert np.asarray(align[k]).reshape(-1, 2).tolist() == [list(l) for l in expected_links]
        checked_split += any(c > 1 for c in counts)
    assert checked_split, "the round trip should cover a word split into several pieces"


def test_manifest(good):
    dest, info = good
    with open(dest / "syntax_manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["format_version"] == 2
    assert manifest["command"]["argv"][0] == "fairseq-syntax-preprocess"
    assert manifest["side_files"]["words"] == "{split}.{src}-{tgt}.{src}.words"
    assert (manifest["source_lang"], manifest["target_lang"]) == (SRC, TGT)
    assert manifest["parse"]["kind"] == "conllu"
    assert [os.path.basename(p) for p in manifest["parse"]["files"]] == [
        f"{s}.{SRC}.conllu" for s in ("train", "valid", "test")]
    assert manifest["spm_model"] == "spm.model"
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(dest / "spm.model"))
    assert manifest["spm_vocab_size"] == sp.get_piece_size()
    assert "first piece" in manifest["projection"] and "eos" in manifest["projection"]
    assert "closest first" in manifest["binarisation"]
    assert "right-branching" in manifest["binarisation"]
    for split, n, aligned in (("train", 48, True), ("valid", 8, True), ("test", 6, False)):
        entry = manifest["splits"][split]
        assert entry["sentences"] == n
        assert entry["aligned"] is aligned
        for lang, key in ((SRC, "source_tokens"), (TGT, "target_tokens")):
            sizes = _sizes(dest / f"{split}.{SRC}-{TGT}.{lang}")
            assert entry[key] == int(sizes.sum()) - n
    src_sizes = _sizes(dest / f"train.{SRC}-{TGT}.{SRC}") - 1
    tgt_sizes = _sizes(dest / f"train.{SRC}-{TGT}.{TGT}") - 1
    expected = {}
    for s, t in zip(src_sizes.tolist(), tgt_sizes.tolist()):
        expected.setdefault(str(s), {}).setdefault(str(t), 0)
        expected[str(s)][str(t)] += 1
    assert manifest["length_counts"] == expected


def run_in_process(args):
    """``main(argv)`` in this process (fast: fairseq is imported already)."""
    from fairseq_syntax_preprocess.cli import main

    try:
        return main([str(a) for a in args])
    except SystemExit as err:
        return err.code


def test_links_to_a_target_word_that_sentencepiece_removes_are_counted(tmp_path, caplog):
    """A target word of nothing but a zero-width space has no piece to link to: its links
    are left out of the data-bin, and the run says how many and where the first was."""
    import logging

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    pairs = write_corpus(str(corpus), "train", N_BAD, seed=7)
    n = len(pairs[K][3])  # the new word's index
    _edit_lines(str(corpus / f"train.{TGT}"), K,
                lambda l, k: l[:k] + [l[k] + " \u200b".encode()] + l[k + 1:])
    _edit_lines(str(corpus / "train.align"), K,
                lambda l, k: l[:k] + [l[k] + f" 0-{n} 1-{n}".encode()] + l[k + 1:])
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax_preprocess"):
        assert run_in_process(base_args(str(corpus), tmp_path / "bin")
                              + ["--vocab-size", "60"]) == 0
    assert [r.getMessage() for r in caplog.records if "alignment link" in r.getMessage()] == [
        f"{corpus / f'train.{TGT}'}: 2 alignment link(s) point at target words that "
        "sentencepiece's normalisation removes (no piece to link to) and were left out; the "
        f"first at line {K + 1}"]


def test_the_folders_of_a_killed_run_are_cleared_and_a_data_bin_it_moved_put_back(
        tmp_path, caplog):
    """A run killed with SIGKILL (or out of memory) leaves its staging, work and old folders
    beside --destdir; the next run removes them, and puts back a data-bin that the killed
    run had moved aside to replace it. A live run's folders, and folders whose name says no
    process, are left alone."""
    import logging
    from fairseq_syntax_preprocess.write import _host_tag, clear_killed_runs, run_folder_prefix

    dead = subprocess.Popen(["true"])
    dead.wait()
    here = _host_tag()
    assert run_folder_prefix(str(tmp_path / "data-bin"), "work") == (
        f".data-bin.work-{os.getpid()}.{here}-")
    for name, inside in ((f".data-bin.staging-{dead.pid}.{here}-a1", "spm.model"),
                         (f".data-bin.work-{dead.pid}.{here}-b2", "train.pieces"),
                         (f".data-bin.old-{dead.pid}.{here}-c3/old", "dict.en.txt"),
                         (f".data-bin.staging-{os.getpid()}.{here}-d4", "spm.model"),
                         (f".data-bin.staging-{dead.pid}.0000abcd-e5", "spm.model"),  # another
                         (".data-bin.staging-f6", "spm.model"),  # machine's; no PID
                         (f".other.staging-{dead.pid}.{here}-g7", "spm.model")):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / inside).write_text("x")
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax_preprocess"):
        clear_killed_runs(str(tmp_path / "data-bin"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        f".data-bin.staging-{os.getpid()}.{here}-d4", f".data-bin.staging-{dead.pid}.0000abcd-e5",
        ".data-bin.staging-f6", f".other.staging-{dead.pid}.{here}-g7", "data-bin"])
    assert (tmp_path / "data-bin" / "dict.en.txt").read_text() == "x"
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        f"put back {tmp_path / 'data-bin'}",
        f"removed {tmp_path / f'.data-bin.old-{dead.pid}.{here}-c3'}",
        f"removed {tmp_path / f'.data-bin.staging-{dead.pid}.{here}-a1'}",
        f"removed {tmp_path / f'.data-bin.work-{dead.pid}.{here}-b2'}"]


def test_one_language_on_both_sides_is_refused(tmp_path, capsys):
    """``-s en -t en`` would write both sides to one file per language."""
    args = ["-s", "en", "-t", "en", "--trainpref", tmp_path / "train", "--destdir", tmp_path / "b"]
    assert run_in_process(args) == 2
    assert "--source-lang and --target-lang are both 'en'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_force_replaces_with_given_spm_model(runs, tmp_path):
    import sentencepiece as spm

    info = runs["info"]["good"]
    pairs = info["pairs"]
    model_prefix = str(tmp_path / "given")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(p[0]) for p in pairs] + [" ".join(p[3]) for p in pairs]),
        model_prefix=model_prefix, vocab_size=80, hard_vocab_limit=False, minloglevel=2)
    dest = tmp_path / "data-bin"
    dest.mkdir()
    (dest / "old.txt").write_text("old", encoding="utf-8")
    args = base_args(info["folder"], dest, align=False) + [
        "--spm-model", model_prefix + ".model", "--force", "--force-non-data-bin"]
    assert run_in_process(args) == 0
    assert not (dest / "old.txt").exists()
    with open(dest / "syntax_manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["spm"]["trained"] is False
    assert (dest / "spm.model").read_bytes() == open(model_prefix + ".model", "rb").read()
    assert manifest["splits"]["train"]["aligned"] is False
    assert not (dest / f"train.align.{SRC}-{TGT}.bin").exists()
    assert (dest / f"train.{SRC}-{TGT}.{SRC}.heads.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data-bin", "given.model", "given.vocab"]


def test_nonempty_destdir_needs_force(runs, tmp_path, capsys):
    dest = tmp_path / "data-bin"
    dest.mkdir()
    (dest / "old.txt").write_text("old", encoding="utf-8")
    assert run_in_process(base_args(runs["info"]["good"]["folder"], dest)) == 1
    err = capsys.readouterr().err
    assert f"{SCRIPT}: error: {dest}: --destdir exists and is not empty; use --force" in err
    assert os.listdir(dest) == ["old.txt"]


def test_bad_input_with_force_keeps_old_destdir(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(str(folder), "train", N_BAD, seed=7)
    _edit_lines(str(folder / f"train.{SRC}"), K, lambda l, k: l[:k] + [b" "] + l[k + 1:])
    dest = tmp_path / "data-bin"
    dest.mkdir()
    (dest / "old.txt").write_text("old", encoding="utf-8")
    assert run_in_process(base_args(str(folder), dest) + ["--force", "--force-non-data-bin"]) == 1
    err = capsys.readouterr().err
    assert f"{SCRIPT}: error: {folder}/train.{SRC}:{K + 1}: empty line" in err
    assert os.listdir(dest) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "data-bin"]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input(runs, case):
    proc = runs["results"][case]
    info = runs["info"][case]
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [l for l in proc.stderr.splitlines() if l.startswith(f"{SCRIPT}: error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    assert errors[0].startswith(f"{SCRIPT}: error: {info['where']}"), (info["where"], proc.stderr)
    for pattern in info["patterns"]:
        assert pattern in errors[0], (pattern, errors[0])
    assert not os.path.exists(info["dest"])
    assert not os.path.exists(os.path.dirname(info["dest"]))  # the created parent is gone too
    leftovers = [p for p in os.listdir(info["folder"]) if p.startswith(".")]
    assert leftovers == []


# ----------------------------------------------------------------------------- binaries


def _fairseq_preprocess(tmp_path, splits, joined):
    """fairseq's own preprocessing of the same token lines (the reference)."""
    from fairseq import options
    from fairseq_cli import preprocess

    text = tmp_path / "text"
    text.mkdir()
    for name, src_lines, tgt_lines in splits:
        for lang, lines in ((SRC, src_lines), (TGT, tgt_lines)):
            (text / f"{name}.{lang}").write_text("".join(" ".join(l) + "\n" for l in lines),
                                                 encoding="utf-8")
    dest = tmp_path / "fairseq"
    argv = ["--source-lang", SRC, "--target-lang", TGT, "--trainpref", str(text / "train"),
            "--validpref", str(text / "valid"), "--destdir", str(dest), "--workers", "1",
            "--dataset-impl", "mmap"] + (["--joined-dictionary"] if joined else [])
    before = list(preprocess.logger.handlers)
    try:
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
    finally:
        for handler in preprocess.logger.handlers[:]:
            if handler not in before:
                preprocess.logger.removeHandler(handler)
                handler.close()
    return dest


@pytest.mark.parametrize("joined", [False, True])
def test_token_binaries_are_fairseqs(tmp_path, joined):
    """The direct writer's dictionaries and token binaries are byte for byte what
    fairseq-preprocess writes: count ties, unknown tokens in valid, an empty line, a
    vocabulary to pad to a multiple of 8, and uint32 items past 65,500 symbols."""
    from fairseq_syntax_preprocess import stream

    def write_token_binaries(destdir, work, splits):
        """The pipeline's own last step: counts and piece lines as the chunk loop leaves them."""
        destdir.mkdir()
        work.mkdir()
        summaries = []
        for name, source_lines, target_lines in splits:
            summary = stream.SplitSummary(name, aligned=False, sentences=len(source_lines))
            for lang, lines, counts in ((SRC, source_lines, summary.source_counts),
                                        (TGT, target_lines, summary.target_counts)):
                with open(stream.piece_path(str(work), name, lang), "w", encoding="utf-8",
                          newline="\n") as f:
                    f.writelines(" ".join(line) + "\n" for line in lines)
                for line in lines:
                    counts.update(line)
            summaries.append(summary)
        stream.write_token_binaries(str(destdir), str(work), summaries, SRC, TGT, joined)

    rng = random.Random(5)
    small = ["▁a", "b", "▁c", "é", "▁Ü", "z", "y", "▁x", "<unk>", "</s>", "madeupword0001"]
    big = [f"w{k}" for k in range(70000)]
    for vocab in (small, big):
        def line(n):
            return [rng.choice(vocab) for _ in range(n)]

        train = [line(rng.randint(1, 9)) for _ in range(60)] + [[]]
        if vocab is big:
            train += [big[k:k + 500] for k in range(0, len(big), 500)]
        valid = [line(rng.randint(1, 9)) + ["never-seen"] for _ in range(7)]
        splits = [("train", train, list(reversed(train))), ("valid", valid, valid[::-1])]
        case = tmp_path / f"{len(vocab)}-{joined}"
        case.mkdir()
        reference = _fairseq_preprocess(case, splits, joined)
        ours = case / "ours"
        write_token_binaries(ours, case / "work", splits)
        names = sorted(p.name for p in reference.iterdir() if p.name != "preprocess.log")
        assert sorted(p.name for p in ours.iterdir()) == names
        for name in names:
            assert (ours / name).read_bytes() == (reference / name).read_bytes(), name


def _preprocess_in_process(args):
    from fairseq_syntax_preprocess.cli import main

    assert main([str(a) for a in args]) == 0


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("ptb", [False, True])
def test_chunk_size_does_not_change_the_data_bin(tmp_path, monkeypatch, ptb):
    """Streamed in chunks of 7 pairs (a last one shorter, splits shorter than a chunk) or
    in one chunk, the data-bin is the same, byte for byte (given one --spm-model, so that
    the test checks the streaming alone)."""
    from fairseq_syntax_preprocess import stream

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(str(corpus), "train", 61, seed=11)
    write_corpus(str(corpus), "valid", 5, seed=12)
    write_corpus(str(corpus), "test", 9, seed=13, align=False)
    if ptb:  # the constituency trees: flat, one phrase per sentence
        for split in ("train", "valid", "test"):
            lines = (corpus / f"{split}.{SRC}").read_text(encoding="utf-8").splitlines()
            (corpus / f"{split}.{SRC}.ptb").write_text("".join(
                "(S " + " ".join(f"(X {w})" for w in line.split()) + ")\n" for line in lines),
                encoding="utf-8")
    dest = tmp_path / "bin"
    args = base_args(str(corpus), str(dest), valid=True, test=True) + (
        ["--ptb-suffix", "ptb"] if ptb else [])
    _preprocess_in_process(args + ["--vocab-size", "60"])
    model = tmp_path / "spm.model"
    model.write_bytes((dest / "spm.model").read_bytes())
    built = {}
    for chunk in (7, stream.CHUNK):
        monkeypatch.setattr(stream, "CHUNK", chunk)
        _preprocess_in_process(args + ["--spm-model", model, "--force"])
        built[chunk] = _files(dest)
    assert built[7] == built[stream.CHUNK]
    assert "test.de-en.de.tree.bin" in built[7] and "valid.align.de-en.bin" in built[7]


def test_a_trained_model_is_the_same_bytes_in_any_build_folder(tmp_path):
    """Two builds of one corpus into folders of other names write the same ``spm.model``,
    byte for byte, and so record the same sha256 (the manifest's ``spm_sha256``, which the
    experiment records compare): sentencepiece's trainer used to write the name of its
    temporary folder into the model, so every rebuild looked like another model."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(str(corpus), "train", 61, seed=11)
    models, manifests = [], []
    for name in ("bin", "another-data-bin"):
        dest = tmp_path / name
        _preprocess_in_process(base_args(str(corpus), str(dest)) + ["--vocab-size", "60"])
        models.append((dest / "spm.model").read_bytes())
        manifests.append(json.loads((dest / "syntax_manifest.json").read_text()))
    assert models[0] == models[1]
    assert b"another-data-bin" not in models[1] and str(tmp_path).encode() not in models[1]
    assert manifests[0]["spm_sha256"] == manifests[1]["spm_sha256"] == \
        hashlib.sha256(models[0]).hexdigest()


def test_sentencepiece_trains_on_a_fixed_sample(tmp_path):
    """``--spm-train-pairs 20`` of 61 train pairs: the model has the pieces sentencepiece's
    own trainer gives on the pairs ``random.Random(1).sample`` picks, and the manifest
    records the sample; with 0 it trains on all of them."""
    import sentencepiece as spm

    corpus, dest = tmp_path / "corpus", tmp_path / "bin"
    corpus.mkdir()
    write_corpus(str(corpus), "train", 61, seed=11)
    args = base_args(str(corpus), str(dest)) + ["--vocab-size", "60", "--workers", "1"]

    def pieces(model):
        sp = spm.SentencePieceProcessor(model_file=str(model))
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]

    keep = sorted(random.Random(1).sample(range(61), 20))
    text = {lang: (corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()
            for lang in (SRC, TGT)}
    sample = [" ".join(text[lang][i].split()) for lang in (SRC, TGT) for i in keep]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_prefix=str(tmp_path / "reference"), vocab_size=60,
        model_type="unigram", hard_vocab_limit=False, character_coverage=0.9995, num_threads=1,
        minloglevel=1)
    _preprocess_in_process(args + ["--spm-train-pairs", "20"])
    assert pieces(dest / "spm.model") == pieces(tmp_path / "reference.model")
    assert json.loads((dest / "syntax_manifest.json").read_text())["spm"]["train_sample"] == 20
    _preprocess_in_process(args + ["--spm-train-pairs", "0", "--force"])
    assert json.loads((dest / "syntax_manifest.json").read_text())["spm"]["train_sample"] is None
    assert pieces(dest / "spm.model") != pieces(tmp_path / "reference.model")


def test_one_chunk_of_projected_rows_held_at_once(tmp_path, monkeypatch):
    """Memory does not grow with the corpus: through a hook on the projection, no more
    than one chunk's rows (heads, words, tree) are alive at any time."""
    import weakref

    from fairseq_syntax_preprocess import stream

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(str(corpus), "train", 60, seed=21)
    write_corpus(str(corpus), "valid", 10, seed=22)
    alive, made, most = [0], [0], [0]

    def gone():
        alive[0] -= 1

    def counting(*args, **kwargs):
        projected = real(*args, **kwargs)
        for row in projected.heads + projected.words + projected.trees:
            weakref.finalize(row, gone)
            alive[0] += 1
            made[0] += 1
            most[0] = max(most[0], alive[0])
        return projected

    real = stream.project_chunk
    monkeypatch.setattr(stream, "project_chunk", counting)
    monkeypatch.setattr(stream, "CHUNK", 7)
    _preprocess_in_process(base_args(str(corpus), str(tmp_path / "bin"), valid=True)
                           + ["--vocab-size", "60"])
    assert made[0] == 3 * 70
    assert most[0] <= 3 * 7
    assert alive[0] == 0


# ----------------------------------------------------------------------------- parse cache


class _FakeParser:
    """Stands for a SpacyParser in the parse cache's tests: :meth:`stream` stands for
    ``ParserPool.imap`` over a text file's lines, a chain tree per sentence; ``kill_after``
    sentences into a stream it raises, as a killed run stops."""

    def __init__(self, name="fake", kill_after=None):
        from fairseq_syntax.syntax.spacy_parser import ParserInfo

        self.info = ParserInfo(name=name, package=name, version="1.0", spacy_version="3",
                               lang="xx", fingerprint="f")
        self.kill_after = kill_after
        self.asked = []  # the sentences each stream was given

    def stream(self, text, skip=0):
        from fairseq_syntax.syntax.conllu_io import ParsedSentence
        from fairseq_syntax.syntax.text_io import iter_words

        asked = []
        self.asked.append(asked)
        for words in iter_words(text, skip):
            if self.kill_after is not None and len(asked) == self.kill_after:
                raise KeyboardInterrupt
            asked.append(words)
            yield ParsedSentence(words, [-1] + list(range(len(words) - 1)),
                                 ["dep"] * len(words), 0), False


def test_killed_parse_resumes_where_it_stopped(tmp_path, monkeypatch):
    """The parse cache is written in chunks (``{cache}.partial``) while parsing: a killed
    run keeps its complete sentences (a torn last one is cut off), the next run parses only
    the rest and ends with the cache an uninterrupted run writes, byte for byte."""
    from fairseq_syntax_preprocess import spacy_parse

    monkeypatch.setattr(spacy_parse, "RESUME_CHUNK", 3)
    sentences = [[f"w{k}", "b", "c"][: 1 + k % 3] for k in range(20)]
    text = tmp_path / "train.xx"
    text.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    whole = tmp_path / "whole.conllu"
    parser = _FakeParser()
    spacy_parse.parse_and_cache(parser, str(text), 20, str(whole), stream=parser.stream(text))
    assert not os.path.exists(str(whole) + ".partial")

    cache = tmp_path / "cache" / "train.xx.conllu"
    partial = str(cache) + ".partial"
    killed = _FakeParser(kill_after=7)
    with pytest.raises(KeyboardInterrupt):
        spacy_parse.parse_and_cache(killed, str(text), 20, str(cache), stream=killed.stream(text))
    assert not cache.exists() and os.path.exists(partial)
    with open(partial, "a", encoding="utf-8") as f:  # killed mid-write: half a sentence
        f.write("# text = w7 b\n1\tw7\t_\t_\t_\t_\t0\tdep\t_\t_\n")
    parser = _FakeParser()
    assert not spacy_parse.load_cached(parser, str(text), 20, str(cache))
    resumed = spacy_parse.resume_parses(parser, str(text), 20, str(cache))
    assert resumed == 7
    spacy_parse.parse_and_cache(parser, str(text), 20, str(cache),
                                stream=parser.stream(text, resumed), resumed=resumed)
    assert parser.asked == [sentences[7:]]  # only the rest was parsed
    assert cache.read_bytes() == whole.read_bytes()
    assert not os.path.exists(partial)
    assert spacy_parse.load_cached(parser, str(text), 20, str(cache))
    assert not spacy_parse.load_cached(_FakeParser("other"), str(text), 20, str(cache))

    # what another parser (or text) left is not reused, and removed
    other = _FakeParser("other", kill_after=5)
    with pytest.raises(KeyboardInterrupt):
        spacy_parse.parse_and_cache(other, str(text), 20, str(tmp_path / "b.conllu"),
                                    stream=other.stream(text))
    assert spacy_parse.resume_parses(parser, str(text), 20, str(tmp_path / "b.conllu")) == 0
    assert not os.path.exists(str(tmp_path / "b.conllu") + ".partial")
