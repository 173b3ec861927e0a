"""fairseq-train's JSON log (``--log-format json --log-file``), read once: the records of
every line, and the views the experiment, parity and benchmark take of them."""
import json
from typing import Dict, List

# the update number in fairseq's lines: during an epoch, at its end, and at its validation
UPDATE_KEYS = ("num_updates", "train_num_updates", "valid_num_updates")


def log_records(path: str, offset: int = 0) -> List[dict]:
    """The JSON object of every line of fairseq-train's ``--log-file`` from byte ``offset`` on
    (other lines, such as the config dict fairseq logs first as a Python repr, skipped)."""
    records = []
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode("utf-8", errors="replace")
            if not line.startswith("{"):
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def read_train_log(path: str) -> dict:
    """The validation loss and perplexity of the epoch ``checkpoint_best.pt`` holds (the lowest
    loss as logged, rounded; of equal ones the later, as fairseq's ``is_better`` is ``a <= b``),
    the last epoch, the last update number and the validation perplexity of every epoch (a
    resumed run's log repeats epochs: the last value counts)."""
    out = {"valid_loss": None, "valid_ppl": None, "train_epochs": None,
           "train_updates": None}
    valid_of_epoch: Dict[int, tuple] = {}  # epoch: (loss, ppl)
    for stats in log_records(path):
        if "valid_loss" in stats:
            out["train_epochs"] = int(stats["epoch"])
            valid_of_epoch[int(stats["epoch"])] = (float(stats["valid_loss"]),
                                                   float(stats["valid_ppl"]))
        for name in UPDATE_KEYS:
            if name in stats:
                out["train_updates"] = int(float(stats[name]))
    if valid_of_epoch:
        best = min(valid_of_epoch, key=lambda e: (valid_of_epoch[e][0], -e))
        out["valid_loss"], out["valid_ppl"] = valid_of_epoch[best]
    out["valid_ppl_by_epoch"] = [valid_of_epoch[e][1] for e in sorted(valid_of_epoch)]
    return out


def epoch_stats(path: str) -> Dict[int, dict]:
    """``{epoch: {"valid_ppl", "valid_loss", "train_wps"}}`` (those present)."""
    stats: Dict[int, dict] = {}
    for record in log_records(path):
        if "epoch" not in record:
            continue
        epoch = stats.setdefault(int(record["epoch"]), {})
        for key in ("valid_ppl", "valid_loss", "train_wps"):
            if key in record:
                epoch[key] = float(record[key])
    return stats


def training_position(path: str, offset: int = 0) -> dict:
    """How far training has come by the log's lines from byte ``offset`` on: ``epochs``, the
    epochs done with the share of the one under way (fairseq's ``update`` field, epoch − 1 +
    the share; an epoch's summary or validation line counts it whole), and ``updates``, the
    last update number logged; zeros before the first line (or without a log)."""
    position = {"epochs": 0.0, "updates": 0}
    try:
        records = log_records(path, offset)
    except FileNotFoundError:
        return position
    for stats in records:
        if "update" in stats:
            position["epochs"] = max(position["epochs"], float(stats["update"]))
        elif "epoch" in stats and any(k.startswith(("train_", "valid_")) for k in stats):
            position["epochs"] = max(position["epochs"], float(stats["epoch"]))
        for name in UPDATE_KEYS:
            if name in stats:
                position["updates"] = max(position["updates"], int(float(stats[name])))
    return position
