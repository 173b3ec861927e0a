"""Syntax side-files in fairseq's indexed-dataset format (DESIGN.md section 2).

Next to fairseq's ``{split}.{src}-{tgt}.{lang}.bin/.idx`` the data-bin holds

* ``{split}.{src}-{tgt}.{src}.heads``: per sentence, ``n + 1`` int32 values (one per
  subword token, then eos): the index of the head, ``-1`` for the root;
* ``{split}.{src}-{tgt}.{src}.words`` (format 2): per sentence, ``n + 1`` int32 values:
  the 0-based index of the word each subword token belongs to, then ``-1`` for eos (not
  a word). The collater needs it for the word-level distances: the heads alone do not
  give word boundaries (a one-piece word whose head is the previous word looks like a
  continuation piece), and the tokens' ``▁`` marks are lost on ``<unk>``;
* ``{split}.{src}-{tgt}.{src}.tree``: per sentence, ``2 (n - 1)`` int32 values, the
  flattened ``(left, right)`` children of the binary tree's internal nodes (leaves are
  ``0 .. n-1``, internal node ``k`` is numbered ``n + k``, children before parents, root
  last); empty when the sentence has no tree. Format 2: the word-level tree with each
  word's pieces hung below it (:func:`~fairseq_syntax.syntax.dependency.subword_binary_tree`).

``syntax_manifest.json`` records ``format_version`` (:data:`FORMAT_VERSION`);
:func:`check_format_version` refuses side-files of another version.
"""
import json
import os
import shlex
from typing import Iterable, Optional

import numpy as np
import torch
from fairseq.data import indexed_dataset

HEADS = "heads"
WORDS = "words"
TREE = "tree"
MANIFEST = "syntax_manifest.json"

FORMAT_VERSION = 2
"""Version of the side-files' content, recorded in the manifest. 1: distances and binary
trees over subword pieces (no ``words`` side-file); 2 (issue 15): distances between words
(``words`` side-file), binary trees binarised over words with each word's pieces hung
below it."""

PREPROCESS = "fairseq-syntax-preprocess"


def side_file_prefix(data_dir: str, split: str, src: str, tgt: str, kind: str) -> str:
    """Path prefix (no .bin/.idx) of a side-file of ``kind`` (``heads`` or ``tree``)."""
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{src}.{kind}")


def write_side_file(prefix: str, rows: Iterable[np.ndarray]) -> int:
    """Write int32 rows as an mmap indexed dataset at ``prefix``; returns the row count."""
    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(prefix), dtype=np.int32
    )
    count = 0
    for row in rows:
        builder.add_item(torch.from_numpy(np.asarray(row, dtype=np.int32).reshape(-1)))
        count += 1
    builder.finalize(indexed_dataset.index_file_path(prefix))
    return count


def read_side_file(prefix: str) -> Optional[indexed_dataset.MMapIndexedDataset]:
    """Open a side-file, or return None when it does not exist."""
    if not indexed_dataset.MMapIndexedDataset.exists(prefix):
        return None
    return indexed_dataset.MMapIndexedDataset(prefix)


def read_manifest(data_dir: str) -> dict:
    """The data-bin's ``syntax_manifest.json`` ({} when it has none)."""
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def rebuild_command(data_dir: str, manifest: dict) -> str:
    """The ``fairseq-syntax-preprocess`` command line that rebuilds a data-bin from the
    inputs its manifest records: the command itself when recorded (format 2 on), else
    assembled from the recorded files, parser, alignments and the data-bin's own
    ``spm.model`` (so the subword tokens stay the same)."""
    recorded = manifest.get("command") or {}
    if recorded.get("argv"):
        argv = list(recorded["argv"])
        if "--force" not in argv:
            argv.append("--force")
        cwd = recorded.get("cwd")
        return (f"cd {shlex.quote(cwd)} && " if cwd else "") + shlex.join(argv)
    src, tgt = manifest.get("source_lang", "SRC"), manifest.get("target_lang", "TGT")
    splits = manifest.get("splits") or {}

    def prefix(name):
        path = (splits.get(name) or {}).get("source_file") or ""
        return path[: -len(src) - 1] if path.endswith("." + src) else path

    def numbered(base):
        names = sorted((n for n in splits if n.rstrip("0123456789") == base),
                       key=lambda n: int(n[len(base):] or 0))
        return ",".join(prefix(n) for n in names)

    argv = [PREPROCESS, "--source-lang", src, "--target-lang", tgt,
            "--trainpref", prefix("train") or "TRAIN_PREFIX"]
    for option, base in (("--validpref", "valid"), ("--testpref", "test")):
        if numbered(base):
            argv += [option, numbered(base)]
    parse = manifest.get("parse") or {}
    if parse.get("kind") == "spacy":
        parser = parse.get("parser") or {}
        name = parser.get("name") or "SPACY_PIPELINE"
        if os.path.sep in name or name.startswith("."):  # a folder: its absolute path
            name = parser.get("package") or name
        argv += ["--parser", name]
        files = parse.get("files") or []
        train_source = (splits.get("train") or {}).get("source_file") or ""
        if files and train_source and os.path.dirname(files[0]) != os.path.dirname(train_source):
            argv += ["--parse-cache", os.path.dirname(files[0])]
        if manifest.get("source_tokenization") not in (None, "whitespace"):
            argv += ["--source-tokenization", manifest["source_tokenization"]]
    else:
        files = parse.get("files") or []
        train_source = (splits.get("train") or {}).get("source_file") or ""
        if files and train_source and files[0].startswith(train_source + "."):
            suffix = files[0][len(train_source) + 1:]
            if suffix != "conllu":
                argv += ["--parse-suffix", suffix]
    align = manifest.get("alignments") or {}
    if align.get("kind") == "eflomal":
        argv += ["--align", "eflomal"]
    elif align.get("kind") == "pharaoh":
        argv += ["--align-suffix", align.get("suffix") or "align"]
    if manifest.get("spm_model"):
        argv += ["--spm-model", os.path.join(data_dir, manifest["spm_model"])]
    argv += ["--destdir", data_dir, "--force"]
    return shlex.join(argv)


def check_format_version(data_dir: str, manifest: Optional[dict] = None) -> dict:
    """Refuse a data-bin whose syntax side-files are not of :data:`FORMAT_VERSION`; the
    error names the command that rebuilds it. Returns the manifest."""
    manifest = read_manifest(data_dir) if manifest is None else manifest
    if not manifest:
        raise ValueError(
            f"{data_dir} has no {MANIFEST}, so its syntax side-files cannot be checked: "
            f"make the data-bin with {PREPROCESS}"
        )
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        what = {1: " (distances and binary trees over subword pieces)"}.get(version, "")
        raise ValueError(
            f"{os.path.join(data_dir, MANIFEST)}: the syntax side-files are format "
            f"{version}{what}, this code reads format {FORMAT_VERSION} (distances between "
            "words, binary trees over words with each word's pieces below it; DESIGN.md "
            f"section 2). Rebuild the data-bin (and retrain models trained on it):\n  "
            f"{rebuild_command(data_dir, manifest)}"
        )
    return manifest
