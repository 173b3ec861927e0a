"""The command lines of one run (``fairseq-train``, ``fairseq-generate``) and the settings
that define it, from the method and the experiment's options."""
import os
from typing import List

from fairseq_syntax.evaluation.architectures import task_arch_args
from fairseq_syntax.evaluation.corpus import Corpus
from fairseq_syntax.evaluation.fairseq_commands import (
    fairseq_generate_command, fairseq_train_command, rnn_size_args,
)

from .methods import DECODING, Method


def criterion_args(method: Method, args) -> List[str]:
    smoothing = [] if method.criterion == "blackout" else \
        ["--label-smoothing", str(label_smoothing_of(method, args))]
    return ["--criterion", method.criterion, *smoothing]


def label_smoothing_of(method: Method, args) -> float:
    return args.transformer["label_smoothing"] if method.family == "transformer" \
        else args.label_smoothing


def transformer_size_args(recipe: dict) -> List[str]:
    """The recipe's sizes as options of fairseq's Transformer (every size given, so any
    base architecture of the family builds the same shape)."""
    out = []
    for side in ("encoder", "decoder"):
        out += [f"--{side}-embed-dim", str(recipe["embed_dim"]),
                f"--{side}-ffn-embed-dim", str(recipe["ffn_dim"]),
                f"--{side}-layers", str(recipe["layers"]),
                f"--{side}-attention-heads", str(recipe["heads"])]
    if recipe["normalize_before"]:
        out += ["--encoder-normalize-before", "--decoder-normalize-before"]
    return out + ["--dropout", str(recipe["dropout"]),
                  "--attention-dropout", str(recipe["attention_dropout"]),
                  "--share-decoder-input-output-embed"]


def alignment_head_args(recipe: dict) -> List[str]:
    """The supervised head: the first ``alignment_heads`` heads of the second-to-last decoder
    layer (fairseq's transformer_align default, layer 4 of 6), the bottom one of 2 layers."""
    return ["--alignment-layer", str(max(0, recipe["layers"] - 2)),
            "--alignment-heads", str(recipe["alignment_heads"])]


def transformer_model_args(method: Method, recipe: dict) -> List[str]:
    """What the recipe gives the model of ``method``: sizes and, for a supervised method,
    its alignment head."""
    return [*transformer_size_args(recipe),
            *(alignment_head_args(recipe) if method.alignment_head else [])]


def transformer_train_command(method: Method, corpus: Corpus, args, save: str,
                              seed: int) -> List[str]:
    r = args.transformer
    interval = max(1, r["updates"] // 10) if r["updates"] else 100
    budget = [*(["--max-update", str(r["updates"])] if r["updates"] else []),
              *(["--max-epoch", str(r["epochs"])] if r["epochs"] else []),
              *(["--stop-time-hours", str(args.max_minutes / 60)] if args.max_minutes else [])]
    options = [
        "--task", method.task, *method.train_args, "--arch", method.arch, *method.model_args,
        *transformer_model_args(method, r), *criterion_args(method, args),
        "--optimizer", "adam", "--adam-betas", r["adam_betas"], "--lr", str(r["lr"]),
        *schedule_args(r), "--weight-decay", str(r["weight_decay"]),
        "--clip-norm", str(r["clip_norm"]), "--max-tokens", str(r["max_tokens"]), *budget,
    ]
    return fairseq_train_command(
        corpus.databin, options, save, seed, os.path.join(save, "train.log.jsonl"), interval,
        checkpoints=(["--keep-last-epochs", str(r["average_last"])] if r["average_last"]
                     else ["--no-epoch-checkpoints"]), after=device_args(args))


def schedule_args(recipe: dict) -> List[str]:
    """The recipe's learning-rate schedule: linear warm-up, then inverse-sqrt decay, or a
    linear decay to 0 at the last update (``linear``, which needs an update budget)."""
    warmup = ["--warmup-updates", str(recipe["warmup_updates"])]
    if recipe["lr_scheduler"] == "inverse_sqrt":
        return ["--lr-scheduler", "inverse_sqrt", *warmup]
    return ["--lr-scheduler", "polynomial_decay", *warmup, "--total-num-update",
            str(recipe["updates"]), "--end-learning-rate", "0.0", "--power", "1.0"]


def averaged_epochs(method: Method, args) -> int:
    """How many last epochs a run of ``method`` averages and decodes (the Transformer
    recipe's ``average_last``); 0: it decodes the checkpoint of lowest validation loss."""
    return args.transformer["average_last"] if method.family == "transformer" else 0


def budget_args(args) -> List[str]:
    return ([*(["--max-update", str(args.updates)] if args.updates else []),
             *(["--max-epoch", str(args.epochs)] if args.epochs else []),
             *(["--stop-time-hours", str(args.max_minutes / 60)] if args.max_minutes else [])])


def train_command(method: Method, corpus: Corpus, args, save: str, seed: int) -> List[str]:
    if method.family == "transformer":
        return transformer_train_command(method, corpus, args, save, seed)
    interval = max(1, args.updates // 10) if args.updates else 100
    options = [
        *task_arch_args(method.arch, args.embed_dim, method.task), *method.model_args,
        *criterion_args(method, args),
        *rnn_size_args(args.embed_dim, args.encoder_hidden, args.decoder_hidden, args.dropout),
        "--optimizer", "adam",
        "--lr", str(args.lr), "--clip-norm", str(args.clip_norm),
        "--max-tokens", str(args.max_tokens), *budget_args(args),
    ]
    return fairseq_train_command(corpus.databin, options, save, seed,
                                 os.path.join(save, "train.log.jsonl"), interval,
                                 after=device_args(args))


def device_args(args) -> List[str]:
    return [] if args.gpu else ["--cpu"]


def generate_command(corpus: Corpus, ckpt: str, args, subset: str = "test",
                     extra=(), task: str = "syntax_translation") -> List[str]:
    return fairseq_generate_command(corpus.databin, ["--task", task], ckpt, subset,
                                    [*DECODING, *task_generate_args(task), *device_args(args),
                                     *extra])


def task_generate_args(task: str) -> List[str]:
    """fairseq-generate options a task needs: fairseq's ``translation`` translated only 32 of
    37 test sentences with its default ``--required-batch-size-multiple 8`` (the batch of
    the last 5 was lost; measured on the tiny synthetic corpus of tests/test_experiment.py),
    all 37 with 1."""
    return ["--required-batch-size-multiple", "1"] if task == "translation" else []


def run_settings(method: Method, key: str, args, description: str) -> dict:
    """Everything that defines the run of ``key`` (a method or one of its decode-only
    variants) but its seed: two runs with equal settings differ only by the seed."""
    extra = next((e for k, e in method.variants if k == key), [])
    model_args = {"model_args": method.model_args} if method.model_args else {}
    # a GPU's numerics and wall time are not the CPU's: its runs are records of their own
    device = {"device": "gpu"} if args.gpu else {}
    if method.family == "transformer":  # (RNN records keep the keys below, unchanged)
        averaged = averaged_epochs(method, args)
        return {
            "corpus": args.corpus_name,
            **device,
            "corpus_description": description,
            "method": key,
            "family": "transformer",
            "arch": method.arch,
            "task": method.task,
            **model_args,
            "criterion": criterion_args(method, args),
            "train_args": method.train_args,
            "recipe": dict(args.transformer),
            "model": transformer_model_args(method, args.transformer),
            "max_minutes": args.max_minutes or None,
            "checkpoint": (f"average of the last {averaged} epochs" if averaged else "best"),
            "decoding": [*DECODING, *extra],
        }
    return {
        "corpus": args.corpus_name,
        **device,
        "corpus_description": description,
        "method": key,
        "arch": method.arch,
        **model_args,
        "criterion": criterion_args(method, args),
        "label_smoothing": None if method.criterion == "blackout" else args.label_smoothing,
        "embed_dim": args.embed_dim,
        "encoder_hidden": args.encoder_hidden,
        "decoder_hidden": args.decoder_hidden,
        "dropout": args.dropout,
        "optimizer": "adam",
        "lr": args.lr,
        "clip_norm": args.clip_norm,
        "max_tokens": args.max_tokens,
        "updates": args.updates,
        "epochs": args.epochs,
        "max_minutes": args.max_minutes or None,
        "checkpoint": "best",
        "decoding": [*DECODING, *extra],
    }
