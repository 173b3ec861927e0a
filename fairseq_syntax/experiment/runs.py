"""One run of one method and seed: train (or resume) it, decode every test set and score
it (:mod:`.commands`, :mod:`.scoring`)."""
import os
import re
import time
from typing import List, Optional, Sequence, Tuple

from fairseq_syntax.evaluation.corpus import Corpus
from fairseq_syntax.evaluation.fairseq_commands import fairseq_generate_command
from fairseq_syntax.evaluation.fairseq_log import read_train_log
from fairseq_syntax.evaluation.host import cpu_identity
from fairseq_syntax.evaluation.positions import checkpoint_position_shares

from .commands import (
    averaged_epochs, device_args, generate_command, label_smoothing_of, task_generate_args,
    train_command,
)
from .methods import (
    AVERAGED_CHECKPOINT, DECODED_CHECKPOINT, POSITION_PREDICTING, TREE_INDUCING, Method, Row, file_key,
)
from .records import host_facts
from .scoring import (
    induced_scores, score_alignments, score_test_set, step_time_batches_of, step_time_ratio,
)
from .tools import (
    average_checkpoints, resumable_training, run_function, run_tool, shown, smoothed_loss_floor,
    stamp_training, target_vocab_size, tool_threads, training_budget, whole_split_loss,
)


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
    last = os.path.join(save, "checkpoint_last.pt")
    average = averaged_epochs(method, args)
    ckpt = os.path.join(save, AVERAGED_CHECKPOINT if average else DECODED_CHECKPOINT)
    old = resumable_training(save, shown(cmd))
    resume = old is not None
    old = old or {}
    log = os.path.join(save, "log.txt")
    open(log, "a" if resume else "w").close()
    start = time.time()
    row = Row(method.key, method.arch, seed)
    commands: dict = {}
    results = [(row, commands, 0.0)]
    try:
        commands["train"] = shown(cmd)
        row.training_cpus = training_cpus(old, resume)
        if resume and "train_seconds" in old:  # a trained run is only decoded again
            row.train_seconds = old["train_seconds"]
        else:
            if not (resume and budget_spent(cmd, checkpoint_progress(last))):
                row.training_cpus = training_cpus(old, resume, host_facts(args, None))
                stamp_training(save, shown(cmd), training_cpus=row.training_cpus)
                run_tool(cmd, log, env, stdout_path=os.path.join(save, "train.out"))
            row.train_seconds = round(training_seconds(last) if resume else time.time() - start, 1)
            stamp_training(save, shown(cmd), train_seconds=row.train_seconds,
                           training_cpus=row.training_cpus)
        trained = time.time()  # wall time: the whole training (resumed or not), then what follows
        for name, value in read_train_log(os.path.join(save, "train.log.jsonl")).items():
            setattr(row, name, value)
        progress = checkpoint_progress(last)
        if progress:  # what was trained, whatever the log repeats
            row.train_updates = progress["updates"]
        if average and not os.path.exists(ckpt):  # written (atomically) once training ended
            average_checkpoints(last_epoch_checkpoints(save, average), ckpt)
        if not average:
            row.decoded_epoch = (checkpoint_progress(ckpt) or {}).get("epoch")
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
            cmd = fairseq_generate_command(
                corpus.databin, ["--task", method.task], ckpt, first.subset,
                ["--beam", "1", "--prefix-size", "1024", "--print-alignment", "soft",
                 "--batch-size", "32", *task_generate_args(method.task), *device_args(args)])
            commands["align"] = shown(cmd)
            run_tool(cmd, log, env, stdout_path=align_out)
            scores = score_alignments(align_out, first.gold_alignments)
            row.aer, row.precision, row.recall = (100.0 * scores[k] for k in
                                                  ("aer", "precision", "recall"))
        if method.arch.startswith(TREE_INDUCING) and "induced_trees" in corpus.scores:
            induced_scores(row, corpus, ckpt, args, save, log, commands)
        if method.arch.startswith(POSITION_PREDICTING):  # has p_i degenerated?
            row.positions = run_function(checkpoint_position_shares, dict(
                databin=corpus.databin, checkpoint=ckpt, split=first.subset,
                cpu=not args.gpu, aligned_split="valid"), log, threads=tool_threads(args))
        if step_time_batches_of(method, args):
            row.step_time_ratio = step_time_ratio(method, corpus, args, save, log, commands)
        results[0] = (row, commands, row.train_seconds + time.time() - trained)
        for key, extra in method.variants:
            t0 = time.time()
            variant = Row(key, method.arch, seed, valid_ppl=row.valid_ppl,  # decode only
                          valid_loss=row.valid_loss, valid_loss_floor=row.valid_loss_floor,
                          train_epochs=row.train_epochs, train_updates=row.train_updates,
                          train_seconds=row.train_seconds,
                          valid_ppl_by_epoch=row.valid_ppl_by_epoch,
                          decoded_epoch=row.decoded_epoch, training_cpus=row.training_cpus)
            vcommands = {"train": commands["train"]}
            results.append((variant, vcommands, 0.0))
            decode_and_score(variant, corpus, ckpt, args, save, "." + file_key(key), extra,
                             log, env, vcommands, method.task)
            results[-1] = (variant, vcommands, row.train_seconds + time.time() - t0)
    except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
        results[-1][0].error = str(err) if isinstance(err, RuntimeError) else \
            f"{type(err).__name__}: {err} (see {log})"
    return results


def training_cpus(stamp: dict, resume: bool, here: Optional[dict] = None) -> List[dict]:
    """The machines (:func:`~fairseq_syntax.evaluation.host.cpu_identity`) that trained the
    run of ``stamp`` so far, and ``here`` (the record's host of this machine, which trains
    now). A resumed run whose stamp predates this list (2026-12-03) trained on a machine
    not known: an entry of Nones."""
    cpus = list(stamp.get("training_cpus") or ([cpu_identity({})] if resume else []))
    here = here and cpu_identity(here)
    return cpus + [here] if here and here not in cpus else cpus


def last_epoch_checkpoints(save: str, n: int) -> List[str]:
    """The ``n`` epoch checkpoints (``checkpointE.pt``) of the highest epochs in ``save``."""
    epochs = sorted(int(name[len("checkpoint"):-len(".pt")]) for name in os.listdir(save)
                    if re.fullmatch(r"checkpoint\d+\.pt", name))
    if len(epochs) < n:
        raise RuntimeError(f"{save} holds {len(epochs)} epoch checkpoints, the recipe averages "
                           f"the last {n}: train at least {n} epochs")
    return [os.path.join(save, f"checkpoint{e}.pt") for e in epochs[-n:]]


def checkpoint_progress(checkpoint: str) -> Optional[dict]:
    """The updates, training seconds and epochs trained (the last one counted even if cut
    short by ``--max-update``) of a fairseq checkpoint (None: none readable)."""
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        itr = state["extra_state"]["train_iterator"]  # saved at an epoch's end: the next one
        return {"updates": int(state["optimizer_history"][-1]["num_updates"]),
                "seconds": float(state["extra_state"]["previous_training_time"]),
                "epoch": int(itr["epoch"]) - (itr["iterations_in_epoch"] == 0)}
    except Exception:  # noqa: BLE001 - missing, cut short or not fairseq's: fairseq decides
        return None


def budget_spent(cmd: Sequence[str], progress: Optional[dict]) -> bool:
    """Whether a checkpoint at ``progress`` has spent the ``--max-update`` or
    ``--stop-time-hours`` budget of the training command ``cmd``. fairseq checks both only
    after an update: resumed from such a checkpoint it would train one update more. (An
    ``--max-epoch`` budget it checks before the epoch, training none.)"""
    if not progress:
        return False
    budget = training_budget(cmd)
    updates, hours = budget["updates"], budget["hours"]
    return (updates is not None and progress["updates"] >= updates) or \
        (hours is not None and progress["seconds"] > hours * 3600)



def training_seconds(checkpoint: str) -> float:
    """fairseq's training time up to ``checkpoint``, summed over every process that trained
    towards it (``extra_state["previous_training_time"]``): a resumed run's whole time."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)  # checkpoint_safety's loader
    return float(state["extra_state"]["previous_training_time"])
