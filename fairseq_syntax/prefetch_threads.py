"""Stop fairseq's batch-prefetch threads before the interpreter shuts down.

fairseq's ``BufferedIterator`` loads batches in a daemon thread (``BackgroundConsumer``).
When ``fairseq-train`` stops mid-epoch (``--max-update``), that thread may still be inside a
torch op at exit; CPython < 3.14 ends such a thread with ``pthread_exit``, whose unwinding
through torch's C++ aborts the whole process ("terminate called without an active
exception", exit status -6) after the last checkpoint is saved. At exit, each live consumer
is told to stop after the batch it holds, its queue is drained so it never blocks, and it
is joined. fairseq gives its prefetch thread no stop, hence the private fields; a process
without a live prefetch thread at exit is left alone (``docs/design.md`` §8).
"""
import atexit
import queue
import threading
import time

from fairseq.data.iterators import BackgroundConsumer


def stop_prefetch_threads(timeout: float = 60.0) -> None:
    """Let every live fairseq prefetch thread finish its batch and end (at most ``timeout``
    seconds in all; a thread still waiting then is left to the interpreter)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if not isinstance(thread, BackgroundConsumer):
            continue
        thread._max_len = 0  # its loop breaks after the next put
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread._queue.get_nowait()
            except queue.Empty:
                thread.join(0.01)


atexit.register(stop_prefetch_threads)
