"""Syntax side-files in fairseq's indexed-dataset format (docs/design.md §3.1).

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
import hashlib
import itertools
import json
import os
import shlex
import struct
from typing import Iterable, Optional, Tuple

import numpy as np
import torch
from fairseq.data import indexed_dataset

from fairseq_syntax.syntax.errors import SyntaxInputError

from .tree_tensors import BatchRows

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


def read_side_file(prefix: str, split: str = "") -> Optional[indexed_dataset.MMapIndexedDataset]:
    """Open a side-file, or return None when it does not exist. A damaged file (index or
    data cut short, offsets that do not follow the sizes) or a value out of range
    (:func:`check_side_values`) is a :class:`SyntaxInputError` naming the file, the
    ``split`` and the sentence."""
    if not indexed_dataset.MMapIndexedDataset.exists(prefix):
        return None
    where = f"split '{split}', " if split else ""
    sizes, _ = _checked_index(indexed_dataset.index_file_path(prefix), where)
    data_path = indexed_dataset.data_file_path(prefix)
    _check_data_size(data_path, sizes, where)
    kind = prefix.rsplit(".", 1)[-1]
    if kind in SIDE_VALUE_RULES and sizes.sum() > 0:
        values = np.memmap(data_path, dtype=np.int32, mode="r")
        check_side_values(kind, values, sizes, data_path, where)
        del values
    return indexed_dataset.MMapIndexedDataset(prefix)


def batch_rows(rows, ids: np.ndarray) -> BatchRows:
    """Rows ``ids`` of a side-file, read straight from its memory map (fairseq's mmap
    index: byte offsets and sizes), or of a list of rows (raw input)."""
    if isinstance(rows, indexed_dataset.MMapIndexedDataset):
        values = np.frombuffer(rows._bin_buffer, dtype=rows._index.dtype)
        return BatchRows(values, rows._index._pointers[ids] // values.itemsize,
                         rows.sizes[ids].astype(np.int64))
    return BatchRows.of([rows[i] for i in ids])


_REBUILD = f"rebuild the data-bin with {PREPROCESS} (its {MANIFEST} records the command)"
_REMAKE = f"rebuild the data-bin with {PREPROCESS} (the command that made it is lost with the manifest)"
_INDEX_MAGIC = b"MMIDIDX\x00\x00"
_INDEX_HEADER = 26  # magic 9 bytes, version <Q, dtype code <B, sentence count <Q
_INT32_CODE = 4  # fairseq's indexed_dataset dtype code of np.int32


def _checked_index(path: str, where: str, side_file: bool = True) -> Tuple[np.ndarray, int]:
    """The sentence sizes and the value size in bytes of the mmap index at ``path``
    (fairseq's format: header, int32
    sizes, int64 byte offsets), after checking that the header is fairseq's, the values
    are int32 (any of fairseq's types when not ``side_file``), the file holds a size and
    an offset for every sentence it counts, and the offsets follow from the sizes."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < _INDEX_HEADER:
        raise SyntaxInputError(f"{where}the index is cut short: {len(raw)} bytes, its header "
                               f"alone takes {_INDEX_HEADER}; {_REBUILD}", path)
    magic, version, code, count = raw[:9], *struct.unpack("<QBQ", raw[9:_INDEX_HEADER])
    if magic != _INDEX_MAGIC or version != 1:
        raise SyntaxInputError(f"{where}not a fairseq mmap index (header {raw[:17]!r}); "
                               f"{_REBUILD}", path)
    if code != _INT32_CODE and (side_file or code not in indexed_dataset._code_to_dtype):
        raise SyntaxInputError(f"{where}the values are of dtype code {code}, side-files hold "
                               f"int32 (code {_INT32_CODE}); {_REBUILD}", path)
    itemsize = np.dtype(indexed_dataset._code_to_dtype[code]).itemsize
    body = len(raw) - _INDEX_HEADER
    if body != 12 * count:
        if body < 4 * count:
            missing, what = body // 4, "size"
        else:
            missing, what = min((body - 4 * count) // 8, count), "byte offset"
        what = (f"the {what}s of sentence {missing} on are missing" if missing < count
                else f"{body - 12 * count} bytes follow the last offset")
        raise SyntaxInputError(
            f"{where}the index counts {count} sentences, which take {_INDEX_HEADER + 12 * count} "
            f"bytes, but it has {len(raw)}: {what}; {_REBUILD}", path)
    sizes = np.frombuffer(raw, dtype=np.int32, count=count, offset=_INDEX_HEADER)
    offsets = np.frombuffer(raw, dtype=np.int64, count=count, offset=_INDEX_HEADER + 4 * count)
    expected = itemsize * (np.cumsum(sizes, dtype=np.int64) - sizes)
    bad = (sizes < 0) | (offsets != expected)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SyntaxInputError(
            f"{where}sentence {i}: the index gives {sizes[i]} values at byte {offsets[i]}, but "
            f"the sizes before it put it at byte {expected[i]}; {_REBUILD}", path)
    return sizes.astype(np.int64), itemsize


def _check_data_size(path: str, sizes: np.ndarray, where: str, itemsize: int = 4) -> None:
    """The data file holds exactly the values (of ``itemsize`` bytes) its index counts."""
    have = os.path.getsize(path)
    ends = itemsize * np.cumsum(sizes)
    want = int(ends[-1]) if len(ends) else 0
    if have < want:
        i = int(np.searchsorted(ends, have, side="right"))
        raise SyntaxInputError(
            f"{where}the data is cut short: {have} bytes, its index needs {want}; sentence {i} "
            f"on ({len(sizes) - i} of {len(sizes)}) is missing; {_REBUILD}", path)
    if have > want:
        raise SyntaxInputError(
            f"{where}{have - want} bytes follow the last of the {len(sizes)} sentences its index "
            f"counts (data and index of different runs?); {_REBUILD}", path)


def check_fairseq_binaries(data_dir: str, split: str, src: str, tgt: str,
                           alignments: bool = False) -> None:
    """Check fairseq's own token binaries of ``split`` (and its shards ``split1``, ...) and,
    with ``alignments``, its ``--align-suffix`` binaries, as :func:`read_side_file` checks
    the side-files: an index or data file cut short is a :class:`SyntaxInputError` naming
    the file, the split and the first sentence missing (fairseq itself fails later, on the
    first batch that reaches it, with numpy's ``offset must be non-negative``). Files in
    another format than fairseq's mmap one are left to fairseq."""
    for k in itertools.count():
        name = split + (str(k) if k else "")
        prefixes = []
        for lang in (src, tgt):
            for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):  # fairseq's order
                prefix = os.path.join(data_dir, f"{name}.{pair}.{lang}")
                if indexed_dataset.MMapIndexedDataset.exists(prefix):
                    prefixes.append(prefix)
                    break
        if not prefixes:
            return
        if alignments:
            prefixes.append(os.path.join(data_dir, f"{name}.align.{src}-{tgt}"))
        for prefix in prefixes:
            index = indexed_dataset.index_file_path(prefix)
            if not indexed_dataset.MMapIndexedDataset.exists(prefix):
                continue
            with open(index, "rb") as f:
                if f.read(len(_INDEX_MAGIC)) != _INDEX_MAGIC:
                    continue
            where = f"split '{name}', "
            sizes, itemsize = _checked_index(index, where, side_file=False)
            _check_data_size(indexed_dataset.data_file_path(prefix), sizes, where, itemsize)


def _at_most(values: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """``0 <= values <= limit`` elementwise (int32; ``limit >= 0`` where it matters), as
    one unsigned comparison: a negative value wraps to above any limit."""
    return values.view(np.uint32) <= limit.astype(np.int32, copy=False).view(np.uint32)


def _bad_heads(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Heads: ``-1`` (root) or a position of the sentence's ``n + 1`` tokens (with eos)."""
    return ~_at_most(values + np.int32(1), np.repeat(sizes, sizes))


def _bad_words(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Words: the word of each of the ``n`` pieces (``0 .. n - 1``), then ``-1`` for eos."""
    bad = ~_at_most(values, np.repeat(sizes - 2, sizes))
    eos = np.cumsum(sizes)[sizes > 0] - 1
    bad[eos] = values[eos] != -1
    return bad


def _bad_tree(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Tree: ``2 (n - 1)`` children of the internal nodes over ``n`` leaves; node ``k`` is
    ``n + k``, so its children are at most ``n + k - 1`` (children before parents)."""
    starts = np.cumsum(sizes, dtype=np.int32) - sizes
    if (sizes % 2).any():  # not a tree side-file's sizes (the size check names them)
        position = np.arange(len(values), dtype=np.int32) - np.repeat(starts, sizes)
        return ~_at_most(values, np.repeat(sizes // 2, sizes) + position // 2)
    # even rows start at even offsets: position // 2 = offset // 2 - start // 2
    half_offset = np.arange(len(values), dtype=np.int32) >> 1
    return ~_at_most(values, np.repeat(sizes // 2 - starts // 2, sizes) + half_offset)


SIDE_VALUE_RULES = {
    HEADS: (_bad_heads, "a head is -1 (root) or a position 0 .. n of the n + 1 tokens (with eos)"),
    WORDS: (_bad_words, "a piece's word is 0 .. n - 1 for n pieces, eos's is -1"),
    TREE: (_bad_tree, "internal node k of a tree over n leaves has children 0 .. n + k - 1"),
}


def check_side_values(kind: str, values: np.ndarray, sizes: np.ndarray, path: str,
                      where: str = "", block: int = 1 << 22) -> None:
    """Range-check the flat int32 ``values`` of a side-file of ``kind`` with rows of
    ``sizes`` (:data:`SIDE_VALUE_RULES`): vectorised over blocks of about ``block`` values
    (whole sentences), so memory stays bounded on large corpora. The error names the
    first bad sentence, its position and value, and counts the sentences with bad values."""
    is_bad, rule = SIDE_VALUE_RULES[kind]
    sizes = np.asarray(sizes, dtype=np.int32)
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - sizes
    first_bad, bad_sentences, first = None, 0, 0
    while first < len(sizes):
        last = max(first + 1, int(np.searchsorted(ends, starts[first] + block, side="right")))
        chunk = np.ascontiguousarray(values[starts[first]:ends[last - 1]], dtype=np.int32)
        mask = is_bad(chunk, sizes[first:last])
        if mask.any():
            bad = np.flatnonzero(mask)
            rows = first + np.searchsorted(ends[first:last] - starts[first], bad, side="right")
            bad_sentences += int(np.unique(rows).size)
            if first_bad is None:
                i = int(rows[0])
                first_bad = (i, int(chunk[bad[0]]), int(starts[first] + bad[0] - starts[i]))
        first = last
    if first_bad is not None:
        i, value, position = first_bad
        raise SyntaxInputError(
            f"{where}sentence {i}: value {value} at position {position} of {int(sizes[i])} is "
            f"out of range ({rule}); sentences with bad values: {bad_sentences}; {_REBUILD}", path)


SIDE_FILE_SHA256 = "side_file_sha256"
"""Manifest key: ``{file name: sha256}`` of every side-file ``.bin``/``.idx`` (issue 40; a
manifest of an older run has none, and its side-files are not compared)."""
SPM_SHA256 = "spm_sha256"
"""Manifest key: the sha256 of the data-bin's ``spm.model`` (issue 40; none in older runs)."""

TREE_SOURCES = {
    "dependency": "head-outward binarisations of the dependency parses",
    "constituency": "binarised bracketed constituency parses (--ptb-suffix)",
}


def file_sha256(path: str) -> str:
    """The sha256 of a file, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def side_file_checksums(data_dir: str, splits: Iterable[str], src: str, tgt: str) -> dict:
    """``{file name: sha256}`` of the side-files of ``splits`` in ``data_dir`` (the
    manifest's :data:`SIDE_FILE_SHA256`)."""
    out = {}
    for split in splits:
        for kind in (HEADS, WORDS, TREE):
            prefix = side_file_prefix(data_dir, split, src, tgt, kind)
            for path in (indexed_dataset.index_file_path(prefix),
                         indexed_dataset.data_file_path(prefix)):
                out[os.path.basename(path)] = file_sha256(path)
    return out


def check_side_file_checksum(prefix: str, split: str, manifest: dict) -> None:
    """Refuse a side-file whose ``.bin``/``.idx`` is not the one the manifest records
    (:data:`SIDE_FILE_SHA256`), e.g. a tree side-file copied from a ``--ptb-suffix`` run
    into a data-bin of dependency trees. A manifest without checksums (made before they
    were recorded) is not compared."""
    recorded = manifest.get(SIDE_FILE_SHA256)
    if not recorded:
        return
    kind = prefix.rsplit(".", 1)[-1]
    tree_source = manifest.get("tree_source", "dependency")
    what = (f"whose binary trees are {TREE_SOURCES.get(tree_source, tree_source)}, tree_source "
            f"{json.dumps(tree_source)}; a tree side-file of another run, e.g. one with or "
            "without --ptb-suffix, holds other trees" if kind == TREE else "")
    for path in (indexed_dataset.index_file_path(prefix), indexed_dataset.data_file_path(prefix)):
        name = os.path.basename(path)
        have, want = file_sha256(path), recorded.get(name)
        if have != want:
            recorded_as = (f"is not the {want[:16]}... that {MANIFEST} records"
                           if want else f"is not among those {MANIFEST} records")
            raise SyntaxInputError(
                f"split '{split}', the {kind} side-file: its sha256 {have[:16]}... {recorded_as}: "
                f"it is not the file {PREPROCESS} wrote for this data-bin"
                + (f" ({what})" if what else "") + f"; {_REBUILD}", path)


def read_manifest(data_dir: str) -> dict:
    """The data-bin's ``syntax_manifest.json`` ({} when it has none); one that is not a
    JSON object (cut short, not JSON, a list) is a :class:`SyntaxInputError`."""
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except UnicodeDecodeError as err:
        raise SyntaxInputError(f"not UTF-8 (byte {err.start}); {_REMAKE}", path) from None
    except json.JSONDecodeError as err:
        raise SyntaxInputError(f"not valid JSON at column {err.colno} ({err.msg}): cut short "
                               f"or edited; {_REMAKE}", path, err.lineno) from None
    if not isinstance(manifest, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
                int: "a number", float: "a number"}[type(manifest)]
        raise SyntaxInputError(f"holds {kind}, where a manifest is a JSON object; {_REMAKE}",
                               path)
    return manifest


def _with_destdir(argv: list, data_dir: str) -> list:
    """``argv`` with every ``--destdir`` replaced by ``data_dir``: the recorded command
    names the folder it wrote, which need not be the data-bin read now (it may have been
    moved, and another folder may live at the old path); one ``--destdir`` is added when
    none is recorded."""
    out, i, found = [], 0, False
    while i < len(argv):
        if argv[i] == "--destdir":
            out += ["--destdir", data_dir]
            i, found = i + 2, True
        elif argv[i].startswith("--destdir="):
            out.append(f"--destdir={data_dir}")
            i, found = i + 1, True
        else:
            out.append(argv[i])
            i += 1
    return out if found else out + ["--destdir", data_dir]


def rebuild_command(data_dir: str, manifest: dict) -> str:
    """The ``fairseq-syntax-preprocess`` command line that rebuilds a data-bin from the
    inputs its manifest records: the command itself when recorded (format 2 on; its
    ``--destdir`` replaced by ``data_dir``, the data-bin read now), else
    assembled from the recorded files, parser, alignments and the data-bin's own
    ``spm.model`` (so the subword tokens stay the same)."""
    recorded = manifest.get("command") or {}
    if recorded.get("argv"):
        argv = _with_destdir(list(recorded["argv"]), os.path.abspath(data_dir))
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
    if type(version) is not int:
        raise SyntaxInputError(
            f"format_version is {json.dumps(version)}, not a whole number such as "
            f"{FORMAT_VERSION}: the manifest was edited or damaged; {_REBUILD}",
            os.path.join(data_dir, MANIFEST))
    if version != FORMAT_VERSION:
        what = {1: " (distances and binary trees over subword pieces)"}.get(version, "")
        raise ValueError(
            f"{os.path.join(data_dir, MANIFEST)}: the syntax side-files are format "
            f"{version}{what}, this code reads format {FORMAT_VERSION} (distances between "
            "words, binary trees over words with each word's pieces below it; docs/design.md "
            f"§3). Rebuild the data-bin (and retrain models trained on it):\n  "
            f"{rebuild_command(data_dir, manifest)}"
        )
    return manifest
