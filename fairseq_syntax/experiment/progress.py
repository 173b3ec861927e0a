"""Progress of the runs a harness trains: how far each ``fairseq-train`` is through its
budget (``--max-epoch``, ``--max-update``; whichever ends first), read from its JSON log,
as a bar with the time spent and the time left at the rate since the harness started it,
one line each time a run's log moves on (fairseq logs every ``--log-interval`` updates)."""
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

from fairseq_syntax.evaluation.fairseq_log import training_position

INTERVAL = 30.0  # seconds between looks at the logs
BAR = 20  # characters of the bar


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
    since the last one (None otherwise), its time left from the rate since it was added
    (a resumed run's earlier part does not count)."""

    def __init__(self, label: str, log_path: str, budget: dict, now: float):
        self.label, self.log_path, self.budget = label, log_path, budget
        self.start = now
        self.first = self.shown = fraction_done(training_position(log_path), budget) or 0.0

    def line(self, now: float) -> Optional[str]:
        position = training_position(self.log_path)
        fraction = fraction_done(position, self.budget)
        if fraction is not None and fraction < self.first:  # started over: another command
            self.first = self.shown = 0.0
        if fraction is None or fraction <= self.shown:
            return None
        self.shown = fraction
        spent = now - self.start
        rate = (fraction - self.first) / spent if spent > 0 else 0.0
        left = (1.0 - fraction) / rate if rate > 0 else None
        return progress_line(self.label, position, self.budget, fraction, spent, left)


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
