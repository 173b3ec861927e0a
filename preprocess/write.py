"""Stage 4 of preprocessing: ``spm.model`` and ``syntax_manifest.json`` (the side-files
are written by :mod:`.stream`); the checks on ``--destdir``, and the move of the staging
folder into place (with ``--force``, replacing the old folder only at this last step; a
folder that appeared meanwhile is never replaced without ``--force``)."""
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from typing import Dict, List, Optional, Sequence

from fairseq_syntax.data.side_files import FORMAT_VERSION
from fairseq_syntax.syntax import constituency
from fairseq_syntax.syntax.errors import SyntaxInputError

from .eflomal_align import SYMMETRISATION, eflomal_version
from .interrupt import StopOnSignals
from .read import SplitData, SplitFiles, eflomal_splits
from .stream import SplitSummary

SPM_MODEL_NAME = "spm.model"
logger = logging.getLogger("fairseq_syntax_preprocess")

PROJECTION_RULE = (
    "Source words are encoded one by one with sentencepiece. Heads: the first piece of a "
    "word stands for the word, its head is the first piece of the word's head (-1 for the "
    "root word); the word's other pieces attach to its first piece; the final position, "
    "fairseq's eos, attaches to the root word's first piece. Each heads row has "
    "n_subwords + 1 entries."
)
WORDS_RULE = (
    "Words: per sentence, the 0-based index of the source word each subword token belongs "
    "to, then -1 for eos (not a word); n_subwords + 1 entries. The collater takes the "
    "distance between any pieces of words a and b as the word tree distance d(a, b) (0 "
    "within a word) and eos as farther than any window (EOS_DISTANCE)."
)
HEAD_OUTWARD_RULE = (
    "Head-outward binarisation of the word-level dependency tree: the phrase of a head "
    "starts as its own leaf, absorbs its right dependents' phrases closest first as "
    "(phrase, dependent), then its left dependents' phrases closest first as (dependent, "
    "phrase)."
)
HANGING_RULE = (
    "Then each word's subword pieces hang below it as a right-branching subtree "
    "(p0, (p1, (... (p_{c-2}, p_{c-1})))), so every phrase covers whole words "
    "(fairseq_syntax.syntax.dependency.hang_pieces_below_words). Leaves are the n subword "
    "pieces 0..n-1 (eos excluded); internal node k is n+k: first the pieces' nodes, word "
    "by word, then the word tree's nodes; each row is (left, right), children before "
    "parents, root last; each tree row is the flattened [n-1, 2] array."
)
BINARISATION_RULE = HEAD_OUTWARD_RULE + " " + HANGING_RULE
CONSTITUENCY_RULE = constituency.BINARISATION_RULE + " " + HANGING_RULE
ALIGNMENT_RULE = (
    "Pharaoh i-j (0-based, source-target) word links projected onto subwords: every piece "
    "of source word i is linked to every piece of target word j; sorted, deduplicated; "
    "binarised as fairseq's --align-suffix does (train.align.{src}-{tgt}.bin/.idx)."
)


def length_counts(split: SplitSummary) -> Dict[str, Dict[str, int]]:
    """Counts of (source length, target length) in subword tokens without eos."""
    nested: Dict[str, Dict[str, int]] = {}
    for (s, t), count in sorted(split.lengths.items()):
        nested.setdefault(str(s), {})[str(t)] = count
    return nested


def parse_record(args, splits: Sequence[SplitData], parser=None) -> dict:
    """The manifest's ``parse`` entry: CoNLL-U files given, or the spaCy parser used
    (``fairseq-interactive`` parses raw input with the same one)."""
    record = {
        "kind": "spacy" if parser is not None else "conllu",
        "files": [os.path.abspath(s.files.parse) for s in splits],
    }
    if parser is not None:
        from dataclasses import asdict

        record["parser"] = asdict(parser.info)
        record["cache_reused"] = {s.files.name: bool(s.parse_reused) for s in splits}
        record["one_tree_per_line"] = (
            "Doc(words=line.split(), sent_starts=[True] + [False] * (n - 1)); only the "
            "parser and the components it listens to run"
        )
    return record


def alignment_record(args, splits: Sequence[SplitData]) -> Optional[dict]:
    """The manifest's ``alignments`` entry (None without alignments)."""
    if getattr(args, "align", None) == "eflomal":
        return {
            "kind": "eflomal",
            "eflomal_version": eflomal_version(),
            "symmetrisation": SYMMETRISATION,
            "samplers": getattr(args, "eflomal_samplers", 1),
            "rel_iterations": getattr(args, "eflomal_iterations", 0.5),
            "splits": [d.files.name for d in eflomal_splits(splits)],
            "note": "one eflomal run over the concatenated train and valid splits "
                    "(whitespace tokens; eflomal lowercases), both directions, no seed",
        }
    if args.align_suffix:
        return {"kind": "pharaoh", "suffix": args.align_suffix}
    return None


def build_manifest(args, splits: Sequence[SplitData], encoded: Sequence[SplitSummary],
                   sp, spm_source: str, trained: bool, parser=None) -> dict:
    """The manifest recording how the side-files were made."""
    return {
        "format_version": FORMAT_VERSION,
        "command": ({"argv": list(args.command), "cwd": os.getcwd()}
                    if getattr(args, "command", None) else None),
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "parse": parse_record(args, splits, parser),
        "source_tokenization": getattr(args, "source_tokenization", None) or "whitespace",
        "alignments": alignment_record(args, splits),
        "spm_model": SPM_MODEL_NAME,
        "spm_vocab_size": int(sp.get_piece_size()),
        "spm": {
            "trained": trained,
            "from": spm_source,
            "model_type": args.spm_model_type if trained else None,
            "requested_vocab_size": args.vocab_size if trained else None,
            # --spm-train-pairs: the size of the fixed sample it trained on, None for all
            "train_sample": (args.spm_train_pairs if trained
                             and 0 < args.spm_train_pairs < splits[0].sentences else None),
        },
        "projection": PROJECTION_RULE,
        "words": WORDS_RULE,
        "binarisation": CONSTITUENCY_RULE if getattr(args, "ptb_suffix", None)
        else BINARISATION_RULE,
        "tree_source": "constituency" if getattr(args, "ptb_suffix", None) else "dependency",
        "constituency": ({"kind": "ptb", "suffix": args.ptb_suffix,
                          "files": [os.path.abspath(s.files.ptb) for s in splits]}
                         if getattr(args, "ptb_suffix", None) else None),
        "alignment_projection": ALIGNMENT_RULE if any(e.aligned for e in encoded) else None,
        "side_files": {
            "heads": "{split}.{src}-{tgt}.{src}.heads",
            "words": "{split}.{src}-{tgt}.{src}.words",
            "tree": "{split}.{src}-{tgt}.{src}.tree",
        },
        "splits": {
            e.name: {
                "sentences": e.sentences,
                "source_words": e.source_words,
                "source_tokens": sum(e.source_counts.values()),
                "target_tokens": sum(e.target_counts.values()),
                "aligned": e.aligned,
                "source_file": os.path.abspath(s.files.source),
                "target_file": os.path.abspath(s.files.target),
                "alignment_file": os.path.abspath(s.files.align) if s.files.align else None,
            }
            for s, e in zip(splits, encoded)
        },
        "length_counts": length_counts(encoded[0]),
    }


# --------------------------------------------------------------------------- destdir


def _is_nonempty_dir(path: str) -> bool:
    return os.path.isdir(path) and bool(os.listdir(path))


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _is_data_bin(path: str) -> bool:
    """Whether ``path`` is a folder with a ``syntax_manifest.json`` (a data-bin)."""
    from fairseq_syntax.data.side_files import MANIFEST

    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


def _not_a_data_bin(destdir: str, when: str = "") -> SyntaxInputError:
    return SyntaxInputError(
        f"--destdir{when} is not a data-bin (it holds no syntax_manifest.json), and --force "
        f"replaces only a data-bin: give another --destdir, or add {FORCE_ANY} to delete the "
        "folder and everything in it", destdir)


FORCE_ANY = "--force-non-data-bin"


def check_destdir(destdir: str, force: bool, inputs: Sequence[str] = (),
                  any_folder: bool = False) -> None:
    """Refuse a destdir that is a file, the current folder or one above it (it cannot be
    replaced while in use), a folder holding any of ``inputs`` (replacing it would delete
    them), a non-empty folder without ``--force``, or with ``--force`` a non-empty folder
    that is not a data-bin unless ``any_folder`` (``--force-non-data-bin``)."""
    if os.path.lexists(destdir) and not os.path.isdir(destdir):
        raise SyntaxInputError("--destdir exists and is not a folder", destdir)
    if not os.path.isdir(destdir):
        return
    if _inside(os.getcwd(), destdir):
        raise SyntaxInputError(
            "--destdir is the current folder (or holds it), which cannot be replaced while in "
            "use: give a new folder, e.g. --destdir data-bin", destdir)
    for path in inputs:
        if _inside(path, destdir):
            raise SyntaxInputError(
                f"--destdir holds the input {path}, which replacing the folder would delete: "
                "write the data-bin to another folder", destdir)
    if _is_nonempty_dir(destdir) and not force:
        raise SyntaxInputError(
            "--destdir exists and is not empty; use --force to replace it", destdir
        )
    if _is_nonempty_dir(destdir) and not any_folder and not _is_data_bin(destdir):
        raise _not_a_data_bin(destdir)


_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)


def install(staging: str, destdir: str, force: bool = False, any_folder: bool = False) -> None:
    """Move ``staging`` to ``destdir`` with one rename, which fails rather than replace a
    non-empty folder or a file that appeared meanwhile (another run, a user). With
    ``force`` such a ``destdir`` is replaced, only now, and only if it is a data-bin (or
    ``any_folder``): it is moved aside first, checked, and put back if refused."""
    try:
        os.rename(staging, destdir)  # onto nothing, or an empty folder
        return
    except OSError as err:
        if err.errno not in _TAKEN:
            raise
        if not force:
            raise SyntaxInputError(
                "--destdir appeared during the run (another run, or someone wrote it) and is "
                "not empty; it was left as it is and nothing was written: use --force to "
                "replace it, or give another --destdir", destdir) from None
    parent = os.path.dirname(os.path.abspath(destdir))
    trash = tempfile.mkdtemp(prefix=run_folder_prefix(destdir, "old"), dir=parent)
    old = os.path.join(trash, "old")
    try:
        os.rename(destdir, old)
        if not any_folder and not _is_data_bin(old):
            os.rename(old, destdir)
            raise _not_a_data_bin(destdir, " (as it is now, written during the run)")
        try:
            os.rename(staging, destdir)
        except BaseException:
            os.rename(old, destdir)
            raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


def check_inputs(args, files: Sequence[SplitFiles]) -> None:
    """Refuse a bad ``--destdir`` (:func:`check_destdir`) or a missing ``--spm-model``
    before anything is read."""
    # what replacing --destdir must not delete (not --spm-model: it is read, and copied
    # into the data-bin as spm.model, before the old folder goes; rebuild_command uses that)
    inputs = [path for f in files for path in (f.source, f.target, f.parse, f.align, f.ptb) if path]
    if getattr(args, "parse_cache", None):
        inputs.append(args.parse_cache)
    check_destdir(os.path.normpath(args.destdir), args.force, inputs,
                  getattr(args, "force_non_data_bin", False))
    if args.spm_model is not None and not os.path.isfile(args.spm_model):
        raise SyntaxInputError("sentencepiece model (--spm-model) not found", args.spm_model)


def write_model_and_manifest(args, staging: str, splits: Sequence[SplitData],
                             encoded: Sequence[SplitSummary], model_path: str, trained: bool,
                             parser=None) -> None:
    """Copy the sentencepiece model into ``staging`` as ``spm.model`` and write the
    manifest beside it."""
    import sentencepiece as spm

    from fairseq_syntax.data.side_files import (
        MANIFEST, SIDE_FILE_SHA256, SPM_SHA256, file_sha256, side_file_checksums,
    )

    shutil.copyfile(model_path, os.path.join(staging, SPM_MODEL_NAME))
    sp = spm.SentencePieceProcessor(model_file=model_path)
    spm_source = (os.path.abspath(args.spm_model) if not trained
                  else "trained on " + " + ".join(
                      os.path.abspath(p) for p in (splits[0].files.source, splits[0].files.target)))
    manifest = build_manifest(args, splits, encoded, sp, spm_source, trained, parser)
    # what fairseq-interactive and the task check the data-bin's files against
    manifest[SPM_SHA256] = file_sha256(os.path.join(staging, SPM_MODEL_NAME))
    manifest[SIDE_FILE_SHA256] = side_file_checksums(
        staging, [e.name for e in encoded], args.source_lang, args.target_lang)
    with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _make_parents(folder: str) -> List[str]:
    """Create ``folder`` and its missing ancestors; return the created ones, outermost first."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    missing.reverse()
    for path in missing:
        os.mkdir(path)
    return missing


def _host_tag() -> str:
    """8 hex digits of this machine's name: a folder's PID means a process of this machine."""
    return hashlib.sha1(socket.gethostname().encode("utf-8")).hexdigest()[:8]


def run_folder_prefix(destdir: str, kind: str) -> str:
    """The name a run's ``kind`` folder (staging, work, old) beside ``destdir`` starts with:
    ``.NAME.KIND-PID.HOST-``, so that a later run on this machine can tell whether the run
    that made it is alive."""
    return (f".{os.path.basename(os.path.abspath(destdir))}.{kind}-{os.getpid()}."
            f"{_host_tag()}-")


def _alive(pid: int) -> bool:
    """Whether the process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # it exists, as another user's
        pass
    return True


def clear_killed_runs(destdir: str) -> None:
    """Remove the staging, work and old folders beside ``destdir`` of this machine's runs
    whose process is gone (killed with SIGKILL, or by the kernel out of memory: no cleanup
    ran); where such a run was replacing ``destdir`` and had moved it aside
    (``.NAME.old-PID.HOST-*/old``), put it back first. Each is logged; a run still alive,
    or another machine's, is left alone."""
    parent = os.path.dirname(os.path.abspath(destdir))
    pattern = re.compile(re.escape(f".{os.path.basename(os.path.abspath(destdir))}.")
                         + r"(staging|work|old)-(\d+)\." + re.escape(_host_tag()) + "-")
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return
    for name in names:
        match = pattern.match(name)
        if match is None or _alive(int(match.group(2))):
            continue
        path = os.path.join(parent, name)
        old = os.path.join(path, "old")
        if match.group(1) == "old" and os.path.isdir(old) and not os.path.lexists(destdir):
            os.rename(old, destdir)
            logger.warning(f"put back {destdir}, which run {match.group(2)} had moved aside "
                           "to replace it and was killed before it could")
        shutil.rmtree(path, ignore_errors=True)
        logger.warning(f"removed {path}, left by run {match.group(2)}, which was killed")


class Staging:
    """The run's staging and work folders, siblings of ``--destdir`` (its missing parents
    made first, the folders of killed runs removed: :func:`clear_killed_runs`). On leaving they are removed, and the parents made too unless
    :meth:`install` moved the staging folder into place. Meanwhile temporary files (those
    eflomal makes) go into the work folder, so that they go with it."""

    def __init__(self, destdir: str, stop: StopOnSignals, force: bool = False,
                 any_folder: bool = False):
        self.destdir, self.stop = os.path.normpath(destdir), stop
        self.force, self.any_folder = force, any_folder
        self.staging = self.work = None
        self.installed = False
        self._tempdir = tempfile.tempdir

    def __enter__(self) -> "Staging":
        parent = os.path.dirname(os.path.abspath(self.destdir))
        self.created = _make_parents(parent)
        clear_killed_runs(self.destdir)
        try:
            with self.stop.held():  # a folder made is a folder named, so that cleanup finds it
                self.staging = tempfile.mkdtemp(
                    prefix=run_folder_prefix(self.destdir, "staging"), dir=parent)
                self.work = tempfile.mkdtemp(prefix=run_folder_prefix(self.destdir, "work"),
                                             dir=parent)
        except BaseException:
            self.__exit__()
            raise
        tempfile.tempdir = self.work
        return self

    def install(self) -> None:
        """Move the staging folder into place; once there, the run has succeeded and a
        late signal is dropped."""
        with self.stop.held():
            install(self.staging, self.destdir, self.force, self.any_folder)
            self.installed = self.stop.done = True

    def __exit__(self, *exc) -> bool:
        tempfile.tempdir = self._tempdir
        for path in (self.staging, self.work):
            if path is not None and os.path.lexists(path):
                shutil.rmtree(path, ignore_errors=True)
        if not self.installed:
            for path in reversed(self.created):
                try:
                    os.rmdir(path)
                except OSError:
                    break
        return False
