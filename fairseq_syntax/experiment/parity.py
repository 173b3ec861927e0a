"""The learning-parity run behind ``fairseq-syntax-parity``: the backbone and fairseq's own
``lstm`` trained side by side with the same sizes, optimiser, batches, seed and budget,
decoded and scored."""
import json
import os
import shlex
import subprocess
import sys
import threading
from typing import Dict, List

from fairseq_syntax.evaluation.architectures import BACKBONE, FAIRSEQ_LSTM, task_arch_args
from fairseq_syntax.evaluation.fairseq_commands import (
    fairseq_generate_command, fairseq_train_command, rnn_size_args,
)
from fairseq_syntax.evaluation.fairseq_log import epoch_stats, read_train_log

from .corpora import prepare_corpus
from .methods import DECODING, Row
from .progress import ProgressMonitor
from .scoring import score_test_set
from .tools import (
    die_with_parent, resumable_training, shown, stamp_training, tool_env, training_budget,
    write_atomically,
)

LSTM = FAIRSEQ_LSTM


def model_args(name: str, args) -> List[str]:
    """Task, architecture and sizes of one of the two models."""
    extra = [] if name == LSTM else shlex.split(args.backbone_args)
    return [*task_arch_args(name, args.embed_dim),
            *rnn_size_args(args.embed_dim, args.encoder_hidden, args.decoder_hidden, args.dropout),
            *extra]


def train_command(name: str, databin: str, args, save: str) -> List[str]:
    budget = (["--max-epoch", str(args.epochs)] if args.epochs else []) + \
             (["--max-update", str(args.updates)] if args.updates else [])
    options = [*model_args(name, args), "--criterion", "label_smoothed_cross_entropy",
               "--label-smoothing", str(args.label_smoothing), "--optimizer", "adam",
               "--lr", str(args.lr), "--clip-norm", str(args.clip_norm),
               "--max-tokens", str(args.max_tokens), *budget]
    return fairseq_train_command(
        databin, options, save, args.seed, os.path.join(save, "train.log.jsonl"), 50,
        checkpoints=["--required-batch-size-multiple", "1",  # fairseq #5036: every valid
                     "--no-epoch-checkpoints"], after=[] if args.gpu else ["--cpu"])


def generate_command(name: str, databin: str, args, save: str, subset: str) -> List[str]:
    options = model_args(name, args)
    return fairseq_generate_command(
        databin, options[:options.index("--arch")], os.path.join(save, "checkpoint_last.pt"),
        subset, [*DECODING, *([] if args.gpu else ["--cpu"]),
                 "--required-batch-size-multiple", "1"])  # fairseq #5036: keep the last batch


def run_side_by_side(commands: Dict[str, List[str]], env, workdir: str) -> None:
    """Start every command at once (one thread each) and wait for all; raise on failure."""
    procs = {}
    parent = os.getpid()
    for name, cmd in commands.items():
        log = open(os.path.join(workdir, f"{name}.log"), "w")
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        preexec_fn=lambda: die_with_parent(parent)), log)
    failed = []
    for name, (proc, log) in procs.items():
        if proc.wait() != 0:
            failed.append(name)
        log.close()
    if failed:
        raise SystemExit(f"fairseq-syntax-parity: {', '.join(failed)} failed, see "
                         + ", ".join(os.path.join(workdir, f"{n}.log") for n in failed))


def parity(args) -> dict:
    """Train (unless done), decode and score both models; returns the summary."""
    os.makedirs(args.workdir, exist_ok=True)
    corpus = prepare_corpus(args)
    env = tool_env(1)
    saves = {name: os.path.join(args.workdir, name) for name in (LSTM, BACKBONE)}
    commands = {name: train_command(name, corpus.databin, args, save) for name, save in saves.items()}
    todo = {name: cmd for name, cmd in commands.items()
            if not (resumable_training(saves[name], shown(cmd)) or {}).get("done")}
    if todo:
        print(f"training {', '.join(todo)} side by side ...", file=sys.stderr, flush=True)
        progress = ProgressMonitor(threading.Lock())  # a [progress] line per model
        for name, cmd in todo.items():
            progress.add(name, os.path.join(saves[name], "train.log.jsonl"), training_budget(cmd))
        progress.start()
        try:
            run_side_by_side(todo, env, args.workdir)
        finally:
            progress.stop()
        for name in todo:
            stamp_training(saves[name], shown(commands[name]), done=True)
    tests = [] if args.no_decode else corpus.test_sets
    generates = {f"{name}.{t.name}": generate_command(name, corpus.databin, args, saves[name], t.subset)
                 for name in saves for t in tests}
    print("decoding ...", file=sys.stderr, flush=True)
    outs = {}
    for key, cmd in generates.items():
        outs[key] = os.path.join(args.workdir, f"generate.{key}.out")
        with open(outs[key], "w") as out:
            subprocess.run(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, check=True)
    summary = {"commands": {n: shlex.join(c) for n, c in commands.items()}, "models": {}}
    for name, save in saves.items():
        row = Row(name, name)
        for t in tests:
            score_test_set(row, corpus, t, outs[f"{name}.{t.name}"],
                           os.path.join(args.workdir, f"{name}.{t.name}"))
        epochs = epoch_stats(os.path.join(save, "train.log.jsonl"))
        wps = [e["train_wps"] for e in epochs.values() if "train_wps" in e]
        summary["models"][name] = {
            "epochs": epochs, "train_wps": sum(wps) / len(wps) if wps else None,
            "updates": read_train_log(os.path.join(save, "train.log.jsonl"))["train_updates"],
            "scores": {k: v for k, v in vars(row).items()
                       if v not in (None, "", {}) and k != "hypotheses"},
        }
    write_atomically(os.path.join(args.workdir, "parity.json"), json.dumps(summary, indent=1) + "\n")
    return summary


def markdown(summary: dict) -> str:
    lstm, rnn = summary["models"][LSTM], summary["models"][BACKBONE]
    lines = ["| after epoch | fairseq lstm, valid ppl | attentional_rnn, valid ppl |",
             "| --- | ---: | ---: |"]
    for epoch in sorted(set(lstm["epochs"]) | set(rnn["epochs"]), key=int):
        cells = [m["epochs"].get(epoch, {}).get("valid_ppl") for m in (lstm, rnn)]
        lines.append(f"| {epoch} | " + " | ".join("–" if c is None else f"{c:.2f}" for c in cells) + " |")
    ratio = rnn["train_wps"] / lstm["train_wps"] if lstm["train_wps"] and rnn["train_wps"] else None
    lines += ["", "| | fairseq lstm | attentional_rnn | ratio |", "| --- | ---: | ---: | ---: |",
              f"| training words/s | {lstm['train_wps']:.0f} | {rnn['train_wps']:.0f} | "
              f"{'–' if ratio is None else f'{ratio:.2f}'} |"]
    for test, scores in rnn["scores"].get("tests", {}).items():
        for key in ("bleu", "chrf", "agreement", "agreement_long"):
            a = lstm["scores"].get("tests", {}).get(test, {}).get(key)
            b = scores.get(key)
            if a is not None or b is not None:
                lines.append(f"| {test} {key.replace('_', ' ')} | "
                             f"{'–' if a is None else f'{a:.2f}'} | "
                             f"{'–' if b is None else f'{b:.2f}'} | |")
    if "bleu_signature" in rnn["scores"]:
        lines.append(f"\nBLEU signature: `{rnn['scores']['bleu_signature']}`")
    return "\n".join(lines) + "\n"
