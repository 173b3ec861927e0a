"""Hostile input, second probe (issue 40): a checkpoint that runs code with torch's safe
loader switched off, a moved data-bin's rebuild advice, a --destdir that appears during a
run, a missing or different spm.model, cryptic errors, silent mismatches, and three
numerics that mutation testing found untested. Each message names the file (split,
sentence) and what to do."""
import json
import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest
import torch

from conftest import USER_DIR, generate_args, run_cli, train_args
from test_hostile_input import _run_in_process

PROG = "fairseq-syntax-preprocess"


def _one_line(err):
    message = str(err.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def databin(synthetic_databin, tmp_path):
    """A copy of the synthetic data-bin to damage."""
    dest = tmp_path / "data-bin"
    shutil.copytree(synthetic_databin, dest)
    return dest


def _setup_task(databin, extra=("--load-distances", "--load-tree")):
    from fairseq import options, tasks

    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation", "--cpu", *extra])
    return tasks.setup_task(args)


def _edit_manifest(databin, edit):
    path = databin / "syntax_manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    edit(manifest)
    path.write_text(json.dumps(manifest), encoding="utf-8")


# ------------------------------------------------------------------ 1. unsafe checkpoint


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        # Unpickling would call open(marker, "w"): creating the file proves the code ran.
        return (open, (self.marker, "w"))


def test_generate_refuses_a_pickled_callable_with_the_safe_loader_switched_off(
        synthetic_databin, tmp_path, monkeypatch):
    """TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 switches torch's safe unpickler off wherever
    torch.load is not given weights_only; the plugin's loads keep it on."""
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "cfg": None, "extra": _Payload(str(marker))}, path)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    proc = run_cli(
        ["fairseq-generate", str(synthetic_databin), "--user-dir", USER_DIR,
         "--task", "syntax_translation", "--path", str(path), "--cpu"],
        check=False)
    assert not marker.exists()
    assert proc.returncode != 0
    assert "Unsupported global: GLOBAL io.open" in proc.stderr, proc.stderr[-3000:]
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set, but fairseq-syntax still loads" in (
        proc.stdout + proc.stderr)


# ------------------------------------------------------------------ 2. moved data-bin's advice


def test_rebuild_advice_of_a_moved_data_bin_names_the_data_bin_read(databin, synthetic_databin):
    """The copy's manifest records the command that wrote the original folder: following
    the advice must rebuild the copy, never replace the folder recorded."""
    from fairseq_syntax.data.side_files import check_format_version

    _edit_manifest(databin, lambda m: m.update(format_version=1))
    recorded = json.loads((databin / "syntax_manifest.json").read_text())["command"]
    assert recorded["argv"][recorded["argv"].index("--destdir") + 1] == str(synthetic_databin)
    with pytest.raises(ValueError) as err:
        check_format_version(str(databin))
    message = str(err.value)
    assert message.startswith(f"{databin}/syntax_manifest.json: the syntax side-files are "
                              "format 1")
    command = message.splitlines()[-1].strip()
    assert command.startswith(f"cd {recorded['cwd']} && {PROG} ")
    argv = shlex.split(command.split(" && ", 1)[1])
    destdirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--destdir"]
    assert destdirs == [str(databin)]
    assert not any(a.startswith("--destdir=") for a in argv)
    assert str(synthetic_databin) not in message


# ------------------------------------------------------------------ 6. damaged manifest


@pytest.mark.parametrize("content, line, says", [
    ('{"format_version": 2, "command": {"argv": ["fairseq-syn', 1,
     "not valid JSON at column 44 (Unterminated string starting at): cut short or edited"),
    ('{\n  "format_version": 2,\n', 3,
     "not valid JSON at column 1 (Expecting property name enclosed in double quotes): "
     "cut short or edited"),
    ("[2]", None, "holds an array, where a manifest is a JSON object"),
    ('"format 2"', None, "holds a string, where a manifest is a JSON object"),
])
def test_damaged_manifest_names_the_file_and_what_to_do(databin, content, line, says):
    (databin / "syntax_manifest.json").write_text(content, encoding="utf-8")
    task = _setup_task(databin)
    with pytest.raises(ValueError) as err:
        task.load_dataset("valid")
    where = f"{databin}/syntax_manifest.json:" + (f"{line}:" if line else "")
    assert _one_line(err) == (f"{where} {says}; rebuild the data-bin with {PROG} (the command "
                              "that made it is lost with the manifest)")


def test_format_version_as_a_string_is_named_as_such(databin):
    _edit_manifest(databin, lambda m: m.update(format_version="2"))
    task = _setup_task(databin)
    with pytest.raises(ValueError) as err:
        task.load_dataset("valid")
    assert _one_line(err) == (
        f'{databin}/syntax_manifest.json: format_version is "2", not a whole number such as 2: '
        f"the manifest was edited or damaged; rebuild the data-bin with {PROG} (its "
        "syntax_manifest.json records the command)")


# ------------------------------------------------------------------ 3, 7. --destdir and --force


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny synthetic corpus (text, CoNLL-U parses, alignments, PTB parses)."""
    from fairseq_syntax.data.synthetic_corpus import generate_corpus

    out = tmp_path_factory.mktemp("hostile_corpus_more")
    generate_corpus(str(out), seed=5, train=60, valid=8, test=0, gen=0)
    return out


def _preprocess_args(raw, dest, *extra):
    return ["--source-lang", "en", "--target-lang", "vf", "--trainpref", f"{raw}/train",
            "--validpref", f"{raw}/valid", "--align-suffix", "align", "--vocab-size", "60",
            "--destdir", str(dest), *extra]


def _appear_during_the_run(monkeypatch, folder, files):
    """Make ``folder`` (holding ``files``) appear while the run writes its binaries."""
    from fairseq_syntax_preprocess import pipeline

    write = pipeline.write_token_binaries

    def write_then_appear(*args, **kwargs):
        write(*args, **kwargs)
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")

    monkeypatch.setattr(pipeline, "write_token_binaries", write_then_appear)


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_destdir_that_appears_during_the_run_is_not_replaced(corpus, tmp_path, capsys,
                                                                monkeypatch, force):
    """Without --force nothing that appeared is replaced; with --force only a data-bin."""
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "data-bin"
    _appear_during_the_run(monkeypatch, dest, {"notes.txt": "mine\n"})
    code, err = _run_in_process(_preprocess_args(corpus, dest, *force), capsys)
    assert code == 1
    assert err.strip().splitlines() == [f"{PROG}: error: {dest}: " + (
        "--destdir appeared during the run (another run, or someone wrote it) and is not "
        "empty; it was left as it is and nothing was written: use --force to replace it, or "
        "give another --destdir" if not force else
        "--destdir (as it is now, written during the run) is not a data-bin (it holds no "
        "syntax_manifest.json), and --force replaces only a data-bin: give another "
        "--destdir, or add --force-non-data-bin to delete the folder and everything in it")]
    assert sorted(p.name for p in out.iterdir()) == ["data-bin"]  # no staging, work, old
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt"]
    assert (dest / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_force_replaces_a_data_bin_that_appears_during_the_run(corpus, tmp_path, capsys,
                                                               monkeypatch):
    dest = tmp_path / "data-bin"
    _appear_during_the_run(monkeypatch, dest, {"syntax_manifest.json": "{}\n"})
    code, err = _run_in_process(_preprocess_args(corpus, dest, "--force"), capsys)
    assert code == 0, err
    manifest = json.loads((dest / "syntax_manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["sentences"] == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data-bin"]


def test_force_refuses_a_folder_that_is_not_a_data_bin(corpus, tmp_path, capsys):
    dest = tmp_path / "photos"
    dest.mkdir()
    (dest / "cat.jpg").write_bytes(b"\xff\xd8")
    code, err = _run_in_process(_preprocess_args(corpus, dest, "--force"), capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        f"{PROG}: error: {dest}: --destdir is not a data-bin (it holds no "
        "syntax_manifest.json), and --force replaces only a data-bin: give another "
        "--destdir, or add --force-non-data-bin to delete the folder and everything in it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
    assert (dest / "cat.jpg").read_bytes() == b"\xff\xd8"
    # the separate flag confirms it
    code, err = _run_in_process(
        _preprocess_args(corpus, dest, "--force", "--force-non-data-bin"), capsys)
    assert code == 0, err
    assert not (dest / "cat.jpg").exists() and (dest / "syntax_manifest.json").is_file()
    # and alone it is refused: it confirms --force
    code, err = _run_in_process(_preprocess_args(corpus, dest, "--force-non-data-bin"), capsys)
    assert code == 2 and err.strip().endswith(
        f"{PROG}: error: --force-non-data-bin needs --force")


# ------------------------------------------------------------------ 4, 6. fairseq-interactive


@pytest.fixture(scope="module")
def checkpoint(synthetic_databin, tmp_path_factory):
    """A tiny attentional_rnn after one update (plumbing, not quality)."""
    save = tmp_path_factory.mktemp("hostile_more_ckpt")
    run_cli(train_args(synthetic_databin, save, updates=1))
    return save / "checkpoint_last.pt"


def _interactive(databin, checkpoint, text, *extra):
    return run_cli(["fairseq-interactive", str(databin), "--user-dir", USER_DIR,
                    "--task", "syntax_translation", "--path", str(checkpoint), "--cpu", *extra],
                   check=False, input=text)


def _other_spm_model(synthetic_raw, tmp_path):
    import sentencepiece as spm

    prefix = str(tmp_path / "other")
    spm.SentencePieceTrainer.train(input=f"{synthetic_raw}/train.en", model_prefix=prefix,
                                   vocab_size=60, hard_vocab_limit=False, minloglevel=2)
    return tmp_path / "other.model"


def _sha256(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_interactive_refuses_a_missing_spm_model(databin, checkpoint):
    (databin / "spm.model").unlink()
    proc = _interactive(databin, checkpoint, "some bakers saw a happy rabbit .\n")
    assert proc.returncode != 0
    assert "H-0" not in proc.stdout
    assert proc.stderr.rstrip().splitlines()[-1] == (
        f"fairseq_syntax.syntax.errors.SyntaxInputError: {databin}/spm.model: the "
        "sentencepiece model is missing, so raw input cannot be split into the subwords the "
        "model was trained on: put back the spm.model that fairseq-syntax-preprocess wrote "
        "into the data-bin, or rebuild the data-bin")


def test_raw_input_refuses_a_different_spm_model(databin, synthetic_raw, tmp_path):
    from argparse import Namespace

    other = _other_spm_model(synthetic_raw, tmp_path)
    recorded = json.loads((databin / "syntax_manifest.json").read_text())["spm_sha256"]
    assert recorded == _sha256(databin / "spm.model")
    expected = (f"sha256 {_sha256(other)[:16]}... is not the {recorded[:16]}... that "
                f"{databin}/syntax_manifest.json records: not the sentencepiece model that made "
                "the data-bin, so raw input would become other subwords; use the data-bin's own "
                "spm.model, or rebuild the data-bin with this model (--spm-model)")
    # given to fairseq's --bpe sentencepiece
    task = _setup_task(databin, [])
    with pytest.raises(ValueError) as err:
        task.build_bpe(Namespace(bpe="sentencepiece", sentencepiece_model=str(other),
                                 sentencepiece_enable_sampling=False,
                                 sentencepiece_alpha=None))
    assert _one_line(err) == f"{other}: {expected}"
    # in place of the data-bin's own
    shutil.copyfile(other, databin / "spm.model")
    task = _setup_task(databin, [])
    with pytest.raises(ValueError) as err:
        task.get_interactive_tokens_and_lengths(["some bakers saw a happy rabbit ."], None)
    assert _one_line(err) == f"{databin}/spm.model: {expected}"


def test_raw_input_of_a_data_bin_without_spm_checksum_is_unchecked(databin, caplog):
    """A manifest written before the checksum was recorded: the model is used, with a
    warning that says it is unchecked."""
    _edit_manifest(databin, lambda m: m.pop("spm_sha256"))
    task = _setup_task(databin, [])
    tokens, lengths = task.get_interactive_tokens_and_lengths(["some bakers saw a rabbit ."], None)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(databin / "spm.model"))
    pieces = [p for w in "some bakers saw a rabbit .".split() for p in sp.encode(w, out_type=str)]
    assert task.source_dictionary.string(tokens[0][:-1]).split() == pieces
    assert lengths == [len(pieces) + 1]
    assert (f"{databin}/syntax_manifest.json records no sha256 of spm.model (made before it was "
            f"recorded): {databin}/spm.model is used unchecked") in caplog.text


def test_interactive_names_a_line_that_is_not_utf8(synthetic_databin, checkpoint):
    """Standard input read with surrogateescape (Python's choice under the C locale)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               PYTHONIOENCODING="utf-8:surrogateescape")
    proc = subprocess.run(
        ["fairseq-interactive", str(synthetic_databin), "--user-dir", USER_DIR,
         "--task", "syntax_translation", "--path", str(checkpoint), "--cpu"],
        input=b"some bakers saw a happy rabbit .\nthe caf\xe9 is open .\n", env=env,
        capture_output=True)
    stdout, stderr = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode != 0
    assert re.findall(r"^H-(\d+)\t", stdout, re.M) == ["0"]  # the line before it translated
    assert stderr.rstrip().splitlines()[-1] == (
        "fairseq_syntax.syntax.errors.SyntaxInputError: raw input line 2: byte 0xe9 at "
        "character 8 is not UTF-8 text ('the caf' comes before it): give the input as UTF-8, "
        "e.g. convert it with iconv -f LATIN1 -t UTF-8")


# ------------------------------------------------------------------ 7. tree kind


def test_tree_side_file_of_a_ptb_run_is_refused_in_a_dependency_data_bin(corpus, tmp_path,
                                                                        capsys):
    """Same corpus, same sentencepiece model: the tree side-files have the same sizes, but
    the manifest of the dependency data-bin records its own."""
    from fairseq_syntax.data.side_files import file_sha256

    dep, ptb = tmp_path / "dep", tmp_path / "ptb"
    assert _run_in_process(_preprocess_args(corpus, dep), capsys)[0] == 0
    assert _run_in_process(_preprocess_args(corpus, ptb, "--ptb-suffix", "ptb", "--spm-model",
                                            dep / "spm.model"), capsys)[0] == 0
    stem = "valid.en-vf.en.tree"
    assert (dep / f"{stem}.idx").read_bytes() == (ptb / f"{stem}.idx").read_bytes()
    assert (dep / f"{stem}.bin").read_bytes() != (ptb / f"{stem}.bin").read_bytes()
    manifest = json.loads((dep / "syntax_manifest.json").read_text())
    assert manifest["tree_source"] == "dependency"
    assert manifest["side_file_sha256"][f"{stem}.bin"] == file_sha256(str(dep / f"{stem}.bin"))
    _setup_task(dep).load_dataset("valid")  # its own trees load
    shutil.copyfile(ptb / f"{stem}.bin", dep / f"{stem}.bin")
    task = _setup_task(dep)
    with pytest.raises(ValueError) as err:
        task.load_dataset("valid")
    have, want = file_sha256(str(ptb / f"{stem}.bin")), manifest["side_file_sha256"][f"{stem}.bin"]
    assert _one_line(err) == (
        f"{dep}/{stem}.bin: split 'valid', the tree side-file: its sha256 {have[:16]}... is not "
        f"the {want[:16]}... that syntax_manifest.json records: it is not the file {PROG} wrote "
        "for this data-bin (whose binary trees are head-outward binarisations of the "
        'dependency parses, tree_source "dependency"; a tree side-file of another run, e.g. '
        "one with or without --ptb-suffix, holds other trees); rebuild the data-bin with "
        f"{PROG} (its syntax_manifest.json records the command)")


# ------------------------------------------------------------------ 6. fairseq's own binaries

HEADER = 26  # bytes of fairseq's mmap index header: magic 9, version 8, dtype 1, count 8


def _index(path):
    """Value size, sentence sizes and byte offsets of an mmap index, read by its definition
    (dtype code at byte 17: 4 int32, 8 uint16, 9 uint32; int32 sizes, then int64 offsets)."""
    raw = path.read_bytes()
    itemsize = {4: 4, 8: 2, 9: 4}[raw[17]]
    count = int(np.frombuffer(raw[HEADER - 8:HEADER], dtype=np.uint64)[0])
    sizes = np.frombuffer(raw[HEADER:HEADER + 4 * count], dtype=np.int32)
    offsets = np.frombuffer(raw[HEADER + 4 * count:HEADER + 12 * count], dtype=np.int64)
    return itemsize, sizes, offsets


@pytest.mark.parametrize("stem", ["valid.en-vf.en", "valid.en-vf.vf", "valid.align.en-vf"])
def test_truncated_token_or_alignment_bin_names_split_file_and_sentence(databin, stem):
    itemsize, sizes, offsets = _index(databin / f"{stem}.idx")
    cut = 9  # cut the data inside sentence 9: it and the 30 after it are missing
    assert len(sizes) == 40 and sizes[cut] >= 2
    have = int(offsets[cut]) + itemsize
    with open(databin / f"{stem}.bin", "r+b") as f:
        f.truncate(have)
    task = _setup_task(databin, ["--load-alignments"])
    with pytest.raises(ValueError) as err:
        task.load_dataset("valid")
    want = itemsize * int(sizes.sum())
    assert _one_line(err) == (
        f"{databin}/{stem}.bin: split 'valid', the data is cut short: {have} bytes, its index "
        f"needs {want}; sentence {cut} on (31 of 40) is missing; rebuild the data-bin with "
        f"{PROG} (its syntax_manifest.json records the command)")


# ------------------------------------------------------------------ 6. CoNLL-U


def test_tab_inside_a_conllu_form_is_named_not_blamed_on_head(tmp_path):
    from fairseq_syntax.syntax.conllu_io import read_conllu_trees

    path = tmp_path / "train.en.conllu"
    path.write_text(
        "# text = the dog barked\n"
        "1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_\n"
        "2\tdo\tg\t_\t_\t_\t_\t3\tnsubj\t_\t_\n"  # FORM "do<TAB>g": 11 columns
        "3\tbarked\t_\t_\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_conllu_trees(str(path))
    assert _one_line(err) == (
        f"{path}:3: 11 columns where CoNLL-U has 10: a column holds a tab or two spaces in a "
        "row (word 2: FORM 'do', then 'g'?); a word may hold neither: remove them from the "
        "text and the parse")


def test_a_full_disk_names_the_destdir(corpus, tmp_path, capsys, monkeypatch):
    """A failed write names no file: the error names --destdir, and nothing is left."""
    import errno

    from fairseq_syntax_preprocess.fairseq_binary import MmapWriter

    def disk_full(self, values, sizes):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(MmapWriter, "add", disk_full)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "data-bin"
    code, err = _run_in_process(_preprocess_args(corpus, dest), capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        f"{PROG}: error: {dest}: No space left on device while writing the data-bin (beside "
        "this folder; what was written is removed): free space on that disk, or give a "
        "--destdir on another one, and rerun"]
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------ 8. numerics untested before


def test_generate_applies_the_length_prior_weight(synthetic_databin, checkpoint):
    """eq. 16 through fairseq-generate: score = Σ token log-probs + w · log p(m | n), with the
    w of --length-prior-weight (not the paper's 1)."""
    import math

    from fairseq_syntax.generation.length_prior import LengthPrior, load_length_counts

    weight = 0.25
    out = run_cli(generate_args(synthetic_databin, checkpoint, extra=[
        "--max-len-b", "25", "--length-prior", "--length-prior-weight", str(weight)])).stdout
    src = {int(i): s.split() for i, s in re.findall(r"^S-(\d+)\t(.*)$", out, re.M)}
    hyp = {int(i): (float(score), h.split())
           for i, score, h in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", out, re.M)}
    token_scores = {int(i): [float(x) for x in p.split()]
                    for i, p in re.findall(r"^P-(\d+)\t(.*)$", out, re.M)}
    assert src.keys() == hyp.keys() == token_scores.keys() and len(src) == 37
    prior = LengthPrior(load_length_counts(str(synthetic_databin)))
    for i in src:
        m = len(hyp[i][1])
        log_p = prior.log_prob(len(src[i]), m)
        assert log_p < -0.1  # the weight is seen in every sentence (> 0.1 nats)
        # printed in base 2, token scores with 4 decimals each
        assert hyp[i][0] == pytest.approx(sum(token_scores[i]) + weight * log_p / math.log(2),
                                          abs=3e-3)


@pytest.mark.parametrize("q", [0.8, 0.15])
def test_parent_ignoring_leaves_a_row_unscaled_with_probability_q(q):
    """In training each row of a PASCAL head stays unscaled where its uniform draw u is
    below q (probability q), else it is scaled; the other heads are never scaled."""
    from fairseq_syntax.modules.parent_scaled_attention import ParentScaledSelfAttention

    bsz, heads, tgt_len, src_len = 4, 2, 250, 6
    attn = ParentScaledSelfAttention(8, heads, pascal_heads=1, parent_ignoring=q)
    attn.train()
    g = torch.Generator().manual_seed(1)
    weights = torch.randn(bsz * heads, tgt_len, src_len, generator=g)
    attn.parent_weights = torch.rand(bsz, tgt_len, src_len, generator=g) + 0.5
    torch.manual_seed(7)
    draws = torch.rand(bsz, 1, tgt_len, 1)  # the draw apply_sparse_mask makes next
    torch.manual_seed(7)
    out = attn.apply_sparse_mask(weights.clone(), tgt_len, src_len, bsz).view(
        bsz, heads, tgt_len, src_len)
    plain = weights.view(bsz, heads, tgt_len, src_len)
    scaled = plain[:, 0] * attn.parent_weights
    unscaled = draws[:, 0, :, 0] < q  # [B, T]
    torch.testing.assert_close(out[:, 0][unscaled], plain[:, 0][unscaled], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 0][~unscaled], scaled[~unscaled], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 1], plain[:, 1], rtol=0, atol=0)
    rows = bsz * tgt_len
    assert abs(int(unscaled.sum()) - q * rows) < 4 * (q * (1 - q) * rows) ** 0.5


def test_supervised_attention_with_a_left_padded_target_equals_single_sentences():
    """The criterion's links are sentence-relative: with the target padded on the left,
    target word j is at padded position (T - length) + j."""
    from fairseq.data import Dictionary

    import torch.nn.functional as F

    from fairseq_syntax.criterions.supervised_attention import SupervisedAttentionCrossEntropy
    from model_utils import FakeTask

    d = Dictionary()
    for i in range(10):
        d.add_symbol(f"w{i}")
    pad = d.pad()

    class FixedAttention(torch.nn.Module):
        def __init__(self, attn):
            super().__init__()
            self.attn = attn

        def forward(self, src_tokens, src_lengths, prev_output_tokens, **side):
            return torch.zeros(*prev_output_tokens.shape, len(d)), {"attn": [self.attn]}

        def get_normalized_probs(self, net_output, log_probs, sample=None):
            return F.log_softmax(net_output[0], dim=-1)

        def get_targets(self, sample, net_output):
            return sample["target"]

    def sample(src, tgt, links):
        prev = torch.full_like(tgt, pad)
        return {"net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(1),
                              "prev_output_tokens": prev},
                "target": tgt, "ntokens": int(tgt.ne(pad).sum()), "alignment_links": links,
                "id": torch.arange(src.size(0))}

    crit = SupervisedAttentionCrossEntropy(FakeTask(d, d), sentence_avg=False)
    # (source, target, links (source word, target word)): every target word linked
    sents = [([4, 5, 6, 2], [7, 8, 2], [(0, 1), (2, 0)]),
             ([9, 2], [4, 5, 6, 7, 2], [(0, 0), (0, 1), (0, 2), (0, 3)])]
    g = torch.Generator().manual_seed(3)
    attns = [torch.softmax(torch.randn(len(t), len(s), generator=g), -1) for s, t, _ in sents]
    singles = [float(crit(FixedAttention(a[None]), sample(
        torch.tensor([s]), torch.tensor([t]), torch.tensor([ls])))[2]["alignment_loss"])
        for (s, t, ls), a in zip(sents, attns)]
    S, T, K = 4, 5, 4
    src = torch.tensor([s + [pad] * (S - len(s)) for s, _, _ in sents])  # right-padded
    tgt = torch.tensor([[pad] * (T - len(t)) + t for _, t, _ in sents])  # left-padded
    links = torch.full((2, K, 2), -1)
    attn = torch.zeros(2, T, S)
    for b, ((s, t, ls), a) in enumerate(zip(sents, attns)):
        links[b, : len(ls)] = torch.tensor(ls)
        attn[b, T - len(t):, : len(s)] = a
    assert tgt[0, 0] == pad and tgt[0, -1] != pad  # really left-padded
    log = crit(FixedAttention(attn), sample(src, tgt, links))[2]
    assert float(log["alignment_loss"]) == pytest.approx(sum(singles), rel=1e-5)
    assert log["alignment_rows"] == 3 + 5
    assert sum(singles) > 0.1
