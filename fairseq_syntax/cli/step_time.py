"""``fairseq-syntax-step-time``: training step time of several models on the same batches.

Builds every run's task, model, criterion and Adam optimiser from fairseq's own
training command line, collates the same training batches for each (``--max-tokens``,
shuffled with a fixed seed) and times forward + backward + optimiser step of every
run on every batch, round-robin, in one process: runs see the same machine state,
so the ratios to the first run hold under a load that whole ``fairseq-train`` runs
(``fairseq-syntax-benchmark``) would feel unequally. The first round is a warm-up and
is not counted. Process CPU time and wall time are both reported.

A run is ``ARCH`` or ``ARCH+CRITERION`` (default criterion ``cross_entropy``);
``--model-args`` are given to every run (default: the Multi30k recipe's sizes). ``lstm`` and
``transformer`` are fairseq's own (``--task translation``), the lstm built as
``fairseq-syntax-parity`` trains it (``--encoder-bidirectional --decoder-out-embed-dim`` = the
decoder embedding size).

Examples: ``fairseq-syntax-step-time data-bin --runs attentional_rnn,tree2seq``;
``--runs lstm+label_smoothed_cross_entropy,attentional_rnn+label_smoothed_cross_entropy``
(the backbone against fairseq's lstm: the inverse ratio is the words/s ratio).
"""
import argparse
import json
import shlex
from typing import Dict

from fairseq_syntax.evaluation.step_time import RECIPE_SIZES, measure, per_step
from fairseq_syntax.syntax.text_io import atomic_text_file


def markdown(totals: Dict[str, Dict[str, float]], steps: int) -> str:
    lines = ["| run | CPU s / step | ratio | wall s / step | ratio |", "| --- | ---: | ---: | ---: | ---: |"]
    for spec, t in per_step(totals, steps).items():
        lines.append(f"| {spec} | {t['cpu_per_step']:.3f} | {t['cpu_ratio']:.2f} | "
                     f"{t['wall_per_step']:.3f} | {t['wall_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def get_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("data_bin", help="a data-bin made by fairseq-syntax-preprocess")
    p.add_argument("--runs", default="attentional_rnn,tree2seq",
                   help="comma-separated ARCH or ARCH+CRITERION; ratios are to the first")
    p.add_argument("--model-args", default=RECIPE_SIZES,
                   help="fairseq-train model options given to every run")
    p.add_argument("--batches", type=int, default=8, help="training batches per round")
    p.add_argument("--rounds", type=int, default=2, help="counted rounds (one warm-up round more)")
    p.add_argument("--max-tokens", type=int, default=4000, help="tokens per batch")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", metavar="FILE", help="also write the seconds per step of every "
                   "run and the ratios to the first as JSON")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    specs = args.runs.split(",")
    totals = measure(args.data_bin, specs, shlex.split(args.model_args), args.batches,
                     args.rounds, args.max_tokens)
    print(f"{args.batches} batches of at most {args.max_tokens} tokens x {args.rounds} rounds, "
          f"{args.threads} thread(s), model args: {args.model_args}\n")
    print(markdown(totals, args.batches * args.rounds))
    if args.json:
        with atomic_text_file(args.json) as f:
            json.dump(per_step(totals, args.batches * args.rounds), f, indent=1)


if __name__ == "__main__":
    main()
