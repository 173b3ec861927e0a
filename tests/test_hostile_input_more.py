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
