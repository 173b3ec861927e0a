"""fairseq's prefetch thread, caught inside a torch op at exit, must not abort the process
(``fairseq_syntax.prefetch_threads``). Without the plugin's module the same script exits
with -6 ("terminate called without an active exception") on CPython 3.11, as
``fairseq-train`` did once in CI after ``--max-update``."""
import os
import subprocess
import sys
import textwrap

# fairseq's real BufferedIterator over batches that take many torch ops each; the main
# thread takes one batch and exits while the daemon thread computes the next.
SCRIPT = textwrap.dedent("""
    import torch
    from fairseq.data.iterators import BufferedIterator
    import fairseq_syntax.prefetch_threads

    class SlowBatches:
        def __len__(self):
            return 1000

        def __iter__(self):
            x = torch.randn(300, 300)
            while True:
                for _ in range(20):
                    x = torch.tanh(x @ x)
                yield x.sum()

    batches = BufferedIterator(2, SlowBatches())
    next(batches)
    print("exiting", flush=True)
""")


def test_the_plugin_lets_the_process_exit_cleanly_with_a_prefetch_thread_in_a_torch_op():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "exiting\n"
