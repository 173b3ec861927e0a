"""Training step time of several models on the same batches, in one process (forward,
backward and optimiser step, round-robin; process CPU and wall seconds)."""
import random
import sys
import time
from typing import Dict, List

from fairseq_syntax.user_dir import user_dir

from .architectures import task_arch_args
from .checkpoints import training_config

RECIPE_SIZES = ("--encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-hidden-size 256 "
                "--decoder-hidden-size 512 --dropout 0.3")


def build_run(databin: str, spec: str, model_args: List[str]):
    """(task, model, criterion, optimizer) of ``ARCH[+CRITERION]`` as fairseq-train builds them."""
    import torch
    from fairseq import tasks


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
