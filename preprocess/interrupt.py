"""SIGTERM and Ctrl-C (SIGINT) during a preprocessing run become an exception, so the
run's ``finally`` removes its staging and work folders before the process ends."""
import contextlib
import os
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The run was stopped by ``signum``; a BaseException, like KeyboardInterrupt, so that
    no ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")


class StopOnSignals:
    """While entered (main thread only), SIGTERM and SIGINT raise :class:`Interrupted`
    once; later ones are ignored, so the cleanup that follows runs to its end. Inside
    :meth:`held` a signal waits until the block is left (for steps that must not be cut
    in two: creating a folder and recording its name, the final move into place); after
    :attr:`done` is set it is dropped. Processes forked meanwhile (the parser's workers)
    get the default action back when a signal reaches them."""

    def __init__(self):
        self.done = False
        self._owner = os.getpid()
        self._holding = 0
        self._pending = None
        self._raised = False
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        return False

    def _handle(self, signum, frame):
        if os.getpid() != self._owner:  # a forked child: end as it would have
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self._raised or self.done:
            return
        if self._holding:
            self._pending = signum
            return
        self._raised = True
        raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self):
        """Delay a signal until the block is left (and drop it if :attr:`done` is set)."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None and not self.done:
                self._raised = True
                signum, self._pending = self._pending, None
                raise Interrupted(signum)
