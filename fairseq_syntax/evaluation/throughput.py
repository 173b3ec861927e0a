"""Throughput of architectures against the backbone (``fairseq-syntax-benchmark``):
training words/s and peak memory of the real ``fairseq-train``, decoding speed of
``fairseq-generate``, and data loading of the syntax dataset against fairseq's own."""
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .architectures import BACKBONE, task_arch_args
from .checkpoints import training_config
from .fairseq_commands import fairseq_generate_command, fairseq_train_command, rnn_size_args
from .fairseq_log import epoch_stats


# Runs that are not an architecture of their own: (label, arch, extra fairseq-train args).
CRITERION_RUNS = [
    ("attentional_rnn + supervised_attention", BACKBONE,
     ["--criterion", "supervised_attention_cross_entropy"]),
    ("attentional_rnn + blackout", BACKBONE, ["--criterion", "blackout"]),
]


@dataclass
class Throughput:
    """One architecture's row of the throughput table."""

    label: str
    train_wps: Optional[float] = None
    peak_rss_mb: Optional[float] = None
    decode_sps: Optional[float] = None
    decode_tps: Optional[float] = None
    error: str = ""


def run_measured(cmd: List[str], log_path: str):
    """Run ``cmd`` with output to ``log_path``; return (exit code, peak RSS in MB, text)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONWARNINGS="ignore"))
        _, status, usage = os.wait4(proc.pid, 0)
    with open(log_path) as log:
        text = log.read()
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024.0, text


def last_train_wps(log_file: str) -> Optional[float]:
    """fairseq's ``train_wps`` of the last epoch, from fairseq-train's JSON ``--log-file``."""
    wps = [e["train_wps"] for _, e in sorted(epoch_stats(log_file).items()) if "train_wps" in e]
    return wps[-1] if wps else None


# fairseq-generate's own summary line, its only report of decoding speed
_GENERATE_SPEED = re.compile(r"Translated [\d,]+ sentences \([\d,]+ tokens\) in [\d.]+s "
                             r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


def decode_speed(text: str) -> Tuple[Optional[float], Optional[float]]:
    """(sentences/s, tokens/s) of fairseq-generate's summary line in ``text``."""
    found = _GENERATE_SPEED.findall(text)
    return (float(found[-1][0]), float(found[-1][1])) if found else (None, None)


def benchmark_run(label: str, arch: str, extra: Sequence[str], databin: str, workdir: str,
                  updates: int, max_tokens: int, embed_dim: int, encoder_hidden: int,
                  decoder_hidden: int, cpu: bool = True) -> Throughput:
    """Train ``arch`` for ``updates`` updates (``extra``: more fairseq-train options) and
    decode the test split with beam 5; fairseq's own speeds and the peak memory."""
    row = Throughput(label)
    save = os.path.join(workdir, re.sub(r"\W+", "_", label))
    # fairseq's lstm saves argparse.Namespace in its checkpoints: --user-dir lets the safe
    # loader read them; the task stays fairseq's own translation task.
    task_arch = task_arch_args(arch, embed_dim)
    device = ["--cpu"] if cpu else []
    options = [*task_arch, *rnn_size_args(embed_dim, encoder_hidden, decoder_hidden, 0.1),
               "--optimizer", "adam", "--lr", "0.002", "--max-tokens", str(max_tokens),
               "--max-update", str(updates)]
    train = fairseq_train_command(databin, options, save, 1, save + ".train.jsonl",
                                  max(1, updates // 4), workers=False,
                                  after=["--disable-validation", *device, *extra])
    # afresh: fairseq-train would resume an earlier run's checkpoint and append to its log
    shutil.rmtree(save, ignore_errors=True)
    if os.path.exists(save + ".train.jsonl"):
        os.remove(save + ".train.jsonl")
    code, rss, _ = run_measured(train, save + ".train.log")
    if code != 0:
        row.error = f"fairseq-train failed, see {save}.train.log"
        return row
    row.train_wps = last_train_wps(save + ".train.jsonl")
    row.peak_rss_mb = rss
    generate = fairseq_generate_command(
        databin, task_arch[:task_arch.index("--arch")], os.path.join(save, "checkpoint_last.pt"),
        "test", ["--beam", "5", "--batch-size", "32", "--max-len-b", "60", "--quiet", *device])
    code, _, text = run_measured(generate, save + ".generate.log")
    if code != 0:
        row.error = f"fairseq-generate failed, see {save}.generate.log"
        return row
    row.decode_sps, row.decode_tps = decode_speed(text)
    return row


# The data-loading rows: what the syntax dataset loads (the options of a run that reads
# it: the supervised criterion reads the alignments), and whether fairseq's own dataset,
# the row's baseline, loads alignments too.
SUPERVISED = ["--criterion", "supervised_attention_cross_entropy"]
LOADING_ROWS = [
    ("heads, distances, trees, alignments (supervised criterion)",
     ["--load-distances", "--load-tree", *SUPERVISED], True),
    ("distances (SDAtt)", ["--load-distances"], False),
    ("trees (Tree-to-Sequence)", ["--load-tree"], False),
    ("alignments (supervised criterion)", SUPERVISED, True),
]


@dataclass
class LoadingRow:
    label: str  # what the syntax dataset loads
    alignments: bool  # fairseq's dataset loads alignments too
    fairseq: Dict[str, float]  # CPU ms per batch: {"collater", "loader"}
    syntax: Dict[str, float]


def loading_timing(databin: str, repeats: int = 3) -> List[LoadingRow]:
    """CPU milliseconds per train batch (4000 tokens) of the syntax dataset, for each of
    :data:`LOADING_ROWS`, and of fairseq's plain ``LanguagePairDataset`` on the same batches:
    the collater, and the DataLoader's whole work per batch ("loader": ``dataset[i]`` for each
    sentence, then the collater; the syntax collater reads the side-file rows that a dataset
    would read in ``__getitem__``, so "loader" compares the same work). Batch by batch
    alternating; process CPU time (robust to a loaded machine with one thread); garbage
    collection off while timing, as in ``timeit``."""
    import gc

    import fairseq_syntax.plugin  # noqa: F401
    from fairseq import tasks

    def train_dataset(*options):  # built as fairseq-train builds it: criterion first
        cfg = training_config([databin, "--arch", "lstm", *options])
        task = tasks.setup_task(cfg.task)
        task.build_criterion(cfg.criterion)
        task.load_dataset("train")
        return task.dataset("train")

    plain = [train_dataset("--task", "translation", *(["--load-alignments"] if align else []))
             for align in (False, True)]
    syntax = [train_dataset("--task", "syntax_translation", *options) for _, options, _ in LOADING_ROWS]
    timed = plain + syntax
    batches = syntax[0].batch_by_size(syntax[0].ordered_indices(), max_tokens=4000)
    seconds = np.zeros((len(timed), 2))  # dataset[i], collater
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            for batch in batches:
                for k, ds in enumerate(timed):
                    start = time.process_time()
                    samples = [ds[i] for i in batch]
                    middle = time.process_time()
                    ds.collater(samples)
                    seconds[k] += (middle - start, time.process_time() - middle)
        finally:
            gc.enable()
    ms = [{"collater": c, "loader": i + c}
          for i, c in 1000 * seconds / (repeats * len(batches))]
    return [LoadingRow(label, align, ms[int(align)], ms[len(plain) + k])
            for k, (label, _, align) in enumerate(LOADING_ROWS)]


def ratio(value, base) -> str:
    return f"{value / base:.2f}" if value and base else "–"


def markdown(rows: List[Throughput], updates: int, max_tokens: int, embed_dim: int,
             encoder_hidden: int, decoder_hidden: int) -> str:
    """The throughput table, every ratio to the first row (the backbone)."""
    base = rows[0]
    lines = [
        f"Throughput, {updates} updates of at most {max_tokens} tokens, embed "
        f"{embed_dim}, encoder {encoder_hidden}x2, decoder {decoder_hidden}; "
        f"decoding: test split, beam 5, batch 32 (short training: hypothesis "
        f"lengths differ between models, so compare tokens/s). Ratios are to `{BACKBONE}` in the same run.",
        "",
        "| architecture | train wps | ratio | peak RSS (MB) | ratio | decode sent/s | ratio "
        "| decode tokens/s | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.label} | {r.error} | | | | | | | |")
            continue
        lines.append(
            f"| {r.label} | {r.train_wps:.0f} | {ratio(r.train_wps, base.train_wps)} | "
            f"{r.peak_rss_mb:.0f} | {ratio(r.peak_rss_mb, base.peak_rss_mb)} | "
            f"{r.decode_sps:.1f} | {ratio(r.decode_sps, base.decode_sps)} | "
            f"{r.decode_tps:.0f} | {ratio(r.decode_tps, base.decode_tps)} |"
        )
    return "\n".join(lines) + "\n"


def loading_markdown(rows: List[LoadingRow]) -> str:
    """The data-loading table of :func:`loading_timing`, ratios to fairseq's dataset."""
    lines = [
        "Data loading, CPU ms per train batch of 4000 tokens (fairseq's dataset / the syntax "
        "dataset): the collater, and `dataset[i]` for each sentence then the collater.",
        "",
        "| syntax dataset loads | fairseq's LanguagePairDataset | collater | ratio "
        "| `dataset[i]` + collater | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        cells = [f"{r.fairseq[part]:.2f} / {r.syntax[part]:.2f} | {ratio(r.syntax[part], r.fairseq[part])}"
                 for part in ("collater", "loader")]
        baseline = "with alignments" if r.alignments else "tokens only"
        lines.append(f"| {r.label} | {baseline} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"
