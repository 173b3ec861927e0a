"""One run of one method and seed: its fairseq-train and fairseq-generate commands, its
scores, step time and induced trees."""
import json
import logging
import os
import re
import shlex
import shutil
import time
from typing import List, Optional, Sequence, Tuple

from fairseq_syntax.evaluation.architectures import FAIRSEQ_PEERS, task_arch_args
from fairseq_syntax.user_dir import user_dir

from fairseq_syntax.evaluation.corpus import Corpus, TestSet
from fairseq_syntax.evaluation.fairseq_commands import fairseq_train_command, rnn_size_args
from fairseq_syntax.evaluation.fairseq_log import read_train_log
from .methods import (
    AVERAGED_CHECKPOINT, BACKBONE, DECODED_CHECKPOINT, DECODING, Method, RUN_STAMP, Row,
    TRANSFORMER_BACKBONE, TREE_INDUCING, file_key,
)
from .tools import (
    average_checkpoints, hypotheses_of, read_lines, ribes_of, run_function,
    run_tool, shown, smoothed_loss_floor, target_vocab_size, tool_threads, whole_split_loss,
    write_atomically, write_lines,
)


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
    return ["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
            "--task", task, "--path", ckpt, "--gen-subset", subset,
            *DECODING, *task_generate_args(task), *device_args(args), *extra]


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


def score_test_set(row: Row, corpus: Corpus, test: TestSet, gen_out: str,
                   out_prefix: str) -> None:
    """BLEU, chrF and the corpus's extra scores of the ``H-`` lines of ``gen_out`` into
    ``row.tests[test.name]``; the detokenised hypotheses into ``row.hypotheses``."""
    from sacrebleu.metrics import BLEU, CHRF

    hyps_tok = hypotheses_of(gen_out)
    write_lines(out_prefix + ".hyp.tok", hyps_tok)
    hyps = corpus.detokenize()(hyps_tok)
    write_lines(out_prefix + ".hyp", hyps)
    refs = corpus.references(test)
    if len(hyps) != len(refs):
        raise RuntimeError(f"{len(hyps)} translations of {test.subset} but {len(refs)} "
                           f"references in {test.reference} (see {gen_out})")
    bleu, chrf = BLEU(tokenize=corpus.bleu_tokenize), CHRF()
    scores = row.tests.setdefault(test.name, {})
    scores["bleu"] = bleu.corpus_score(hyps, [refs]).score
    scores["chrf"] = chrf.corpus_score(hyps, [refs]).score
    row.bleu_signature, row.chrf_signature = str(bleu.get_signature()), str(chrf.get_signature())
    row.hypotheses[test.name] = hyps
    if "ribes" in corpus.scores:
        scores["ribes"] = ribes_of(read_lines(test.reference_tok), hyps_tok)
    if "bleu_tok" in corpus.scores:  # comparable with published tokenised BLEU
        scores["bleu_tok"] = tokenised_bleu(hyps_tok, read_lines(test.reference_tok))
    if "agreement" in corpus.scores:
        from fairseq_syntax.evaluation.agreement import agreement_report
        from fairseq_syntax.syntax.conllu_io import read_conllu_trees

        report = agreement_report(hyps_tok, refs, read_conllu_trees(test.source_trees))
        scores.update(agreement=report.accuracy,
                      agreement_counts=f"{report.correct}/{report.total}",
                      agreement_long=(report.long_distance_accuracy
                                      if report.long_distance_total else None),
                      agreement_long_counts=(f"{report.long_distance_correct}/"
                                             f"{report.long_distance_total}"))


def tokenised_bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """BLEU of already tokenised text (``tokenize="none"``), without sacreBLEU's warning
    that the text looks tokenised: here it is meant to be."""
    from sacrebleu.metrics import BLEU

    sacrelogger = logging.getLogger("sacrebleu")
    level = sacrelogger.level
    sacrelogger.setLevel(logging.ERROR)
    try:
        return BLEU(tokenize="none").corpus_score(list(hyps), [list(refs)]).score
    finally:
        sacrelogger.setLevel(level)


def score_alignments(generate_out: str, gold: str) -> dict:
    from fairseq_syntax.evaluation.alignments import score_alignment_files

    return score_alignment_files(gold, generate_out)


def run_dir(args, key: str, seed: int) -> str:
    return os.path.join(args.workdir, "runs", file_key(key), f"seed{seed}")


def decode_and_score(row: Row, corpus: Corpus, ckpt: str, args, save: str, name: str,
                     extra, log: str, env, commands: dict,
                     task: str = "syntax_translation") -> None:
    """Beam search on every test set of ``corpus`` and its scores into ``row``."""
    for test in corpus.test_sets:
        out = os.path.join(save, f"generate.{test.name}{name}.out")
        cmd = generate_command(corpus, ckpt, args, test.subset, extra, task)
        commands[f"generate_{test.name}"] = shown(cmd)
        run_tool(cmd, log, env, stdout_path=out)
        score_test_set(row, corpus, test, out, os.path.join(save, f"{test.name}{name}"))


def run_method(method: Method, seed: int, corpus: Corpus, args, env
               ) -> List[Tuple[Row, dict, float]]:
    """Train one method with one seed, decode and score; returns (row, command lines, wall
    seconds) of the method and of each of its variants. A run interrupted after a
    checkpoint resumes from ``checkpoint_last.pt`` when its training command is the same
    (``RUN_STAMP`` in the run's folder), one whose training finished is only decoded and
    scored again; otherwise the folder starts empty."""
    save = run_dir(args, method.key, seed)
    cmd = train_command(method, corpus, args, save, seed)
    stamp = os.path.join(save, RUN_STAMP)
    last = os.path.join(save, "checkpoint_last.pt")
    average = averaged_epochs(method, args)
    ckpt = os.path.join(save, AVERAGED_CHECKPOINT if average else DECODED_CHECKPOINT)
    old = json.load(open(stamp)) if os.path.exists(stamp) else {}
    resume = os.path.exists(last) and old.get("train") == shown(cmd)
    if not resume:
        shutil.rmtree(save, ignore_errors=True)  # never resume another run's checkpoint
        os.makedirs(save)
        write_atomically(stamp, json.dumps({"train": shown(cmd)}) + "\n")
    log = os.path.join(save, "log.txt")
    open(log, "a" if resume else "w").close()
    start = time.time()
    row = Row(method.key, method.arch, seed)
    commands: dict = {}
    results = [(row, commands, 0.0)]
    try:
        commands["train"] = shown(cmd)
        if resume and "train_seconds" in old:  # a trained run is only decoded again
            row.train_seconds = old["train_seconds"]
        else:
            if not (resume and budget_spent(cmd, checkpoint_progress(last))):
                run_tool(cmd, log, env, stdout_path=os.path.join(save, "train.out"))
            row.train_seconds = round(training_seconds(last) if resume else time.time() - start, 1)
            write_atomically(stamp, json.dumps({"train": shown(cmd),
                                                "train_seconds": row.train_seconds}) + "\n")
        for name, value in read_train_log(os.path.join(save, "train.log.jsonl")).items():
            setattr(row, name, value)
        progress = checkpoint_progress(last)
        if progress:  # what was trained, whatever the log repeats
            row.train_updates = progress["updates"]
        if average and not os.path.exists(ckpt):  # written (atomically) once training ended
            average_checkpoints(last_epoch_checkpoints(save, average), ckpt)
        if method.task == "translation" or average:  # fairseq's validation left the last
            # batch out; an average was never validated
            whole = run_function(whole_split_loss, dict(
                databin=corpus.databin, checkpoint=ckpt, cpu=not args.gpu), log,
                threads=tool_threads(args))
            row.valid_loss, row.valid_ppl = round(whole["loss"], 3), round(whole["ppl"], 2)
        if method.criterion != "blackout":
            row.valid_loss_floor = smoothed_loss_floor(label_smoothing_of(method, args),
                                                       target_vocab_size(corpus.databin))
        decode_and_score(row, corpus, ckpt, args, save, "", [], log, env, commands,
                         method.task)
        first = corpus.test_sets[0]
        if "aer" in corpus.scores:  # attention of the force-decoded reference vs gold alignments
            align_out = os.path.join(save, "generate.align.out")
            cmd = ["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
                   "--task", method.task, "--path", ckpt, "--gen-subset", first.subset,
                   "--beam", "1", "--prefix-size", "1024", "--print-alignment", "soft",
                   "--batch-size", "32", *task_generate_args(method.task), *device_args(args)]
            commands["align"] = shown(cmd)
            run_tool(cmd, log, env, stdout_path=align_out)
            scores = score_alignments(align_out, first.gold_alignments)
            row.aer, row.precision, row.recall = (100.0 * scores[k] for k in
                                                  ("aer", "precision", "recall"))
        if method.arch.startswith(TREE_INDUCING) and "induced_trees" in corpus.scores:
            induced_scores(row, corpus, ckpt, args, save, log, commands)
        if step_time_batches_of(method, args):
            row.step_time_ratio = step_time_ratio(method, corpus, args, save, log, commands)
        results[0] = (row, commands, time.time() - start)
        for key, extra in method.variants:
            t0 = time.time()
            variant = Row(key, method.arch, seed, valid_ppl=row.valid_ppl,  # decode only
                          valid_loss=row.valid_loss, valid_loss_floor=row.valid_loss_floor,
                          train_epochs=row.train_epochs, train_updates=row.train_updates,
                          train_seconds=row.train_seconds,
                          valid_ppl_by_epoch=row.valid_ppl_by_epoch)
            vcommands = {"train": commands["train"]}
            results.append((variant, vcommands, 0.0))
            decode_and_score(variant, corpus, ckpt, args, save, "." + file_key(key), extra,
                             log, env, vcommands, method.task)
            results[-1] = (variant, vcommands, row.train_seconds + time.time() - t0)
    except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
        results[-1][0].error = str(err) if isinstance(err, RuntimeError) else \
            f"{type(err).__name__}: {err} (see {log})"
    return results


def last_epoch_checkpoints(save: str, n: int) -> List[str]:
    """The ``n`` epoch checkpoints (``checkpointE.pt``) of the highest epochs in ``save``."""
    epochs = sorted(int(name[len("checkpoint"):-len(".pt")]) for name in os.listdir(save)
                    if re.fullmatch(r"checkpoint\d+\.pt", name))
    if len(epochs) < n:
        raise RuntimeError(f"{save} holds {len(epochs)} epoch checkpoints, the recipe averages "
                           f"the last {n}: train at least {n} epochs")
    return [os.path.join(save, f"checkpoint{e}.pt") for e in epochs[-n:]]


def checkpoint_progress(checkpoint: str) -> Optional[dict]:
    """The updates and training seconds of a fairseq checkpoint (None: none readable)."""
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        return {"updates": int(state["optimizer_history"][-1]["num_updates"]),
                "seconds": float(state["extra_state"]["previous_training_time"])}
    except Exception:  # noqa: BLE001 - missing, cut short or not fairseq's: fairseq decides
        return None


def budget_spent(cmd: Sequence[str], progress: Optional[dict]) -> bool:
    """Whether a checkpoint at ``progress`` has spent the ``--max-update`` or
    ``--stop-time-hours`` budget of the training command ``cmd``. fairseq checks both only
    after an update: resumed from such a checkpoint it would train one update more. (An
    ``--max-epoch`` budget it checks before the epoch, training none.)"""
    if not progress:
        return False
    cmd = list(map(str, cmd))

    def value(option: str) -> Optional[float]:
        return float(cmd[cmd.index(option) + 1]) if option in cmd else None

    updates, hours = value("--max-update"), value("--stop-time-hours")
    return (updates is not None and progress["updates"] >= updates) or \
        (hours is not None and progress["seconds"] > hours * 3600)


def training_seconds(checkpoint: str) -> float:
    """fairseq's training time up to ``checkpoint``, summed over every process that trained
    towards it (``extra_state["previous_training_time"]``): a resumed run's whole time."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)  # checkpoint_safety's loader
    return float(state["extra_state"]["previous_training_time"])


def step_time_ratio(method: Method, corpus: Corpus, args, save: str, log: str,
                    commands: dict) -> float:
    """CPU time of a training step of ``method`` over the backbone's, on the same batches
    (:func:`~fairseq_syntax.evaluation.step_time.measure` in its own process, one thread; the
    seconds per step also to ``step_time.json``)."""
    from fairseq_syntax.evaluation.step_time import measure, per_step

    spec = method.arch + ("" if method.criterion == "label_smoothed_cross_entropy"
                          else "+" + method.criterion)
    if method.family == "transformer":
        backbone, batches = TRANSFORMER_BACKBONE, args.step_time_batches
        model_args = transformer_model_args(method, args.transformer)
        max_tokens = args.transformer["max_tokens"]
    else:
        backbone, batches = BACKBONE, args.step_time_batches
        model_args = rnn_size_args(args.embed_dim, args.encoder_hidden, args.decoder_hidden,
                                   args.dropout)
        max_tokens = args.max_tokens
    if spec == backbone:
        return 1.0
    out = os.path.join(save, "step_time.json")
    cmd = ["fairseq-syntax-step-time", corpus.databin, "--runs", f"{backbone},{spec}",
           "--model-args", shlex.join(model_args), "--batches", str(batches),
           "--rounds", "1", "--max-tokens", str(max_tokens), "--json", out]
    commands["step_time"] = shown(cmd)  # the same measurement as a command line
    totals = run_function(measure, dict(
        databin=corpus.databin, specs=[backbone, spec], model_args=model_args,
        batches=batches, rounds=1, max_tokens=max_tokens), log, threads=1)
    seconds = per_step(totals, batches)
    with open(out, "w") as f:
        json.dump(seconds, f, indent=1)
    return seconds[spec]["cpu_ratio"]


def step_time_batches_of(method: Method, args) -> int:
    """Batches of the step-time measurement of ``method`` (0: not measured). fairseq-syntax-step-time
    builds runs of ``syntax_translation`` and of fairseq's own peers (for which the ratio's inverse
    is the backbone's words/s over the peer's)."""
    measured = method.task == "syntax_translation" or method.arch in FAIRSEQ_PEERS
    return args.step_time_batches if measured else 0


def induced_scores(row: Row, corpus: Corpus, ckpt: str, args, save: str, log: str,
                   commands: dict) -> None:
    """DA/UA of the trees the checkpoint induces on the test source and the branching
    baselines (:func:`~fairseq_syntax.evaluation.induced_trees.score_checkpoint` in its own
    process), to one decimal as earlier records hold them."""
    from fairseq_syntax.evaluation.induced_trees import score_checkpoint

    first = corpus.test_sets[0]
    gold, output = first.source_trees, os.path.join(save, f"induced.{first.name}.conllu")
    cmd = ["fairseq-syntax-induced-trees", corpus.databin, "--path", ckpt,
           "--gen-subset", first.subset, "--gold", gold, "--output", output, *device_args(args)]
    commands["induced_trees"] = shown(cmd)  # the same scores as a command line
    scores = run_function(score_checkpoint, dict(
        data=corpus.databin, path=ckpt, split=first.subset, gold=gold, output=output,
        cpu=not args.gpu), log, threads=tool_threads(args)).scores
    row.da, row.ua = (round(scores.model.directed_accuracy, 1),
                      round(scores.model.undirected_accuracy, 1))
    row.baselines = {name: round(value, 1) for name, value in (
        ("left DA", scores.left.directed_accuracy), ("left UA", scores.left.undirected_accuracy),
        ("right DA", scores.right.directed_accuracy),
        ("right UA", scores.right.undirected_accuracy))}
