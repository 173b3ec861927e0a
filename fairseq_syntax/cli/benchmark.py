"""``fairseq-syntax-benchmark``: throughput of every architecture against the backbone.

In one process sequence, on one data-bin and with one set of model sizes, it trains
every registered architecture of the plugin (plus fairseq's own ``lstm`` and the
backbone under the plugin's criterions) for a fixed number of updates with the real
``fairseq-train``, decodes a fixed set of test sentences with ``fairseq-generate
--beam 5``, and prints a Markdown table: training target words per second (fairseq's
own ``wps`` of the last training log line), peak resident memory of the training
process, decoding sentences per second (fairseq-generate's own figure, model loading
excluded) and target tokens per second (less sensitive than sentences/s to how long
the barely trained models' hypotheses are), each as a ratio to ``attentional_rnn``
measured in the same run. It also times data loading (the collater, and the DataLoader's
whole work per batch) of the syntax dataset against fairseq's plain ``LanguagePairDataset``
on the same batches: with every side input, and with each mechanism's own.

Without ``--data-bin`` it builds one from the embedded synthetic corpus.
Example: ``fairseq-syntax-benchmark --workdir bench --updates 60 --out bench.md``; with
``--loading-only`` it times the data loading alone.
"""
import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from fairseq_syntax.data.synthetic_corpus import generate_corpus
from fairseq_syntax.user_dir import user_dir

BACKBONE = "attentional_rnn"
# Runs that are not an architecture of their own: (label, arch, extra fairseq-train args).
CRITERION_RUNS = [
    ("attentional_rnn + supervised_attention", BACKBONE,
     ["--criterion", "supervised_attention_cross_entropy"]),
    ("attentional_rnn + blackout", BACKBONE, ["--criterion", "blackout"]),
]


@dataclass
class Row:
    label: str
    train_wps: Optional[float] = None
    peak_rss_mb: Optional[float] = None
    decode_sps: Optional[float] = None
    decode_tps: Optional[float] = None
    error: str = ""


def plugin_architectures() -> List[str]:
    """Registered architectures of the plugin, one per name (a model's own name is
    skipped when it also has named architectures)."""
    import fairseq_syntax  # noqa: F401
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    archs = [a for a, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("fairseq_syntax")]
    named = {ARCH_MODEL_REGISTRY[a] for a in archs if a not in MODEL_REGISTRY}
    archs = [a for a in archs if a not in MODEL_REGISTRY or MODEL_REGISTRY[a] not in named]
    return sorted(archs, key=lambda a: (a != BACKBONE, a))


def rnn_architectures() -> List[str]:
    """The architectures built on the RNN backbone (they take its size options), backbone
    first; the Transformer family has its own sizes."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_syntax.models.attentional_rnn import AttentionalRNNModel

    return [a for a in plugin_architectures()
            if issubclass(ARCH_MODEL_REGISTRY[a], AttentionalRNNModel)]


def transformer_architectures() -> List[str]:
    """The architectures of the Transformer family (models built on ``syntax_transformer``),
    one per mechanism, backbone first: an architecture whose name is another one's of the
    same model plus a suffix (``_tiny``, ``_iwslt_de_en``) is that one's size preset and is
    left out (a caller gives the sizes)."""
    import fairseq_syntax  # noqa: F401
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_syntax.models.syntax_transformer import SyntaxTransformerModel

    archs = [a for a, cls in ARCH_MODEL_REGISTRY.items()
             if cls.__module__.startswith("fairseq_syntax") and issubclass(cls, SyntaxTransformerModel)]
    presets = {a for a in archs for b in archs
               if a.startswith(b + "_") and ARCH_MODEL_REGISTRY[a] is ARCH_MODEL_REGISTRY[b]}
    return sorted((a for a in archs if a not in presets),
                  key=lambda a: (a != "syntax_transformer", a))


def size_args(args, fairseq_lstm: bool) -> List[str]:
    e, h, d = str(args.embed_dim), str(args.encoder_hidden), str(args.decoder_hidden)
    common = ["--encoder-embed-dim", e, "--decoder-embed-dim", e, "--dropout", "0.1"]
    if fairseq_lstm:  # fairseq's lstm: same BiLSTM encoder and decoder sizes, left-padded source
        return common + ["--encoder-hidden-size", h, "--encoder-bidirectional",
                         "--decoder-hidden-size", d, "--decoder-out-embed-dim", e]
    return common + ["--encoder-hidden-size", h, "--decoder-hidden-size", d]


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
    from fairseq_syntax.cli.parity import epoch_stats

    wps = [e["train_wps"] for _, e in sorted(epoch_stats(log_file).items()) if "train_wps" in e]
    return wps[-1] if wps else None


# fairseq-generate's own summary line, its only report of decoding speed
_GENERATE_SPEED = re.compile(r"Translated [\d,]+ sentences \([\d,]+ tokens\) in [\d.]+s "
                             r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


def decode_speed(text: str) -> Tuple[Optional[float], Optional[float]]:
    """(sentences/s, tokens/s) of fairseq-generate's summary line in ``text``."""
    found = _GENERATE_SPEED.findall(text)
    return (float(found[-1][0]), float(found[-1][1])) if found else (None, None)


def benchmark_run(label, arch, extra, args, databin, workdir) -> Row:
    row = Row(label)
    save = os.path.join(workdir, re.sub(r"\W+", "_", label))
    lstm = arch == "lstm"
    # fairseq's lstm saves argparse.Namespace in its checkpoints: --user-dir lets the safe
    # loader read them; the task stays fairseq's own translation task.
    task = ["--user-dir", user_dir(), "--task", "translation" if lstm else "syntax_translation"]
    train = ["fairseq-train", databin, *task, "--arch", arch, *size_args(args, lstm),
             "--optimizer", "adam", "--lr", "0.002", "--max-tokens", str(args.max_tokens),
             "--max-update", str(args.updates), "--seed", "1", "--save-dir", save,
             "--no-epoch-checkpoints", "--no-progress-bar", "--log-format", "json",
             "--log-file", save + ".train.jsonl",
             "--log-interval", str(max(1, args.updates // 4)), "--disable-validation",
             *(["--cpu"] if args.cpu else []), *extra]
    if os.path.exists(save + ".train.jsonl"):  # fairseq appends to its --log-file
        os.remove(save + ".train.jsonl")
    code, rss, _ = run_measured(train, save + ".train.log")
    if code != 0:
        row.error = f"fairseq-train failed, see {save}.train.log"
        return row
    row.train_wps = last_train_wps(save + ".train.jsonl")
    row.peak_rss_mb = rss
    generate = ["fairseq-generate", databin, *task, "--path", os.path.join(save, "checkpoint_last.pt"),
                "--gen-subset", "test", "--beam", "5", "--batch-size", "32",
                "--max-len-b", "60", "--quiet", *(["--cpu"] if args.cpu else [])]
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

    import fairseq_syntax  # noqa: F401
    from fairseq import tasks

    from fairseq_syntax.cli import training_config

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


def synthetic_databin(workdir: str) -> str:
    raw, databin = os.path.join(workdir, "raw"), os.path.join(workdir, "data-bin")
    if not os.path.exists(os.path.join(databin, "dict.en.txt")):
        generate_corpus(raw, train=4000, valid=100, test=200)
        subprocess.run(["fairseq-syntax-preprocess", "-s", "en", "-t", "vf",
                        "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                        "--testpref", f"{raw}/test", "--align-suffix", "align",
                        "--vocab-size", "1000", "--destdir", databin, "--force"], check=True)
    return databin


def ratio(value, base) -> str:
    return f"{value / base:.2f}" if value and base else "–"


def markdown(rows: List[Row], args) -> str:
    """The throughput table, every ratio to the first row (the backbone)."""
    base = rows[0]
    lines = [
        f"Throughput, {args.updates} updates of at most {args.max_tokens} tokens, embed "
        f"{args.embed_dim}, encoder {args.encoder_hidden}x2, decoder {args.decoder_hidden}; "
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


def get_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workdir", required=True, help="folder for the data-bin, checkpoints and logs")
    p.add_argument("--data-bin", help="an existing data-bin made by fairseq-syntax-preprocess "
                   "(with trees and alignments); default: build one from the synthetic corpus")
    p.add_argument("--archs", default="all", help="comma-separated architectures, or "
                   "'all' (every architecture on the RNN backbone)")
    p.add_argument("--updates", type=int, default=60, help="training updates per architecture")
    p.add_argument("--max-tokens", type=int, default=2000, help="tokens per training batch")
    p.add_argument("--embed-dim", type=int, default=128, help="source and target embedding size")
    p.add_argument("--encoder-hidden", type=int, default=128, help="encoder LSTM size per direction")
    p.add_argument("--decoder-hidden", type=int, default=256, help="decoder LSTM size")
    p.add_argument("--no-fairseq-lstm", action="store_true", help="skip fairseq's own lstm row")
    p.add_argument("--no-criterions", action="store_true", help="skip the criterion rows")
    p.add_argument("--gpu", dest="cpu", action="store_false", help="run on the GPU (default: CPU)")
    p.add_argument("--loading-only", action="store_true", help="only time data loading (the "
                   "syntax collater against fairseq's), training nothing")
    p.add_argument("--out", help="also write the Markdown table to this file")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    databin = args.data_bin or synthetic_databin(args.workdir)
    rows = [] if args.loading_only else throughput_rows(args, databin)
    tables = [markdown(rows, args)] if rows else []
    table = "\n".join(tables + [loading_markdown(loading_timing(databin))])
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    return 0 if not any(r.error for r in rows) else 1


def throughput_rows(args, databin: str) -> List[Row]:
    """Train and decode the backbone, the chosen architectures, the criterion runs and
    fairseq's lstm, one after the other."""
    archs = rnn_architectures() if args.archs == "all" else args.archs.split(",")
    if BACKBONE in archs:
        archs.remove(BACKBONE)
    runs = [(BACKBONE, BACKBONE, [])] + [(a, a, []) for a in archs]
    if not args.no_criterions:
        runs += CRITERION_RUNS
    if not args.no_fairseq_lstm:
        runs.append(("lstm (fairseq's own)", "lstm", []))
    rows = []
    for i, (label, arch, extra) in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {label}", file=sys.stderr, flush=True)
        rows.append(benchmark_run(label, arch, extra, args, databin, args.workdir))
    return rows


if __name__ == "__main__":
    sys.exit(main())
