"""Run records: one JSON file per finished run (method, seed), and the host facts they hold."""
import datetime
import json
import os
import platform
import sys
from dataclasses import asdict
from typing import List, Optional

from .methods import RECIPE_KEYS_ADDED, RECORD_FORMAT, Row
from .tools import write_atomically


def _version(*dists: str) -> Optional[str]:
    from importlib import metadata

    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_facts(args, threads: Optional[int]) -> dict:
    """Facts about the machine and the software a run was measured with."""
    device = "cpu"
    if args.gpu:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "gpu"
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "device": device,
        "threads_per_process": threads,
        "jobs": args.jobs,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "fairseq": _version("fairseq-fixed", "fairseq"),
        "sacrebleu": _version("sacrebleu"),
    }


def run_record(row: Row, settings: dict, commands: dict, wall_seconds: float, host: dict,
               save: str, databin: str, command: str) -> dict:
    """The JSON record of one finished run. Keys: ``format``, ``method``, ``seed``,
    ``settings`` (:func:`run_settings`; compared to skip a run and to choose the runs of
    the table), ``scores`` (the fields of :class:`Row` but ``key``/``arch``/``seed``/
    ``error``), ``commands`` (train, generate_test, generate_gen, align, induced_trees: the
    ones that ran, the plugin's folder as ``"$(fairseq-syntax-user-dir)"``),
    ``wall_seconds`` (training, decoding and scoring), ``date`` (UTC, when it finished),
    ``host`` (:func:`host_facts`), ``run_dir`` (logs, checkpoint and outputs),
    ``data_bin``, and ``experiment_command`` (the invocation that ran it)."""
    scores = {k: v for k, v in asdict(row).items() if k not in ("key", "arch", "seed", "error")}
    return {
        "format": RECORD_FORMAT,
        "method": row.key,
        "seed": row.seed,
        "settings": settings,
        "scores": scores,
        "commands": commands,
        "wall_seconds": round(wall_seconds, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host,
        "run_dir": save,
        "data_bin": databin,
        "experiment_command": command,
    }


def write_record(path: str, record: dict) -> None:
    write_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def read_record(path: str) -> Optional[dict]:
    """The record in ``path``, or None when it is missing or not a run record."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not all(
            k in record for k in ("method", "seed", "settings", "scores")):
        return None
    recipe = record["settings"].get("recipe")
    if isinstance(recipe, dict):  # written before a recipe key existed: trained with its value
        record["settings"]["recipe"] = {**recipe, **{
            k: v for k, v in RECIPE_KEYS_ADDED.items() if k not in recipe}}
    return record


def read_records(results_dir: str) -> List[dict]:
    """Every run record in ``results_dir`` (other files are skipped with a note)."""
    records = []
    if not os.path.isdir(results_dir):
        return records
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        record = read_record(os.path.join(results_dir, name))
        if record is None:
            print(f"fairseq-syntax-experiment: note: {results_dir}/{name} is not a run record, "
                  "skipped", file=sys.stderr)
        else:
            records.append(record)
    return records
