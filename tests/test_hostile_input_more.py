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

import numpy as np
import pytest
import torch

from conftest import USER_DIR, generate_args, run_cli, train_args

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


def _run_in_process(argv, capsys):
    """``main(argv)``; returns (exit code, stderr)."""
    from fairseq_syntax_preprocess.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as err:
        code = err.code
    return code, capsys.readouterr().err


def _appear_during_the_run(monkeypatch, folder, files):
    """Make ``folder`` (holding ``files``) appear while the run writes its side-files."""
    from fairseq_syntax_preprocess import pipeline

    write = pipeline.write_side_files

    def write_then_appear(*args, **kwargs):
        write(*args, **kwargs)
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")

    monkeypatch.setattr(pipeline, "write_side_files", write_then_appear)


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
