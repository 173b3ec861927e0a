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
import sys
from typing import List

from fairseq_syntax.evaluation.architectures import BACKBONE, rnn_architectures
from fairseq_syntax.evaluation.throughput import (
    CRITERION_RUNS, Throughput, benchmark_run, loading_markdown, loading_timing, markdown,
)
from fairseq_syntax.experiment.corpora import build_synthetic
from fairseq_syntax.syntax.text_io import atomic_text_file


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
    databin = args.data_bin or os.path.join(args.workdir, "data-bin")
    if not args.data_bin and not os.path.exists(os.path.join(databin, "syntax_manifest.json")):
        build_synthetic(os.path.join(args.workdir, "raw"), databin,
                        os.path.join(args.workdir, "prepare.log"), 1000, (4000, 100, 200, 500))
    rows = [] if args.loading_only else throughput_rows(args, databin)
    tables = [markdown(rows, args.updates, args.max_tokens, args.embed_dim, args.encoder_hidden,
                       args.decoder_hidden)] if rows else []
    table = "\n".join(tables + [loading_markdown(loading_timing(databin))])
    print(table)
    if args.out:
        with atomic_text_file(args.out) as f:
            f.write(table)
    return 0 if not any(r.error for r in rows) else 1


def throughput_rows(args, databin: str) -> List[Throughput]:
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
        rows.append(benchmark_run(label, arch, extra, databin, args.workdir, args.updates,
                                  args.max_tokens, args.embed_dim, args.encoder_hidden,
                                  args.decoder_hidden, args.cpu))
    return rows


if __name__ == "__main__":
    sys.exit(main())
