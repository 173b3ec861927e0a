"""Strict line-oriented text reading: UTF-8 only, every error names the file and line.

Lines split on ``\\n`` only (``\\r\\n`` counts as one), so line numbers match an editor's; a
leading UTF-8 BOM is dropped. Text files are written atomically (:func:`atomic_text_file`).
"""
import contextlib
import itertools
import json
import os
import tempfile
from typing import IO, Iterator, List, Tuple

from .errors import SyntaxInputError

_BOM = "\ufeff"


def iter_decoded_lines(path: str) -> Iterator[Tuple[int, str]]:
    """``(line_number, text)`` per line (1-based, newline stripped); bad UTF-8 names file, line, column."""
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise SyntaxInputError(f"cannot read the file: {err.strerror}", path) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start : err.end]
                raise SyntaxInputError(
                    f"not valid UTF-8: byte{'s' if len(bad) > 1 else ''} "
                    f"{' '.join(f'0x{b:02x}' for b in bad)} at byte column {err.start + 1} "
                    f"({err.reason}); the input must be UTF-8 text",
                    path,
                    number,
                ) from None
            if number == 1 and text.startswith(_BOM):
                text = text[1:]
            yield number, text


def iter_text_lines(path: str, allow_empty: bool = False) -> Iterator[str]:
    """Lines of ``path`` one by one, only the newline stripped; a blank line is a
    :class:`SyntaxInputError` naming file and line unless ``allow_empty`` (alignments: a
    sentence without links)."""
    for number, text in iter_decoded_lines(path):
        if not allow_empty and not text.strip():
            raise SyntaxInputError(
                "empty line: every line must hold one non-empty sentence", path, number
            )
        yield text


def iter_words(path: str, skip: int = 0) -> Iterator[List[str]]:
    """The whitespace tokens of each line of ``path`` after the first ``skip``, one line
    at a time (blank lines are errors, as in :func:`iter_text_lines`)."""
    return itertools.islice((line.split() for line in iter_text_lines(path)), skip, None)


def read_text_lines(path: str, allow_empty: bool = False) -> List[str]:
    """All lines of ``path`` (see :func:`iter_text_lines`)."""
    return list(iter_text_lines(path, allow_empty))


def read_json(path: str, missing=None):
    """The JSON value in the UTF-8 file ``path``, or ``missing`` where there is no such file."""
    if not os.path.exists(path):
        return missing
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 less the process's umask."""
    mask = os.umask(0o022)  # reading the umask sets it: set back at once
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_file(path: str, binary: bool = False) -> Iterator[IO]:
    """A file (UTF-8 text, or bytes) that replaces ``path`` only when the ``with`` block ends
    without an error (a temporary file beside it, synced, then renamed): a reader, or a
    killed run, never sees half a file. It keeps the mode of the file it replaces, and a new
    one gets the mode ``open`` would give it (not the temporary file's 0600). A symbolic
    link's target is replaced, not the link; a path in ``/dev`` or ``/proc`` (``/dev/stdout``)
    or to what is not a regular file (a pipe) is written directly."""
    if path.startswith(("/dev/", "/proc/")) or (os.path.exists(path) and not os.path.isfile(path)):
        with open(path, "wb") if binary else open(path, "w", encoding="utf-8") as f:
            yield f
        return
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else new_file_mode()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_text_file(path: str):
    """:func:`atomic_file` of UTF-8 text."""
    return atomic_file(path)
