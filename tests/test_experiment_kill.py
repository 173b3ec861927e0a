"""A killed fairseq-syntax-experiment leaves no tool running, and a resumed run never goes
past its budget (issue 40 item 5)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from fairseq_syntax.cli import experiment
from fairseq_syntax.evaluation.corpus import Corpus, TestSet
from fairseq_syntax.experiment import commands, methods, runs
from fairseq_syntax.evaluation.fairseq_log import read_train_log


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kill_harness_and_watch(tmp_path, body: str) -> bool:
    """Run ``body`` (it starts a tool that writes its pid to ``started`` and sleeps) in a
    Python process, kill -9 that process once the tool runs; whether the tool is gone 5 s
    later (it is killed here either way)."""
    started = tmp_path / "started"
    script = tmp_path / "harness.py"
    script.write_text(textwrap.dedent(body).format(started=str(started), log=str(tmp_path / "log")))
    harness = subprocess.Popen([sys.executable, str(script)],
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.time() + 120
        while not (started.exists() and started.read_text().strip()):
            assert harness.poll() is None and time.time() < deadline, "the tool never started"
            time.sleep(0.1)
        tool = int(started.read_text())
        harness.kill()
        harness.wait()
        deadline = time.time() + 5
        while _alive(tool) and time.time() < deadline:
            time.sleep(0.1)
        return not _alive(tool)
    finally:
        harness.kill()
        if started.exists() and started.read_text().strip() and _alive(int(started.read_text())):
            os.kill(int(started.read_text()), signal.SIGKILL)


def test_a_tool_dies_with_the_killed_harness(tmp_path):
    assert _kill_harness_and_watch(tmp_path, """
        from fairseq_syntax.experiment.tools import run_tool
        run_tool(["sh", "-c", "echo $$ > {started}; exec sleep 60"], "{log}", None)
        """)


def test_a_function_run_in_its_own_process_dies_with_the_killed_harness(tmp_path):
    nap = tmp_path / "nap.py"
    nap.write_text(f"import os, time\nopen({str(tmp_path / 'started')!r}, 'w').write("
                   "str(os.getpid()))\ntime.sleep(60)\n")
    assert _kill_harness_and_watch(tmp_path, f"""
        import runpy
        from fairseq_syntax.experiment.tools import run_function
        if __name__ == "__main__":
            run_function(runpy.run_path, dict(path_name={str(nap)!r}), "{{log}}")
        """)


def test_a_run_resumed_after_its_budget_trains_no_more(synthetic_raw, synthetic_databin,
                                                       tmp_path):
    """fairseq-train resumed from a checkpoint at its --max-update trains one update more
    (it checks the budget after an update); the harness, killed after training and run
    again, decodes that checkpoint without training and records the updates trained; a run
    trained by an earlier invocation counts that training in its wall time."""
    args = experiment.parse_args([
        "--corpus", "synthetic", "--workdir", str(tmp_path), "--updates", "3",
        "--embed-dim", "16", "--encoder-hidden", "16", "--decoder-hidden", "32",
        "--max-tokens", "800", "--threads", "1"])
    (method,) = methods.select_methods("attentional_rnn")
    corpus = Corpus("synthetic", "en", "vf", str(synthetic_databin),
                    [TestSet("test", "test", str(synthetic_raw / "test.vf"))])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    (row, _, _), = runs.run_method(method, 1, corpus, args, env)
    assert not row.error and row.train_updates == 3
    save = runs.run_dir(args, method.key, 1)
    log = os.path.join(save, "train.log.jsonl")
    stamp_path = os.path.join(save, methods.RUN_STAMP)
    stamp = json.loads(open(stamp_path).read())
    del stamp["train_seconds"]  # killed after fairseq-train wrote its last checkpoint
    open(stamp_path, "w").write(json.dumps(stamp))
    before = open(log).read()

    (row, _, _), = runs.run_method(method, 1, corpus, args, env)
    assert not row.error
    assert row.train_updates == 3 and runs.checkpoint_progress(
        os.path.join(save, "checkpoint_last.pt"))["updates"] == 3
    assert open(log).read() == before  # no line appended: fairseq-train did not run again

    # a run trained before (by another invocation) counts that training in its wall time
    stamp["train_seconds"] = 1000.0
    open(stamp_path, "w").write(json.dumps(stamp))
    (row, _, wall), = runs.run_method(method, 1, corpus, args, env)
    assert not row.error and row.train_seconds == 1000.0 and wall >= 1000.0

    # what fairseq itself does with that checkpoint: one update past the budget
    cmd = commands.train_command(method, corpus, args, save, 1)
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    assert read_train_log(log)["train_updates"] == 4


def test_checkpoint_progress_counts_the_epochs_fairseqs_iterator_has_trained(tmp_path):
    """fairseq saves an iterator at an epoch's end as the start of the next epoch: the
    epochs trained are one fewer there, and the epoch itself when cut short mid-epoch."""
    import torch
    from fairseq.data import ListDataset, iterators

    itr = iterators.EpochBatchIterator(ListDataset(list(range(6))), collate_fn=lambda x: x,
                                       batch_sampler=[[0, 1], [2, 3], [4, 5]], epoch=1)
    path = str(tmp_path / "checkpoint.pt")
    for epochs, steps in ((1, 3), (2, 1)):  # a whole epoch, then one batch of the second
        batches = itr.next_epoch_itr(shuffle=False)
        for _ in range(steps):
            next(batches)
        torch.save({"optimizer_history": [{"num_updates": 3 * (epochs - 1) + steps}],
                    "extra_state": {"previous_training_time": 1.5,
                                    "train_iterator": itr.state_dict()}}, path)
        assert runs.checkpoint_progress(path) == {"updates": 3 * (epochs - 1) + steps,
                                                  "seconds": 1.5, "epoch": epochs}
