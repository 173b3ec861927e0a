"""Progress of the runs a harness trains: how far each ``fairseq-train`` is through its
budget (``--max-epoch``, ``--max-update``; whichever ends first), read from its JSON log,
as a bar with the time spent and the time left at the rate of what it trained since the
harness took it up, one line each time a run's log moves on (fairseq logs every
``--log-interval`` updates)."""
import os
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

from fairseq_syntax.evaluation.fairseq_log import training_position

INTERVAL = 30.0  # seconds between looks at the logs
BAR = 20  # characters of the bar


def log_size(path: str) -> int:
    """The bytes of a log written so far (0: none yet)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def fraction_done(position: dict, budget: dict) -> Optional[float]:
    """The share of ``budget`` (``epochs``, ``updates``: None where not given) that a
    training at ``position`` (:func:`~fairseq_syntax.evaluation.fairseq_log.training_position`)
    has spent: of the budgets given, the one nearer its end. None without either."""
    shares = [position[k] / budget[k] for k in ("epochs", "updates") if budget.get(k)]
    return min(1.0, max(shares)) if shares else None


def duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``2 h 05 min``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = int(round(seconds / 60))
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def progress_line(label: str, position: dict, budget: dict, fraction: float,
                  spent: float, left: Optional[float]) -> str:
    """``[progress] LABEL |██████░░░░░░░░░░░░░░| 30 % epoch 3.6 of 12, update 540, 14 min,
    ETA 33 min`` (at 100 %: trained, now decoding and scoring)."""
    full = int(fraction * BAR)
    where = ", ".join(f"{name} {value}" + (f" of {budget[key]:g}" if budget.get(key) else "")
                      for name, key, value in (("epoch", "epochs", f"{position['epochs']:.1f}"),
                                               ("update", "updates", position["updates"])))
    then = ("; trained, now decoding and scoring" if fraction >= 1.0 else
            f", ETA {duration(left)}" if left is not None else "")
    return (f"[progress] {label} |{'█' * full}{'░' * (BAR - full)}| {100 * fraction:3.0f} % "
            f"{where}, {duration(spent)}{then}")


class RunProgress:
    """One training run followed through its log: the line to print when it has moved on
    since the last one (None otherwise), and its time left at the rate since it was added.
    Only the lines its log gains after that count: a resumed run's log holds its killed
    process's lines, which may run past the checkpoint it resumes from. A run new to its
    log (none yet, or one written afresh) is timed from 0 when added; a resumed one from
    the first position its new lines show, so its first line has no ETA."""

    def __init__(self, label: str, log_path: str, budget: dict, now: float):
        self.label, self.log_path, self.budget, self.start = label, log_path, budget, now
        self.offset = log_size(log_path)
        self.origin: Optional[tuple] = (0.0, now) if self.offset == 0 else None  # (share, time)
        self.shown = 0.0  # the share of the last line printed

    def line(self, now: float) -> Optional[str]:
        if log_size(self.log_path) < self.offset:  # written afresh: another training command
            self.offset, self.origin, self.shown = 0, (0.0, self.start), 0.0
        position = training_position(self.log_path, self.offset)
        fraction = fraction_done(position, self.budget)
        if fraction is None or not (position["epochs"] or position["updates"]):
            return None  # nothing logged since it was added
        if self.origin is None:
            self.origin = (fraction, now)
        elif fraction <= self.shown:
            return None
        self.shown = fraction
        first, since = self.origin
        rate = (fraction - first) / (now - since) if now > since else 0.0
        left = (1.0 - fraction) / rate if rate > 0 else None
        return progress_line(self.label, position, self.budget, fraction, now - self.start, left)


class ProgressMonitor:
    """The runs under way; :meth:`poll` gives the lines of those that moved on, and a
    daemon thread (:meth:`start`, :meth:`stop`) prints them every ``interval`` seconds
    under ``lock`` (the harness's own lines take it too)."""

    def __init__(self, lock: threading.Lock, interval: float = INTERVAL, out=None,
                 clock: Callable[[], float] = time.time):
        self.lock, self.interval, self.clock = lock, interval, clock
        self.out = out or sys.stderr
        self.runs: Dict[str, RunProgress] = {}
        self.stopped = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def add(self, label: str, log_path: str, budget: dict) -> None:
        self.runs[label] = RunProgress(label, log_path, budget, self.clock())

    def remove(self, label: str) -> None:
        self.runs.pop(label, None)

    def poll(self) -> List[str]:
        now = self.clock()
        return [line for run in list(self.runs.values()) if (line := run.line(now))]

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            lines = self.poll()
            if lines:
                with self.lock:
                    print("\n".join(lines), file=self.out, flush=True)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
