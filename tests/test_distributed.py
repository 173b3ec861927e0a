"""Two CPU ranks (gloo) train exactly like one process on the same total batch.

Rank r gets batches r, r+2, ... of the epoch (fairseq shards the batch list), so two
ranks with one batch each per update see the same sentences as one process with
``--update-freq 2``. With dropout off, the parameters after a few updates must agree
up to float summation order (atol 1e-5): side tensors travel with their sentences and
gradients are averaged over the ranks.
"""
import functools
import os
import socket

import pytest
import torch

from conftest import run_cli, train_args
from test_transformer_backbone import transformer_train_args

COMMON = [
    "--batch-size", "6", "--required-batch-size-multiple", "1", "--max-tokens", "100000",
    "--optimizer", "sgd", "--lr", "0.5", "--disable-validation", "--no-last-checkpoints",
    "--save-interval-updates", "3",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def final_params(save_dir):
    state = torch.load(save_dir / "checkpoint_1_3.pt", map_location="cpu")
    return state["model"]


def rnn_args(databin, save_dir, extra):
    return train_args(databin, save_dir, "attentional_rnn", updates=3,
                      extra=COMMON + ["--load-distances", *extra])


def transformer_args(arch, *options):
    """``fairseq-train`` of a tiny Transformer-family ``arch`` (dropout off) with ``options``."""
    def args(databin, save_dir, extra):
        line = transformer_train_args(databin, save_dir, updates=3, extra=[*options, *COMMON, *extra])
        line[line.index("syntax_transformer_tiny")] = arch
        return line
    return args


def train_on_two_ranks(command, save_dir):
    import subprocess

    port = free_port()
    ranks = []
    for rank in range(2):
        args = command(save_dir, [
            "--distributed-world-size", "2", "--distributed-rank", str(rank),
            "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn",
            "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
        ])
        ranks.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(os.environ, OMP_NUM_THREADS="1")))
    try:  # a rank whose peer died waits for it: never leave one running
        outputs = [p.communicate(timeout=300)[0] for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    for p, out in zip(ranks, outputs):
        assert p.returncode == 0, out[-4000:]


def assert_same_parameters(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name


def test_two_ranks_equal_one_process_with_double_batch(synthetic_databin, tmp_path):
    command = functools.partial(rnn_args, synthetic_databin)
    run_cli(command(tmp_path / "single", ["--update-freq", "2"]))
    train_on_two_ranks(command, tmp_path / "multi")
    a = final_params(tmp_path / "single")
    assert_same_parameters(a, final_params(tmp_path / "multi"))
    # the comparison can fail: one process with half the batch per update ends elsewhere
    run_cli(command(tmp_path / "half", ["--update-freq", "1"]))
    c = final_params(tmp_path / "half")
    assert not all(torch.allclose(a[n], c[n], atol=1e-5) for n in a)


TRANSFORMERS = {
    "syntax_transformer_tiny": transformer_args("syntax_transformer_tiny"),
    "pascal_transformer_tiny": transformer_args("pascal_transformer_tiny"),
    "sdatt_double_transformer_tiny": transformer_args("sdatt_double_transformer_tiny"),
    "sa_transformer_tiny": transformer_args("sa_transformer_tiny", "--sa-layers", "0,1",
                                            "--sa-heads", "2"),
    "tree2seq_transformer_tiny": transformer_args("tree2seq_transformer_tiny"),
    "supervised cross-attention": transformer_args(
        "syntax_transformer_tiny", "--criterion", "supervised_attention_cross_entropy",
        "--alignment-layer", "0", "--alignment-heads", "1"),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformer_family_two_ranks_equal_one_process(synthetic_databin, tmp_path, name):
    """Issue 17 item 3: every Transformer architecture (and the supervised criterion)
    trains on two ranks as one process with ``--update-freq 2``."""
    command = functools.partial(TRANSFORMERS[name], synthetic_databin)
    run_cli(command(tmp_path / "single", ["--update-freq", "2"]))
    train_on_two_ranks(command, tmp_path / "multi")
    assert_same_parameters(final_params(tmp_path / "single"), final_params(tmp_path / "multi"))
