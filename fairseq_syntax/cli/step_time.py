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
import random
import shlex
import sys
import time
from typing import Dict, List

from fairseq_syntax.user_dir import user_dir

RECIPE_SIZES = ("--encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-hidden-size 256 "
                "--decoder-hidden-size 512 --dropout 0.3")


def build_run(databin: str, spec: str, model_args: List[str]):
    """(task, model, criterion, optimizer) of ``ARCH[+CRITERION]`` as fairseq-train builds them."""
    import torch
    from fairseq import tasks

    from fairseq_syntax.cli import task_arch_args, training_config

    arch, _, criterion = spec.partition("+")
    sizes = dict(zip(model_args, model_args[1:]))
    task_arch = task_arch_args(arch, sizes.get("--decoder-embed-dim", 512))
    argv = [databin, "--user-dir", user_dir(), *task_arch, *model_args,
            "--criterion", criterion or "cross_entropy", "--cpu"]
    cfg = training_config(argv)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return task, model, task.build_criterion(cfg.criterion), torch.optim.Adam(model.parameters(), lr=1e-3)


def measure(databin: str, specs: List[str], model_args: List[str], batches: int, rounds: int,
            max_tokens: int, seed: int = 1) -> Dict[str, Dict[str, float]]:
    """Seconds (``cpu``, ``wall``) per run over ``rounds`` counted rounds of ``batches`` batches."""
    import torch

    torch.manual_seed(seed)
    runs = {spec: build_run(databin, spec, model_args) for spec in specs}
    for task, *_ in runs.values():
        task.load_dataset("train")
    first = runs[specs[0]][0].dataset("train")
    chosen = first.batch_by_size(first.ordered_indices(), max_tokens=max_tokens)
    random.Random(seed).shuffle(chosen)
    chosen = chosen[:batches]
    samples = {}
    for spec, (task, *_) in runs.items():
        dataset = task.dataset("train")
        samples[spec] = [dataset.collater([dataset[i] for i in batch]) for batch in chosen]
    totals = {spec: {"cpu": 0.0, "wall": 0.0} for spec in specs}
    for round_ in range(rounds + 1):
        print(f"round {round_}/{rounds}{' (warm-up)' if round_ == 0 else ''}", file=sys.stderr, flush=True)
        for i in range(len(chosen)):
            for spec, (_, model, criterion, optimizer) in runs.items():
                model.train()
                wall, cpu = time.perf_counter(), time.process_time()
                loss, _, _ = criterion(model, samples[spec][i])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if round_:
                    totals[spec]["cpu"] += time.process_time() - cpu
                    totals[spec]["wall"] += time.perf_counter() - wall
    return totals


def per_step(totals: Dict[str, Dict[str, float]], steps: int) -> Dict[str, Dict[str, float]]:
    """Seconds per step of every run and its ratios to the first run (the ``--json`` file)."""
    base = next(iter(totals.values()))
    return {spec: {"cpu_per_step": t["cpu"] / steps, "wall_per_step": t["wall"] / steps,
                   "cpu_ratio": t["cpu"] / base["cpu"], "wall_ratio": t["wall"] / base["wall"]}
            for spec, t in totals.items()}


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
        with open(args.json, "w") as f:
            json.dump(per_step(totals, args.batches * args.rounds), f, indent=1)


if __name__ == "__main__":
    main()
