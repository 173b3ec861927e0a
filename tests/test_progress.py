"""The harness's [progress] lines: how far a run is, read from fairseq-train's JSON log as
fairseq writes it, against the budget of its command, and the time left at the rate
since the harness started it (a hand-worked log and clock)."""
import json
import threading

from fairseq_syntax.evaluation.fairseq_log import training_position
from fairseq_syntax.experiment.progress import ProgressMonitor, duration, fraction_done
from fairseq_syntax.experiment.runs import budget_spent
from fairseq_syntax.experiment.tools import training_budget

CONFIG = "{'_name': None, 'common': {'log_format': 'json'}}\n"  # the repr fairseq logs first


def inner(epoch, share, updates):
    # fairseq's JsonProgressBar: "update" = epoch - 1 + (i + 1) / size
    return json.dumps({"epoch": epoch, "update": round(epoch - 1 + share, 3), "loss": "8.0",
                       "num_updates": str(updates)}) + "\n"


def epoch_end(epoch, updates):
    return (json.dumps({"epoch": epoch, "valid_loss": "5.8", "valid_ppl": "27.43",
                        "valid_num_updates": str(updates)}) + "\n"
            + json.dumps({"epoch": epoch, "train_loss": "7.5",
                          "train_num_updates": str(updates)}) + "\n")


def test_the_position_is_the_epochs_done_with_the_share_of_the_current_one(tmp_path):
    log = tmp_path / "train.log.jsonl"
    assert training_position(str(log)) == {"epochs": 0.0, "updates": 0}  # not written yet
    log.write_text(CONFIG)
    assert training_position(str(log)) == {"epochs": 0.0, "updates": 0}
    log.write_text(CONFIG + inner(1, 100 / 151, 100) + epoch_end(1, 151))
    assert training_position(str(log)) == {"epochs": 1.0, "updates": 151}
    with log.open("a") as f:
        f.write(inner(2, 49 / 151, 200))
    assert training_position(str(log)) == {"epochs": 1.325, "updates": 200}


def test_the_share_of_the_budget_is_the_one_nearer_its_end():
    assert fraction_done({"epochs": 3.6, "updates": 540}, {"epochs": 12, "updates": None}) == 0.3
    assert fraction_done({"epochs": 3.6, "updates": 540}, {"epochs": None, "updates": 600}) == 0.9
    assert fraction_done({"epochs": 3.6, "updates": 540}, {"epochs": 12, "updates": 600}) == 0.9
    assert fraction_done({"epochs": 13, "updates": 1}, {"epochs": 12, "updates": None}) == 1.0
    assert fraction_done({"epochs": 3.6, "updates": 540}, {"epochs": None, "updates": None}) is None


def test_the_budget_is_read_from_the_training_command():
    cmd = ["fairseq-train", "bin", "--max-epoch", "12", "--seed", "1"]
    assert training_budget(cmd) == {"epochs": 12.0, "updates": None, "hours": None}
    cmd = ["fairseq-train", "bin", "--max-update", "2400", "--stop-time-hours", "0.5"]
    assert training_budget(cmd) == {"epochs": None, "updates": 2400.0, "hours": 0.5}
    # fairseq's 0 is no limit: nothing is spent by it
    assert not budget_spent(["fairseq-train", "--max-update", "0"], {"updates": 7, "seconds": 1})
    assert budget_spent(["fairseq-train", "--max-update", "7"], {"updates": 7, "seconds": 1})


def test_durations_read_as_people_write_them():
    assert [duration(s) for s in (0, 40.4, 59.6, 61, 719, 3599, 3600, 7500)] == [
        "0 s", "40 s", "1 min", "1 min", "12 min", "1 h 00 min", "1 h 00 min", "2 h 05 min"]


def test_a_run_prints_a_line_each_time_its_log_moves_on_with_the_time_left(tmp_path):
    """A new run: 4 of its 12 epochs in 600 s, 8 to go, so 1,200 s left."""
    log = tmp_path / "train.log.jsonl"
    clock = [1000.0]
    monitor = ProgressMonitor(threading.Lock(), clock=lambda: clock[0])
    monitor.add("lstm seed 1", str(log), {"epochs": 12, "updates": None})
    assert monitor.poll() == []  # no log yet
    log.write_text(CONFIG + "".join(epoch_end(e, 151 * e) for e in range(1, 5)))
    clock[0] = 1600.0
    assert monitor.poll() == [
        "[progress] lstm seed 1 |██████░░░░░░░░░░░░░░|  33 % epoch 4.0 of 12, update 604, "
        "10 min, ETA 20 min"]
    assert monitor.poll() == []  # printed once
    with log.open("a") as f:
        f.write(inner(5, 0.5, 680))
    clock[0] = 1750.0  # 4.5 epochs in 750 s: 7.5 to go at 167 s an epoch
    assert monitor.poll() == [
        "[progress] lstm seed 1 |███████░░░░░░░░░░░░░|  38 % epoch 4.5 of 12, update 680, "
        "12 min, ETA 21 min"]
    with log.open("a") as f:
        f.write("".join(epoch_end(e, 151 * e) for e in range(5, 13)))
    clock[0] = 4000.0
    assert monitor.poll() == [
        f"[progress] lstm seed 1 |{'█' * 20}| 100 % epoch 12.0 of 12, update 1812, 50 min; "
        "trained, now decoding and scoring"]
    monitor.remove("lstm seed 1")
    with log.open("a") as f:
        f.write(epoch_end(13, 1963))
    assert monitor.poll() == []


def test_a_resumed_run_is_timed_by_its_new_lines_only(tmp_path):
    """Killed half-way through epoch 3, it resumes from epoch 2's checkpoint: the old
    lines of epoch 3 are trained again and do not count. Its first new line (epoch 2.5)
    has no ETA; from there 1.5 epochs in 600 s, 8 to go: 3,200 s left."""
    log = tmp_path / "train.log.jsonl"
    log.write_text(CONFIG + epoch_end(1, 151) + epoch_end(2, 302) + inner(3, 0.5, 377))
    clock = [1000.0]
    monitor = ProgressMonitor(threading.Lock(), clock=lambda: clock[0])
    monitor.add("lstm seed 1", str(log), {"epochs": 12, "updates": None})
    assert monitor.poll() == []  # the killed process's lines
    with log.open("a") as f:
        f.write(CONFIG + inner(3, 0.5, 377))
    clock[0] = 1150.0
    assert monitor.poll() == [
        "[progress] lstm seed 1 |████░░░░░░░░░░░░░░░░|  21 % epoch 2.5 of 12, update 377, 2 min"]
    with log.open("a") as f:
        f.write(epoch_end(3, 453) + epoch_end(4, 604))
    clock[0] = 1750.0
    assert monitor.poll() == [
        "[progress] lstm seed 1 |██████░░░░░░░░░░░░░░|  33 % epoch 4.0 of 12, update 604, "
        "12 min, ETA 53 min"]


def test_a_run_that_starts_over_is_followed_from_zero(tmp_path):
    """Another training command empties the run's folder: the old log's epochs no longer
    count, and the new log's first line prints."""
    log = tmp_path / "train.log.jsonl"
    log.write_text(CONFIG + epoch_end(1, 100) + epoch_end(2, 200))
    clock = [0.0]
    monitor = ProgressMonitor(threading.Lock(), clock=lambda: clock[0])
    monitor.add("tree2seq seed 2", str(log), {"epochs": None, "updates": 1000})
    log.write_text(CONFIG + inner(1, 0.5, 50))
    clock[0] = 100.0
    assert monitor.poll() == [
        "[progress] tree2seq seed 2 |█░░░░░░░░░░░░░░░░░░░|   5 % epoch 0.5, update 50 of 1000, "
        "2 min, ETA 32 min"]
