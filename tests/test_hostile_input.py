"""Hostile input (issue 16 item 7): damaged side-files, out-of-range values, a --destdir
that holds the inputs or the working folder, a run stopped by a signal, and the
left-padding advice. Each error is one line naming the file (split, sentence) and what
to do; nothing is left half-written."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import USER_DIR

PROG = "fairseq-syntax-preprocess"
HEADER = 26  # bytes of fairseq's mmap index header: magic 9, version 8, dtype 1, count 8


# ------------------------------------------------------------------ side-files at load


def _setup_task(databin, extra=("--load-distances", "--load-tree")):
    from fairseq import options, tasks

    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation", "--cpu", *extra])
    return tasks.setup_task(args)


def _load_and_collate(databin, split="valid"):
    """What fairseq-train does with a split: load it, then collate its sentences."""
    task = _setup_task(databin)
    task.load_dataset(split)
    dataset = task.datasets[split]
    dataset.collater([dataset[i] for i in range(len(dataset))])


@pytest.fixture
def databin(synthetic_databin, tmp_path):
    """A copy of the synthetic data-bin to damage."""
    dest = tmp_path / "data-bin"
    shutil.copytree(synthetic_databin, dest)
    return dest


def _index(path):
    """Sizes and byte offsets of an mmap index, read by its definition (int32 sizes, then
    int64 offsets, after the header)."""
    raw = path.read_bytes()
    count = int(np.frombuffer(raw[HEADER - 8:HEADER], dtype=np.uint64)[0])
    sizes = np.frombuffer(raw[HEADER:HEADER + 4 * count], dtype=np.int32)
    offsets = np.frombuffer(raw[HEADER + 4 * count:HEADER + 12 * count], dtype=np.int64)
    return sizes, offsets


def _one_line(err):
    message = str(err.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("kind", ["heads", "tree", "words"])
def test_truncated_side_bin_names_split_file_and_sentence(databin, kind):
    stem = f"valid.en-vf.en.{kind}"
    sizes, offsets = _index(databin / f"{stem}.idx")
    cut = 7  # cut the data file inside sentence 7: it and all after it are missing
    assert sizes[cut] >= 2
    with open(databin / f"{stem}.bin", "r+b") as f:
        f.truncate(int(offsets[cut]) + 4)
    with pytest.raises(ValueError) as err:
        _load_and_collate(databin)
    message = _one_line(err)
    assert f"{stem}.bin" in message
    assert "split 'valid'" in message
    assert re.search(rf"\bsentence {cut}\b", message), message
    assert "fairseq-syntax-preprocess" in message  # what to do: rebuild


@pytest.mark.parametrize("kind", ["heads", "tree"])
@pytest.mark.parametrize("where", ["sizes", "offsets"])
def test_truncated_side_idx_names_split_file_and_sentence(databin, kind, where):
    stem = f"valid.en-vf.en.{kind}"
    sizes, _ = _index(databin / f"{stem}.idx")
    count = len(sizes)
    first_missing = 11
    keep = HEADER + 4 * first_missing + 2 if where == "sizes" else (
        HEADER + 4 * count + 8 * first_missing + 3)
    with open(databin / f"{stem}.idx", "r+b") as f:
        f.truncate(keep)
    with pytest.raises(ValueError) as err:
        _load_and_collate(databin)
    message = _one_line(err)
    assert f"{stem}.idx" in message
    assert "split 'valid'" in message
    assert re.search(rf"\bsentence {first_missing}\b", message), message
    assert "fairseq-syntax-preprocess" in message


def test_side_idx_shorter_than_its_header(databin):
    (databin / "valid.en-vf.en.heads.idx").write_bytes(b"MMIDIDX\x00\x00\x01")
    with pytest.raises(ValueError) as err:
        _load_and_collate(databin)
    message = _one_line(err)
    assert "valid.en-vf.en.heads.idx" in message and "header" in message


def _set_value(path, sentence, position, value):
    sizes, offsets = _index(path.with_suffix(".idx"))
    assert position < sizes[sentence]
    values = np.fromfile(path, dtype=np.int32)
    values[offsets[sentence] // 4 + position] = value
    values.tofile(path)
    return int(sizes[sentence])


@pytest.mark.parametrize("kind, position, value", [
    ("heads", 2, 999),   # a head past the sentence's end
    ("heads", 0, -2),    # below -1 (the root)
    ("heads", "last", "size"),  # one past the last position (eos)
    ("words", 1, 999),
    ("words", "last", 0),  # eos must be -1, not a word
    ("words", 0, -1),    # -1 (eos) on a piece
    ("tree", 0, 999),    # a node id past the tree
    ("tree", 1, -1),
    ("tree", 0, "parent"),  # the first internal node as its own child: children come first
])
def test_out_of_range_side_value_is_refused_at_load(databin, kind, position, value):
    stem = f"valid.en-vf.en.{kind}"
    sentence = 3
    sizes, _ = _index(databin / f"{stem}.idx")
    size = int(sizes[sentence])
    position = size - 1 if position == "last" else position
    leaves = size // 2 + 1  # tree: 2 (n - 1) values for n leaves; node k is n + k
    value = {"size": size, "parent": leaves}.get(value, value)
    _set_value(databin / f"{stem}.bin", sentence, position, value)
    task = _setup_task(databin)
    with pytest.raises(ValueError) as err:
        task.load_dataset("valid")  # at load, not in the collater of some later batch
    message = _one_line(err)
    assert f"{stem}.bin" in message
    assert "split 'valid'" in message
    assert re.search(rf"\bsentence {sentence}\b", message), message
    assert re.search(rf"\bvalue {value} at position {position}\b", message), message


@pytest.mark.parametrize("block", [1, 5, 1 << 22])
def test_value_check_blocks_find_the_first_bad_sentence_and_count_them(databin, block):
    """The range check runs over blocks of whole sentences: any block size names the
    first bad sentence and counts every bad one."""
    from fairseq_syntax.data.side_files import check_side_values

    path = databin / "valid.en-vf.en.heads.bin"
    for sentence in (9, 3, 4):
        _set_value(path, sentence, 1, 999)
    sizes, _ = _index(path.with_suffix(".idx"))
    values = np.fromfile(path, dtype=np.int32)
    with pytest.raises(ValueError) as err:
        check_side_values("heads", values, sizes.astype(np.int64), str(path), block=block)
    message = _one_line(err)
    assert re.search(r"\bsentence 3: value 999 at position 1\b", message), message
    assert "sentences with bad values: 3;" in message


def test_intact_side_files_still_load(databin):
    _load_and_collate(databin)


# ------------------------------------------------------------------ preprocess --destdir


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny synthetic corpus (text, CoNLL-U parses, alignments) to preprocess."""
    from fairseq_syntax.data.synthetic_corpus import generate_corpus

    out = tmp_path_factory.mktemp("hostile_corpus")
    generate_corpus(str(out), seed=5, train=60, valid=8, test=0, gen=0)
    return out


def _preprocess_args(raw, dest):
    return ["--source-lang", "en", "--target-lang", "vf", "--trainpref", f"{raw}/train",
            "--validpref", f"{raw}/valid", "--align-suffix", "align", "--vocab-size", "60",
            "--destdir", str(dest), "--force"]


def _run_in_process(argv, capsys):
    """``main(argv)``; returns (exit code, stderr)."""
    from fairseq_syntax_preprocess.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as err:
        code = err.code
    return code, capsys.readouterr().err


def _snapshot(folder):
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("layout", ["inputs_in_destdir", "inputs_below_destdir"])
def test_force_refuses_a_destdir_that_holds_the_inputs(corpus, tmp_path, capsys, layout):
    top = tmp_path / "top"
    raw = top / "corpus" if layout == "inputs_below_destdir" else top
    shutil.copytree(corpus, raw)
    before = _snapshot(tmp_path)
    code, err = _run_in_process(_preprocess_args(raw, top), capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{PROG}: error: ")
    assert str(raw / "train.en") in lines[0]  # the input it would delete
    assert "--destdir" in lines[0]
    assert _snapshot(tmp_path) == before  # inputs intact, nothing written beside them


@pytest.mark.parametrize("destdir, cwd", [(".", "work"), ("..", "work/sub")])
def test_force_refuses_the_current_folder_as_destdir(corpus, tmp_path, capsys, monkeypatch,
                                                     destdir, cwd):
    work = tmp_path / cwd
    work.mkdir(parents=True)
    (tmp_path / "work" / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = _snapshot(tmp_path)
    monkeypatch.chdir(work)
    code, err = _run_in_process(_preprocess_args(corpus, destdir), capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{PROG}: error: ")
    assert "current folder" in lines[0]
    assert _snapshot(tmp_path) == before  # no .old-*, .staging-*, .work-* folder


# ------------------------------------------------------------------ signals

# fairseq-syntax-preprocess, made to wait right after the token binaries are in the
# staging folder (a marker file says so), so the signal lands mid-run every time.
_WAITING_RUN = """
import sys, time
from fairseq_syntax_preprocess import cli, pipeline

marker = sys.argv[1]
written = pipeline.write_token_binaries

def write_then_wait(*args, **kwargs):
    written(*args, **kwargs)
    open(marker, "w").close()
    time.sleep(120)

pipeline.write_token_binaries = write_then_wait
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_run_leaves_no_staging_or_work_folder(corpus, tmp_path, signum):
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "binaries-written"
    argv = [sys.executable, "-c", _WAITING_RUN, str(marker),
            *_preprocess_args(corpus, out / "data-bin")]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached its binaries"
            time.sleep(0.05)
        staged = sorted(p.name for p in out.iterdir())
        assert any(".staging-" in name for name in staged), staged  # really mid-run
        assert any(".work-" in name for name in staged), staged
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, err
    assert list(out.iterdir()) == []
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{PROG}: error: "), err
    assert signal.Signals(signum).name in last


def test_the_next_run_clears_what_a_sigkilled_run_left(corpus, tmp_path):
    """SIGKILL leaves no chance to clean up: the staging and work folders stay beside
    --destdir until the next run into that folder removes them (naming them), and builds
    the data-bin."""
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "binaries-written"
    args = _preprocess_args(corpus, out / "data-bin")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", _WAITING_RUN, str(marker), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    left = sorted(p.name for p in out.iterdir())
    assert [n.startswith((f".data-bin.staging-{proc.pid}.", f".data-bin.work-{proc.pid}."))
            for n in left] == [True, True]
    rerun = subprocess.run([PROG, *args], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == ["data-bin"]
    for name in left:
        assert f"removed {out / name}, left by run {proc.pid}, which was killed" in rerun.stdout


# ------------------------------------------------------------------ left padding


def _accepted_left_pad_source(task, flag):
    """``left_pad_source`` after fairseq's own parser read ``flag`` under ``task``."""
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "data-bin", "--user-dir", USER_DIR, "--task", task, "--arch", "lstm", *flag.split()])
    return args.left_pad_source


@pytest.mark.parametrize("arch", ["attentional_rnn", "syntax_transformer_tiny"])
def test_left_pad_advice_names_flags_that_the_tasks_accept(arch):
    """The error a syntax model gives for a left-padded source names, for each task, how
    to get a right-padded source; fairseq's parser must accept what it names."""
    import torch

    from model_utils import build_model, random_batch

    model = build_model(arch)
    src, lengths, prev = random_batch(model)
    with pytest.raises(ValueError) as err:
        model(torch.roll(src, shifts=1, dims=1), lengths, prev)
    message = _one_line(err)
    advice = re.search(r"--task translation[^;]*? add (--left-pad-source(?: [A-Za-z]+)?)\b",
                       message)
    assert advice, message
    assert _accepted_left_pad_source("translation", advice.group(1)) is False
    assert re.search(r"--task syntax_translation[^;]*? drop --left-pad-source\b", message)
    assert _accepted_left_pad_source("syntax_translation", "--left-pad-source") is True
    assert _accepted_left_pad_source("syntax_translation", "") is False


def test_left_padded_syntax_dataset_advice():
    from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset
    from model_utils import tiny_dictionary

    import torch

    tokens = [torch.tensor([4, 5, 2])]
    with pytest.raises(ValueError) as err:
        SyntaxLanguagePairDataset(tokens, [3], tiny_dictionary(), left_pad_source=True)
    message = _one_line(err)
    assert "drop --left-pad-source" in message and "False" not in message
