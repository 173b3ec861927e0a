"""Checkpoints load under torch's safe unpickler; a pickled callable is refused, never run."""
import pickle

import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_syntax  # noqa: F401
from conftest import USER_DIR, run_cli


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        # Unpickling would call open(marker, "w"): creating the file proves the code ran.
        return (open, (self.marker, "w"))


@pytest.fixture
def crafted_checkpoint(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "cfg": None, "extra": _Payload(str(marker))}, path)
    return path, marker


def test_loader_refuses_pickled_callable(crafted_checkpoint):
    path, marker = crafted_checkpoint
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_generate_refuses_pickled_callable(crafted_checkpoint, synthetic_databin):
    path, marker = crafted_checkpoint
    proc = run_cli(
        ["fairseq-generate", str(synthetic_databin), "--user-dir", USER_DIR,
         "--task", "syntax_translation", "--path", str(path), "--cpu"],
        check=False,
    )
    assert proc.returncode != 0
    assert "UnpicklingError: Weights only load failed" in proc.stderr
    assert not marker.exists()


def test_the_experiment_harness_refuses_pickled_callable(crafted_checkpoint, tmp_path):
    """The harness's own readers (the epoch average, the training time of a record) use
    the same safe loader as fairseq's."""
    from fairseq_syntax.experiment.runs import training_seconds
    from fairseq_syntax.experiment.tools import average_checkpoints

    path, marker = crafted_checkpoint
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        average_checkpoints([str(path)], str(tmp_path / "avg.pt"))
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        training_seconds(str(path))
    assert not marker.exists() and not (tmp_path / "avg.pt").exists()
