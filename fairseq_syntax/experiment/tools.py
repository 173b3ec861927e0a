"""Running fairseq's commands and the plugin's functions in their own processes, and
reading what they write (logs, hypotheses)."""
import concurrent.futures
import contextlib
import fcntl
import json
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Sequence

from fairseq_syntax.syntax.text_io import atomic_text_file, read_json, read_text_lines
from fairseq_syntax.user_dir import user_dir

from .methods import RUN_STAMP, USER_DIR_SHELL


def tool_env(threads: Optional[int]) -> Dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def tool_threads(args) -> Optional[int]:
    """OMP/MKL threads of each tool process (None: torch's default)."""
    return args.threads or (1 if args.jobs > 1 else None)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """In a child process: be killed (SIGKILL) when the thread that started it dies, as
    Linux's ``PR_SET_PDEATHSIG`` does, and at once if ``parent`` is already gone. Elsewhere
    than Linux, nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the prctl
        os.kill(os.getpid(), signal.SIGKILL)


def run_tool(cmd: Sequence[str], log_path: str, env, stdout_path: Optional[str] = None) -> str:
    """Run ``cmd``; stdout to ``stdout_path`` (or the log), stderr to the log. The tool dies
    with this process (a killed harness leaves no fairseq-train behind). Returns stdout
    text; raises RuntimeError naming the log when it fails."""
    parent = os.getpid()
    with open(log_path, "a") as log:
        log.write("$ " + shlex.join(map(str, cmd)) + "\n")
        log.flush()
        out = open(stdout_path, "w") if stdout_path else subprocess.PIPE
        try:
            proc = subprocess.run(list(map(str, cmd)), stdout=out, stderr=log, env=env, text=True,
                                  preexec_fn=lambda: die_with_parent(parent))
        finally:
            if stdout_path:
                out.close()
        text = proc.stdout if not stdout_path else open(stdout_path, encoding="utf-8").read()
        if not stdout_path:
            log.write(text)
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(str(cmd[0]))} failed ({proc.returncode}), "
                           f"see {log_path}")
    return text


def run_function(fn, kwargs: dict, log_path: str, threads: Optional[int] = None):
    """``fn(**kwargs)`` in a fresh Python process, as a tool's own process ran it: its own
    CPU clock (step times), torch threads (``threads``; None: torch's default) and memory,
    its output appended to ``log_path``; it dies with this process. Returns what ``fn``
    returns; an error exit raises RuntimeError naming the log."""
    with open(log_path, "a") as log:
        log.write(f"> {fn.__module__}.{fn.__qualname__}("
                  + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")\n")
    spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn, initializer=die_with_parent,
                                                initargs=(os.getpid(),)) as pool:
        return pool.submit(_logged_call, fn, kwargs, log_path, threads).result()


def _logged_call(fn, kwargs: dict, log_path: str, threads: Optional[int]):
    """The child of :func:`run_function`."""
    import traceback
    import warnings

    import torch

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    warnings.simplefilter("ignore")
    if threads:
        torch.set_num_threads(threads)
    try:
        return fn(**kwargs)
    except SystemExit as err:  # the tools' error exit
        raise RuntimeError(f"{fn.__module__}.{fn.__qualname__} failed ({err}), "
                           f"see {log_path}") from None
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def shown(cmd: Sequence[str]) -> str:
    """``cmd`` as a shell line, the plugin's folder as a reader's shell finds it."""
    return shlex.join(map(str, cmd)).replace(shlex.quote(user_dir()), USER_DIR_SHELL)


@contextlib.contextmanager
def exclusive_lock(path: str) -> Iterator[Optional[str]]:
    """Hold an exclusive ``flock`` on ``path`` for the ``with`` block, without waiting: yields
    None when this process holds it, else the pid another process wrote there. The kernel
    releases the lock when its holder ends, even killed; the file stays."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            yield f.read().strip() or "unknown"
            return
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield None
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[None]:
    """Wait for, then hold, an exclusive ``flock`` on ``folder`` itself (no lock file is
    made): invocations that rewrite one shared file in it take turns."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_lines(path: str, lines: Sequence[str]) -> None:
    write_atomically(path, "".join(line + "\n" for line in lines))


def resumable_training(save: str, train: str) -> Optional[dict]:
    """The stamp (``RUN_STAMP``) of the training folder ``save`` when it holds a checkpoint of
    the training command ``train`` (shown), to resume or only decode again; otherwise None,
    the folder emptied and stamped with ``train``: fairseq-train would resume another
    command's checkpoint and append to its log."""
    stamp = os.path.join(save, RUN_STAMP)
    old = read_json(stamp, missing={})
    if old.get("train") == train and os.path.exists(os.path.join(save, "checkpoint_last.pt")):
        return old
    shutil.rmtree(save, ignore_errors=True)
    os.makedirs(save)
    stamp_training(save, train)
    return None


def stamp_training(save: str, train: str, **finished) -> None:
    """Write the stamp of the training folder ``save``: its training command ``train`` (shown)
    and, once it has ended, what it recorded of it (``finished``)."""
    write_atomically(os.path.join(save, RUN_STAMP), json.dumps({"train": train, **finished}) + "\n")


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`~fairseq_syntax.syntax.text_io.atomic_text_file`)."""
    with atomic_text_file(path) as f:
        f.write(text)


def hypotheses_of(generate_out: str) -> List[str]:
    """The first ``H-`` line of every sentence, in sentence order."""
    hyps: Dict[int, str] = {}
    for line in read_text_lines(generate_out, allow_empty=True):
        m = re.match(r"H-(\d+)\t[^\t]*\t?(.*)$", line)
        if m and int(m.group(1)) not in hyps:
            hyps[int(m.group(1))] = m.group(2)
    return [hyps[i] for i in sorted(hyps)]


def whole_split_loss(databin: str, checkpoint: str, split: str = "valid", max_tokens: int = 4000,
                     cpu: bool = True) -> Dict[str, float]:
    """Label-smoothed loss (bits per target token), perplexity (2 ** nll bits) and sentence
    count of ``checkpoint`` on every sentence of ``split``, as fairseq-train's validation
    computes them. fairseq 0.12's own datasets drop a last batch whose size is not a multiple
    of ``--required-batch-size-multiple`` (default 8; fairseq issue #5036): a ``--task
    translation`` run validates on 1008 of Multi30k's 1014 valid sentences, without the 6
    longest; ``syntax_translation`` keeps them (``SyntaxDataset.batch_by_size``)."""
    import math

    from fairseq import checkpoint_utils, utils

    import fairseq_syntax.plugin  # noqa: F401  (the task and models, safe checkpoint loading)

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": databin})
    model = models[0] if cpu else models[0].cuda()
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset(split, combine=False, epoch=1)
    dataset = task.dataset(split)
    batches = task.get_batch_iterator(
        dataset, max_tokens=max_tokens, required_batch_size_multiple=1,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
    ).next_epoch_itr(shuffle=False)
    sums = {"loss": 0.0, "nll_loss": 0.0, "ntokens": 0, "nsentences": 0}
    for sample in batches:
        _, _, out = task.valid_step(sample if cpu else utils.move_to_cuda(sample), model, criterion)
        out.setdefault("nll_loss", out["loss"])  # cross_entropy's loss is the nll
        for key in sums:
            sums[key] += float(out[key])
    bits = 1.0 / (sums["ntokens"] * math.log(2))
    return {"loss": sums["loss"] * bits, "ppl": 2 ** (sums["nll_loss"] * bits),
            "sentences": int(sums["nsentences"])}


def average_checkpoints(paths: Sequence[str], out: str) -> None:
    """Write to ``out`` the checkpoint of ``paths[-1]`` with every floating-point parameter
    the mean of the ``paths``' (fairseq's scripts/average_checkpoints.py, which fairseq's
    wheel does not ship; summed in float64)."""
    import torch

    totals = {}
    for path in paths:  # one checkpoint in memory at a time, as fairseq's script
        state = torch.load(path, map_location="cpu", weights_only=True)  # checkpoint_safety's loader
        for name, value in state["model"].items():
            if value.is_floating_point():
                totals[name] = totals.get(name, 0) + value.double()
    for name, total in totals.items():  # ``state``: the last checkpoint's
        state["model"][name] = (total / len(paths)).to(state["model"][name].dtype)
    torch.save(state, out + ".tmp")
    os.replace(out + ".tmp", out)


def smoothed_loss_floor(epsilon: float, vocab_size: int) -> float:
    """The lowest loss per token (bits) of fairseq's ``label_smoothed_cross_entropy``:
    it is the cross-entropy of the model's distribution against the smoothed target
    (1 - epsilon on the reference, epsilon / (V - 1) on each other word), so by Gibbs'
    inequality no model, however long it trains, goes below that target's entropy. A run
    whose validation loss is within x % of this floor is within x % of any longer run."""
    import math

    other = epsilon / (vocab_size - 1)
    nats = -(1 - epsilon) * math.log(1 - epsilon) - epsilon * math.log(other)
    return nats / math.log(2)


def target_vocab_size(databin: str) -> int:
    """Size of the output layer: the target dictionary of ``databin`` with fairseq's
    four special symbols."""
    from fairseq.data import Dictionary

    manifest = os.path.join(databin, "syntax_manifest.json")
    with open(manifest) as f:
        target = json.load(f)["target_lang"]
    return len(Dictionary.load(os.path.join(databin, f"dict.{target}.txt")))


def training_budget(cmd: Sequence[str]) -> dict:
    """The budget of the training command ``cmd``: ``--max-epoch`` (``epochs``),
    ``--max-update`` (``updates``) and ``--stop-time-hours`` (``hours``); None where not
    given (fairseq's 0 is no limit too)."""
    cmd = list(map(str, cmd))

    def value(option: str) -> Optional[float]:
        return float(cmd[cmd.index(option) + 1]) if option in cmd else None

    return {name: (value(option) or None) for name, option in (
        ("epochs", "--max-epoch"), ("updates", "--max-update"), ("hours", "--stop-time-hours"))}
