"""Two CPU ranks (gloo) train exactly like one process on the same total batch.

Rank r gets batches r, r+2, ... of the epoch (fairseq shards the batch list), so two
ranks with one batch each per update see the same sentences as one process with
``--update-freq 2``. With dropout off, the parameters after a few updates must agree
up to float summation order (atol 1e-5): side tensors travel with their sentences and
gradients are averaged over the ranks.
"""
import socket

import torch

from conftest import run_cli, train_args

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


def test_two_ranks_equal_one_process_with_double_batch(synthetic_databin, tmp_path):
    import subprocess

    arch = "attentional_rnn"
    single = tmp_path / "single"
    run_cli(train_args(synthetic_databin, single, arch, updates=3,
                       extra=COMMON + ["--update-freq", "2", "--load-distances"]))

    multi = tmp_path / "multi"
    port = free_port()
    ranks = []
    for rank in range(2):
        args = train_args(synthetic_databin, multi, arch, updates=3, extra=COMMON + [
            "--load-distances", "--distributed-world-size", "2", "--distributed-rank", str(rank),
            "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn",
            "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
        ])
        ranks.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in ranks]
    for p, out in zip(ranks, outputs):
        assert p.returncode == 0, out[-4000:]

    a, b = final_params(single), final_params(multi)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name
    # the comparison can fail: one process with half the batch per update ends elsewhere
    half = tmp_path / "half"
    run_cli(train_args(synthetic_databin, half, arch, updates=3,
                       extra=COMMON + ["--update-freq", "1", "--load-distances"]))
    c = final_params(half)
    assert not all(torch.allclose(a[n], c[n], atol=1e-5) for n in a)
