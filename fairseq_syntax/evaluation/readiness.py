"""GPU readiness: training tokens/s of every architecture in float32, ``--fp16`` and
``--bf16``, peak GPU memory, and whether the data loader keeps up with the step.

Every run is built by :func:`fairseq_syntax.evaluation.step_time.build_run` (fairseq's own training
options: task, model, criterion), and, as ``fairseq-syntax-step-time`` does, every run gets
the same training batches (chosen from the first run's dataset, collated by each run's own)
and is timed round-robin in one process, after a warm-up. What this module adds is what
``fairseq-train`` does on a device: the model and each batch moved there, and under
``--fp16`` / ``--bf16`` the model cast as fairseq's ``Trainer`` casts it and fairseq's
``FP16Optimizer`` (fp32 master weights; dynamic loss scaling under fp16, none under bf16)
around fairseq's Adam. float32 uses fairseq's Adam too, so the three precisions differ only
in the cast. On CUDA every step ends with ``torch.cuda.synchronize()``. The warm-up steps go
through the timed batches themselves (by default each once): a batch shape met first while
timed costs its kernels' set-up to whichever run meets it first in the round-robin (on an
H200, fairseq's ``transformer`` in fp16 timed 5,364 tok/s after 3 warm-up steps, 43,187 after
all 10).

Tokens are target tokens (``sample["ntokens"]``, what fairseq's ``wps`` counts); tokens/s of a
run is its tokens over its timed seconds. A mechanism's reference is its backbone
(``attentional_rnn``, ``syntax_transformer``), a backbone's is fairseq's own peer (``lstm``,
``transformer``). Peak GPU memory of a run: its resident state after warm-up (weights,
gradients, Adam state, fp32 master copy; ``torch.cuda.memory_allocated`` before and after it
was built) plus the most one of its steps allocated above what was allocated before the step
(``torch.cuda.max_memory_allocated``): what the run alone would hold, although all runs of a
precision are resident together. The loader: fairseq's epoch iterator as ``fairseq-train``
builds it (``--num-workers``, ``--data-buffer-size`` 10), batches per second drained after its
first batch (the worker's start-up is left out), against the run's step batches/s.
"""
import functools
import gc
import platform
import random
import re
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from fairseq_syntax.evaluation.host import cpu_model

PRECISIONS = ("fp32", "fp16", "bf16")
FAIRSEQ_PEER = {"rnn": "lstm", "transformer": "transformer"}
BACKBONE = {"rnn": "attentional_rnn", "transformer": "syntax_transformer"}

# Model sizes. "recipe": the RNNs at the Multi30k/KFTT recipe's sizes (step_time's
# RECIPE_SIZES), the Transformers at the _iwslt_de_en preset's; "tiny": for tests.
PRESETS = {
    "tiny": {
        "rnn": "--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 "
               "--decoder-hidden-size 32 --dropout 0",
        "transformer": "--encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-layers 1 "
                       "--encoder-attention-heads 2 --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 "
                       "--decoder-layers 1 --decoder-attention-heads 2 --dropout 0",
        "max_tokens": 300,
    },
    "recipe": {
        "rnn": None,  # step_time.RECIPE_SIZES
        "transformer": "--encoder-embed-dim 512 --encoder-ffn-embed-dim 1024 --encoder-layers 6 "
                       "--encoder-attention-heads 4 --decoder-embed-dim 512 --decoder-ffn-embed-dim 1024 "
                       "--decoder-layers 6 --decoder-attention-heads 4 --dropout 0.3",
        "max_tokens": 4000,
    },
}


def preset_sizes(name: str) -> Dict[str, object]:
    """``{"rnn": ARGS, "transformer": ARGS, "max_tokens": N}`` of a preset."""
    from .step_time import RECIPE_SIZES

    if name not in PRESETS:
        raise ValueError(f"unknown size preset {name!r}: choose one of {', '.join(PRESETS)}")
    sizes = dict(PRESETS[name])
    sizes["rnn"] = sizes["rnn"] or RECIPE_SIZES
    return sizes


@dataclass
class Run:
    spec: str  # ARCH[+CRITERION], as step_time.build_run takes it
    family: str  # "rnn" or "transformer"
    reference: Optional[str]  # the run its tokens/s ratio is to
    model_args: List[str]


def readiness_runs(rnn_args: List[str], transformer_args: List[str],
                   archs: Optional[List[str]] = None) -> List[Run]:
    """fairseq's ``lstm``, every RNN-family architecture (backbone first), fairseq's
    ``transformer``, every Transformer-family architecture; ``archs`` keeps only those named
    (with the references they need)."""
    from .architectures import rnn_architectures, transformer_architectures

    runs = []
    for family, members, sizes in (("rnn", rnn_architectures(), rnn_args),
                                   ("transformer", transformer_architectures(), transformer_args)):
        backbone, peer = BACKBONE[family], FAIRSEQ_PEER[family]
        runs.append(Run(peer, family, None, sizes))
        runs += [Run(a, family, peer if a == backbone else backbone, sizes) for a in members]
    if archs is None:
        return runs
    known = {r.spec for r in runs}
    unknown = [a for a in archs if a not in known]
    if unknown:
        raise ValueError(f"unknown architecture(s) {', '.join(unknown)}: choose from {', '.join(sorted(known))}")
    wanted = set(archs)
    for r in runs:  # a kept run's reference, and that one's
        if r.spec in wanted and r.reference:
            wanted.add(r.reference)
    for r in runs:
        if r.spec in wanted and r.reference:
            wanted.add(r.reference)
    return [r for r in runs if r.spec in wanted]


@dataclass
class Timing:
    """One run at one precision: timed steps, their target tokens and seconds."""
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    peak_mb: Optional[float] = None  # CUDA only
    overflows: int = 0  # fp16 steps fairseq's loss scaler skipped
    error: str = ""

    @property
    def tokens_per_s(self) -> Optional[float]:
        return self.tokens / self.seconds if self.seconds and not self.error else None

    @property
    def batches_per_s(self) -> Optional[float]:
        return self.steps / self.seconds if self.seconds and not self.error else None


@dataclass
class Loader:
    batches: int = 0
    seconds: float = 0.0
    error: str = ""

    @property
    def batches_per_s(self) -> Optional[float]:
        return self.batches / self.seconds if self.seconds and not self.error else None


@dataclass
class Readiness:
    device: str
    runs: List[Run]
    precisions: List[str]  # measured
    skipped: Dict[str, str]  # precision -> why not measured
    timings: Dict[str, Dict[str, Timing]]  # precision -> spec -> Timing
    loader: Dict[str, Loader]
    steps: int
    warmup: int
    max_tokens: int
    num_workers: int
    peak_rss_mb: Optional[float] = None  # CPU: the whole process's
    notes: List[str] = field(default_factory=list)

    def ratio(self, precision: str, run: Run) -> Optional[float]:
        """tokens/s of ``run`` over its reference's, at one precision."""
        mine = self.timings[precision][run.spec].tokens_per_s
        ref = self.timings[precision].get(run.reference) if run.reference else None
        return mine / ref.tokens_per_s if mine and ref and ref.tokens_per_s else None

    def fastest_step(self, spec: str) -> Tuple[Optional[str], Optional[float]]:
        """(precision, batches/s) of the run's fastest measured step."""
        best = [(t.batches_per_s, p) for p in self.precisions
                for t in [self.timings[p][spec]] if t.batches_per_s]
        return (max(best)[1], max(best)[0]) if best else (None, None)


def device_name(device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU: " + (cpu_model() or platform.machine())


def unsupported(precision: str, device) -> Optional[str]:
    """Why ``precision`` is not measured on ``device`` (None: it is)."""
    import torch

    if device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16"
        return None
    if precision == "fp16":
        return "fairseq's --fp16 is a CUDA path (half-precision kernels on a CPU are emulated): skipped on CPU"
    if precision == "bf16" and not torch.backends.mkldnn.is_available():
        return "this torch has no bfloat16 CPU kernels (oneDNN)"
    return None


@functools.lru_cache(maxsize=None)
def _optimizer_config(precision: str):
    from .checkpoints import training_config

    flags = {"fp32": [], "fp16": ["--fp16"], "bf16": ["--bf16"]}[precision]
    return training_config(["unused-data", "--task", "translation", "--arch", "lstm",
                            "--optimizer", "adam", "--lr", "0.001", *flags])


def _optimizer(model, precision: str):
    """fairseq's Adam (lr 1e-3) over ``model``; under fp16/bf16 inside fairseq's
    ``FP16Optimizer``, built from fairseq's own options as its ``Trainer`` builds it."""
    from fairseq import optim

    cfg = _optimizer_config(precision)
    params = [p for p in model.parameters() if p.requires_grad]
    if precision == "fp32":
        return optim.build_optimizer(cfg.optimizer, params)
    return optim.FP16Optimizer.build_optimizer(cfg, params)


_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _prepare(sample, device, precision):
    """The batch on ``device``, float tensors cast as fairseq's Trainer casts them."""
    import torch
    from fairseq import utils

    if device.type == "cuda":
        sample = utils.move_to_cuda(sample, device=device)
    if precision != "fp32":
        dtype = getattr(torch, _DTYPE[precision])
        sample = utils.apply_to_sample(lambda t: t.to(dtype) if t.dtype is torch.float32 else t, sample)
    return sample


def _step(model, criterion, optimizer, sample, precision) -> Tuple[int, bool]:
    """One training step as fairseq-train takes it (forward, backward, Adam); returns
    (target tokens, whether fp16's loss scaler skipped the update)."""
    optimizer.zero_grad()
    loss, _, _ = criterion(model, sample)
    optimizer.backward(loss)
    try:
        optimizer.clip_grad_norm(0.0)  # fp16: unscales and checks for overflow, as the Trainer
        optimizer.step()
    except OverflowError:  # fairseq skips the update and lowers the scale
        optimizer.zero_grad()
        return int(sample["ntokens"]), True
    return int(sample["ntokens"]), False


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _choose_batches(task, max_tokens: int, count: int, seed: int) -> List[List[int]]:
    """The training batches every run is timed on: the first run's dataset batched by size
    (``max_tokens``), shuffled with ``seed``, the first ``count`` (as step_time.measure)."""
    dataset = task.dataset("train")
    batches = dataset.batch_by_size(dataset.ordered_indices(), max_tokens=max_tokens)
    random.Random(seed).shuffle(batches)
    if not len(batches):
        raise ValueError("the data-bin's train split has no batches")
    return [batches[i % len(batches)] for i in range(count)]


@dataclass
class _Built:
    """A run as step_time.build_run builds it (float32, on the CPU) and its collated batches."""
    task: object
    model: object
    criterion: object
    samples: list = field(default_factory=list)


def _build(databin: str, runs: List[Run], progress) -> Dict[str, object]:
    """spec -> :class:`_Built`, or the error string of a run that could not be built."""
    from .step_time import build_run

    built = {}
    for r in runs:
        progress(f"build {r.spec}")
        try:
            torch_seed(1)
            task, model, criterion, _ = build_run(databin, r.spec, r.model_args)
            task.load_dataset("train")
            built[r.spec] = _Built(task, model, criterion)
        except Exception as exc:  # a readiness finding: reported in the table
            built[r.spec] = _error(exc)
    return built


def torch_seed(seed: int):
    import torch

    torch.manual_seed(seed)


def _time_precision(built, runs, precision, device, warmup, steps, progress):
    """Timing of every run at one precision: each copied from its built float32 model, cast,
    moved and warmed up, then all timed round-robin."""
    import copy

    import torch

    cuda = device.type == "cuda"
    timings = {r.spec: Timing() for r in runs}
    live = {}
    for r in runs:
        timing, base = timings[r.spec], built[r.spec]
        if isinstance(base, str):
            timing.error = base
            continue
        progress(f"{precision} warm-up {r.spec}")
        try:
            before = torch.cuda.memory_allocated(device) if cuda else 0
            dtype = getattr(torch, _DTYPE[precision])
            model = copy.deepcopy(base.model).to(device=device, dtype=dtype)
            criterion = base.criterion.to(device=device)  # holds the task: not copied
            optimizer = _optimizer(model, precision)
            model.train()
            for i in range(warmup):
                _step(model, criterion, optimizer, _prepare(base.samples[i % steps], device, precision),
                      precision)
            resident = 0
            if cuda:
                torch.cuda.synchronize(device)
                resident = torch.cuda.memory_allocated(device) - before
            live[r.spec] = (model, criterion, optimizer, resident)
        except Exception as exc:  # a readiness finding: reported in the table
            timing.error = _error(exc)
            if cuda:
                torch.cuda.empty_cache()
    transient = {spec: 0 for spec in live}
    for i in range(steps):
        for spec in list(live):
            model, criterion, optimizer, _ = live[spec]
            timing = timings[spec]
            try:
                if cuda:
                    torch.cuda.synchronize(device)
                    above = torch.cuda.memory_allocated(device)
                    torch.cuda.reset_peak_memory_stats(device)
                start = time.perf_counter()
                tokens, skipped = _step(model, criterion, optimizer,
                                        _prepare(built[spec].samples[i], device, precision), precision)
                if cuda:
                    torch.cuda.synchronize(device)
                timing.seconds += time.perf_counter() - start
                timing.tokens += tokens
                timing.steps += 1
                timing.overflows += skipped
                if cuda:
                    transient[spec] = max(transient[spec], torch.cuda.max_memory_allocated(device) - above)
            except Exception as exc:
                timing.error = _error(exc)
                del live[spec]
                if cuda:
                    torch.cuda.empty_cache()
    for spec, (*_, resident) in live.items():
        if cuda:
            timings[spec].peak_mb = (resident + transient[spec]) / 2 ** 20
    live.clear()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return timings


def _time_loader(base, max_tokens, batches, num_workers, seed) -> Loader:
    """Batches/s of fairseq's training epoch iterator over the run's dataset (built as
    fairseq-train builds it), after its first batch."""
    from fairseq import utils

    out = Loader()
    if isinstance(base, str):
        out.error = base
        return out
    try:
        task = base.task
        itr = task.get_batch_iterator(
            dataset=task.dataset("train"), max_tokens=max_tokens,
            max_positions=utils.resolve_max_positions(task.max_positions(), base.model.max_positions(),
                                                      max_tokens),
            ignore_invalid_inputs=True, required_batch_size_multiple=8, seed=seed,
            num_workers=num_workers, epoch=1, data_buffer_size=10, disable_iterator_cache=True)
        epoch = itr.next_epoch_itr(shuffle=True)
        next(epoch)  # the worker's start-up
        start = time.perf_counter()
        for _ in epoch:
            out.batches += 1
            if out.batches == batches:
                break
        out.seconds = time.perf_counter() - start
        del epoch, itr
        if not out.batches:
            out.error = "the train split has a single batch: nothing to time after the first"
    except Exception as exc:
        out.error = _error(exc)
    return out


def measure_readiness(databin: str, runs: List[Run], precisions=PRECISIONS, steps: int = 10,
                      warmup: Optional[int] = None, max_tokens: int = 4000, device: str = "cuda",
                      loader_batches: int = 50, num_workers: int = 1, seed: int = 1,
                      progress=lambda message: None, time_budget_s: Optional[float] = None) -> Readiness:
    """Measure every run at every precision that ``device`` supports, and its loader; with
    ``time_budget_s``, a precision whose turn would end past the budget (judged by the time
    spent so far per precision) is skipped with a note, and loaders past it are not timed.
    ``warmup`` untimed steps per run cycle through the timed batches (default: ``steps``,
    every timed batch once)."""
    began = time.perf_counter()
    import resource

    import torch

    warmup = steps if warmup is None else warmup
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be at least 1 and warm-up at least 0")
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precision(s) {', '.join(unknown)}: choose from {', '.join(PRECISIONS)}")
    dev = torch.device(device)
    skipped = {p: why for p in precisions for why in [unsupported(p, dev)] if why}
    measured = [p for p in precisions if p not in skipped]
    built = _build(databin, runs, progress)
    first = next((b for b in built.values() if not isinstance(b, str)), None)
    if first is None:
        raise ValueError(f"no run could be built; the first said: {built[runs[0].spec]}")
    chosen = _choose_batches(first.task, max_tokens, steps, seed)
    for b in built.values():
        if not isinstance(b, str):
            dataset = b.task.dataset("train")
            b.samples = [dataset.collater([dataset[i] for i in batch]) for batch in chosen]
    timings = {}
    for i, p in enumerate(measured):
        elapsed = time.perf_counter() - began
        if time_budget_s and i and elapsed * (i + 1) / i > time_budget_s:  # the next would overrun
            skipped[p] = f"not measured: the time budget ({time_budget_s:.0f} s) would be spent"
            continue
        timings[p] = _time_precision(built, runs, p, dev, warmup, steps, progress)
    measured = list(timings)
    loader = {}
    for r in runs:
        progress(f"loader {r.spec}")
        if time_budget_s and time.perf_counter() - began > time_budget_s:
            loader[r.spec] = Loader(error=f"not timed: the time budget ({time_budget_s:.0f} s) was spent")
            continue
        loader[r.spec] = _time_loader(built[r.spec], max_tokens, loader_batches, num_workers, seed)
    rss = None if dev.type == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return Readiness(device_name(dev), runs, measured, skipped, timings, loader, steps, warmup,
                     max_tokens, num_workers, rss)


def _num(value: Optional[float], digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(result: Readiness, command: str = "") -> str:
    """The readiness table: a row per run; tokens/s and the ratio to its reference per
    measured precision, peak GPU memory per precision, loader and step batches/s."""
    cuda = not result.device.startswith("CPU")
    footnotes: List[str] = []

    def cell(text: str) -> str:  # an error goes to a footnote
        footnotes.append(text)
        return f"failed [{len(footnotes)}]"

    head = [f"GPU readiness on **{result.device}**: {result.steps} timed steps after "
            f"{result.warmup} warm-up, at most {result.max_tokens} tokens per batch, loader "
            f"with --num-workers {result.num_workers}."]
    if command:
        head.append(f"Command: `{command}`")
    for p, why in result.skipped.items():
        head.append(f"{p}: {why}.")
    if not cuda:
        head.append(f"Peak memory: per run only on CUDA; the whole process's peak RSS was "
                    f"{_num(result.peak_rss_mb)} MB.")
    head.append("tok/s: target tokens per second of forward + backward + Adam; ×: over the "
                "reference's (a mechanism's backbone; a backbone's fairseq peer), same batches "
                "and precision. Loader keeps up: loader batches/s ≥ the fastest step's.")
    cols = ["run", "reference"]
    for p in result.precisions:
        cols += [f"{p} tok/s", "×"]
    cols += [f"peak MB {'/'.join(result.precisions)}", "loader b/s", "step b/s (fastest)", "loader keeps up"]
    lines = ["\n\n".join(head), "", "| " + " | ".join(cols) + " |",
             "| " + " | ".join(["---"] * 2 + ["---:"] * (len(cols) - 3) + ["---"]) + " |"]
    for r in result.runs:
        row = [r.spec, r.reference or "–"]
        peaks = []
        for p in result.precisions:
            t = result.timings[p][r.spec]
            if t.error:
                row += [cell(f"{r.spec}, {p}: {t.error}"), "–"]
            else:
                flag = f" ({t.overflows} skipped by the loss scaler)" if t.overflows else ""
                row += [_num(t.tokens_per_s) + flag, _num(result.ratio(p, r), 2)]
            peaks.append(_num(t.peak_mb))
        row.append("/".join(peaks) if cuda else "–")
        load = result.loader[r.spec]
        best, step_bps = result.fastest_step(r.spec)
        row.append(cell(f"{r.spec}, loader: {load.error}") if load.error else _num(load.batches_per_s, 1))
        row.append(f"{_num(step_bps, 1)} ({best})" if best else "–")
        keeps = load.batches_per_s and step_bps
        row.append(("yes" if load.batches_per_s >= step_bps else "**no**") +
                   f" ({load.batches_per_s / step_bps:.1f}×)" if keeps else "–")
        lines.append("| " + " | ".join(row) + " |")
    lines += [""] + [f"[{i}] {re.sub(r'[|]', '/', text)}" for i, text in enumerate(footnotes, 1)]
    return "\n".join(lines).rstrip() + "\n"
