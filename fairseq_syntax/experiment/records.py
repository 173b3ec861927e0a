"""Run records: one JSON file per finished run (method, seed), and the host facts they hold."""
import datetime
import hashlib
import json
import os
import platform
import re
import sys
from dataclasses import asdict
from typing import Dict, List, Optional

from fairseq_syntax.data.side_files import (SIDE_FILE_SHA256, SPM_SHA256, file_sha256,
                                            read_manifest)
from fairseq_syntax.evaluation.host import cpu_kernels, cpu_model
from fairseq_syntax.syntax.errors import SyntaxInputError

from .methods import RECIPE_KEYS_ADDED, RECORD_FORMAT, Row
from .tools import write_atomically

# beside the records: the paired tests' cache of :mod:`.comparisons`, not a record
SIGNIFICANCE_CACHE = "significance.json"


def _version(*dists: str) -> Optional[str]:
    from importlib import metadata

    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def host_facts(args, threads: Optional[int]) -> dict:
    """Facts about the machine and the software a run was measured with."""
    device = "cpu"
    if args.gpu:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "gpu"
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        **cpu_kernels(),
        "cpus": os.cpu_count(),
        "device": device,
        "threads_per_process": threads,
        "jobs": args.jobs,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "fairseq": _version("fairseq-fixed", "fairseq"),
        "sacrebleu": _version("sacrebleu"),
    }


def checksums_sha256(checksums: Dict[str, str]) -> str:
    """One sha256 over ``{file name: sha256}`` (names sorted): a data-bin's side-files' or
    token files' digest."""
    return hashlib.sha256(json.dumps(checksums, sort_keys=True).encode("utf-8")).hexdigest()


def token_files_sha256(databin: str, src: str, tgt: str) -> Optional[str]:
    """:func:`checksums_sha256` of fairseq's own files in ``databin``: the dictionaries
    ``dict.{src,tgt}.txt`` and every split's ``*.{src}-{tgt}.{src|tgt}.bin/.idx``, the tokens
    every method reads (side-files and ``spm.model`` apart). None where there are none."""
    names = [n for n in os.listdir(databin)
             if n in (f"dict.{src}.txt", f"dict.{tgt}.txt") or any(
                 n.endswith(f".{src}-{tgt}.{lang}.{ext}")
                 for lang in (src, tgt) for ext in ("bin", "idx"))]
    return checksums_sha256({n: file_sha256(os.path.join(databin, n)) for n in names}) \
        if names else None


def data_bin_digest(databin: str) -> Optional[dict]:
    """What tells one data-bin from another, from its manifest: ``spm``, the sha256 of its
    sentencepiece model file; ``side_files``, a sha256 over its side-files' sha256s (the
    parses, trees and alignments; eflomal has no seed, so a rebuilt data-bin may differ
    here); and ``tokens`` (:func:`token_files_sha256`, recorded since 2026-12-01: before
    then a trained model held the name of its build folder, so ``spm`` differed between
    two builds of the same text). None where the manifest has neither checksum."""
    try:
        manifest = read_manifest(databin)
    except SyntaxInputError:
        return None
    spm, sides = manifest.get(SPM_SHA256), manifest.get(SIDE_FILE_SHA256)
    if not spm and not sides:
        return None
    return {"spm": spm, "side_files": sides and checksums_sha256(sides),
            "tokens": token_files_sha256(databin, manifest.get("source_lang", ""),
                                         manifest.get("target_lang", ""))}


def run_record(row: Row, settings: dict, commands: dict, wall_seconds: float, host: dict,
               save: str, databin: str, command: str, places: Dict[str, str]) -> dict:
    """The JSON record of one finished run. Keys: ``format``, ``method``, ``seed``,
    ``settings`` (:func:`run_settings`; compared to skip a run and to choose the runs of
    the table), ``scores`` (the fields of :class:`Row` but ``key``/``arch``/``seed``/
    ``error``), ``commands`` (train, generate_test, generate_gen, align, induced_trees: the
    ones that ran, the plugin's folder as ``"$(fairseq-syntax-user-dir)"``),
    ``wall_seconds`` (training, decoding and scoring), ``date`` (UTC, when it finished),
    ``host`` (:func:`host_facts`, with ``training_cpus``: the machines that trained it,
    :func:`~fairseq_syntax.evaluation.host.run_cpus`), ``run_dir`` (logs, checkpoint and outputs),
    ``data_bin`` with ``data_bin_digest`` (:func:`data_bin_digest`), and
    ``experiment_command`` (the invocation that ran it). Paths are shown
    by :func:`portable` with ``places`` (e.g. ``$WORKDIR``): a record holds no machine path."""
    scores = {k: v for k, v in asdict(row).items()
              if k not in ("key", "arch", "seed", "error", "hypotheses", "hypotheses_tok",
                           "training_cpus")}
    return {
        "format": RECORD_FORMAT,
        "method": row.key,
        "seed": row.seed,
        "settings": settings,
        "scores": scores,
        "commands": {k: portable(v, places) for k, v in commands.items()},
        "wall_seconds": round(wall_seconds, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {**host, "training_cpus": row.training_cpus},
        "run_dir": portable(save, places),
        "data_bin": portable(databin, places),
        "data_bin_digest": data_bin_digest(databin),
        "experiment_command": portable(command, places),
    }


def wall_seconds(record: dict) -> float:
    """A run's wall seconds (training, decoding and scoring), at least its training time:
    a run resumed by a harness older than 2026-11-29's counted only its last invocation."""
    train = (record.get("scores") or {}).get("train_seconds") or 0
    return max(float(record.get("wall_seconds") or 0), float(train))


def portable(text: str, places: Dict[str, str]) -> str:
    """``text`` with each folder of ``places`` (placeholder -> path, e.g. ``$WORKDIR``)
    written as its placeholder, longest path first, and the current folder as ``.``."""
    here = os.getcwd()
    for name, path in sorted({**places, ".": here}.items(), key=lambda kv: -len(kv[1])):
        path = os.path.abspath(path)
        if path != os.sep:
            text = re.sub(re.escape(path) + r"(?![\w.-])", lambda _: name, text)
    return text


def places_of(workdir: Optional[str], databin: str, corpus_dir: Optional[str] = None,
              results_dir: Optional[str] = None, results: Optional[str] = None) -> Dict[str, str]:
    """The placeholders of :func:`portable` for a run (``None`` entries left out): the work
    folder, the data-bin, the corpus's folder (default the data-bin's parent: the raw and
    tokenised test files, gold trees), the results folder and file (outside the current
    folder)."""
    here = os.path.join(os.getcwd(), "")
    results = {k: v for k, v in (("$RESULTS_DIR", results_dir), ("$RESULTS", results))
               if v and not os.path.abspath(v).startswith(here)}  # else relative: ./docs/...
    places = {"$WORKDIR": workdir, "$DATA_BIN": databin,
              "$CORPUS_DIR": corpus_dir or os.path.dirname(os.path.abspath(databin)), **results}
    return {k: v for k, v in places.items() if v}


def portable_record(record: dict) -> dict:
    """``record`` with :func:`portable` applied to its paths, the places read from its own
    fields (``run_dir`` is ``WORKDIR/runs/METHOD/seedN``; the experiment command's options):
    rewrites a record written before records held placeholders."""
    import shlex

    words = shlex.split(record["experiment_command"])
    opts = {w: v for w, v in zip(words, words[1:]) if w.startswith("--")}
    workdir = opts.get("--workdir") or os.path.dirname(os.path.dirname(os.path.dirname(
        record["run_dir"])))
    raw = opts.get("--raw")
    places = places_of(workdir, record["data_bin"],
                       opts.get("--corpus-dir") or (raw and os.path.dirname(raw)),
                       opts.get("--results-dir"), opts.get("--results"))
    places = {k: v for k, v in places.items() if os.path.isabs(v)}
    out = dict(record)
    for key in ("run_dir", "data_bin", "experiment_command"):
        out[key] = portable(record[key], places)
    out["commands"] = {k: portable(v, places) for k, v in record["commands"].items()}
    return out


def hypotheses_path(record_path: str, tokenised: bool = False) -> str:
    """Where a run's translations are kept beside its record (``METHOD.seedN.hyp.json.gz``;
    tokenised, as RIBES scores them: ``METHOD.seedN.hyp.tok.json.gz``)."""
    return record_path[:-len(".json")] + (".hyp.tok.json.gz" if tokenised else ".hyp.json.gz")


def write_hypotheses(record_path: str, hypotheses: Dict[str, List[str]],
                     tokenised: bool = False) -> None:
    """Each test set's translations of a run (detokenised, or ``tokenised``), gzipped JSON,
    written atomically (no timestamp in the gzip header: the same translations give the
    same bytes)."""
    import gzip
    import io

    from fairseq_syntax.syntax.text_io import atomic_file

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(json.dumps(hypotheses, ensure_ascii=False).encode("utf-8"))
    with atomic_file(hypotheses_path(record_path, tokenised), binary=True) as f:
        f.write(buf.getvalue())


def read_hypotheses(record_path: str, tokenised: bool = False
                    ) -> Optional[Dict[str, List[str]]]:
    """The translations kept beside the record (None: the run kept none: version 1, or no
    tokenised ones: RIBES was not scored or the record is older than 2026-11-28)."""
    import gzip

    path = hypotheses_path(record_path, tokenised)
    if not os.path.exists(path):
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


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
    if "tests" not in record["scores"]:  # version 1: the test split's fields had no
        record["scores"] = scores_by_test_set(record)  # prefix, the gen split's gen_
    record["path"] = path
    recipe = record["settings"].get("recipe")
    if isinstance(recipe, dict):  # written before a recipe key existed: trained with its value
        record["settings"]["recipe"] = {**recipe, **{
            k: v for k, v in RECIPE_KEYS_ADDED.items() if k not in recipe}}
    return record


REPLACED_DIR = "replaced"


def changed_settings(record: Optional[dict], settings: dict) -> List[str]:
    """The settings keys in which an existing record differs from ``settings`` (sorted)."""
    if record is None:
        return []
    old = record["settings"]
    return sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))


def keep_replaced(path: str, settings: dict) -> Optional[str]:
    """Before a run of other settings writes its record to ``path``, move the record found
    there and its translations to ``replaced/METHOD.seedN.DATE.json`` beside it, where no
    table reads them; nothing is lost. Returns the new path (None: nothing to keep)."""
    record = read_record(path)
    if not changed_settings(record, settings):
        return None
    folder = os.path.join(os.path.dirname(path), REPLACED_DIR)
    os.makedirs(folder, exist_ok=True)
    stem = os.path.basename(path)[:-len(".json")]
    date = re.sub(r"[^0-9T]", "", str(record.get("date", "")))[:15] or "undated"
    target, n = os.path.join(folder, f"{stem}.{date}.json"), 1
    while os.path.exists(target):
        n += 1
        target = os.path.join(folder, f"{stem}.{date}-{n}.json")
    for tokenised in (False, True):
        if os.path.exists(hypotheses_path(path, tokenised)):
            os.replace(hypotheses_path(path, tokenised), hypotheses_path(target, tokenised))
    os.replace(path, target)
    return target


V1_TEST_FIELDS = ("bleu", "chrf", "ribes", "bleu_tok", "agreement", "agreement_counts",
                  "agreement_long", "agreement_long_counts")


def scores_by_test_set(record: dict) -> dict:
    """A version-1 record's scores with the test sets' fields under ``tests``: unprefixed
    ones of the corpus's first test set (Multi30k: test_2016_flickr), ``gen_`` ones of gen."""
    old = record["scores"]
    first = "test_2016_flickr" if record["settings"].get("corpus") == "multi30k" else "test"
    tests = {}
    for name, prefix in ((first, ""), ("gen", "gen_")):
        values = {k: old.get(prefix + k) for k in V1_TEST_FIELDS
                  if old.get(prefix + k) not in (None, "")}
        if values:
            tests[name] = values
    rest = {k: v for k, v in old.items()
            if k not in V1_TEST_FIELDS and not k.startswith("gen_")}
    return {**rest, "tests": tests}


def read_records(results_dir: str) -> List[dict]:
    """Every run record in ``results_dir`` (other files are skipped with a note, but the
    significance cache kept beside them)."""
    records = []
    if not os.path.isdir(results_dir):
        return records
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith(".json") or name.startswith(".") or name == SIGNIFICANCE_CACHE:
            continue
        record = read_record(os.path.join(results_dir, name))
        if record is None:
            print(f"fairseq-syntax-experiment: note: {results_dir}/{name} is not a run record, "
                  "skipped", file=sys.stderr)
        else:
            records.append(record)
    return records
