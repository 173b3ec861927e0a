"""Strict line-oriented text reading: UTF-8 only, every error names the file and line.

Lines are split on ``\\n`` only (a ``\\r\\n`` ending counts as one newline), so the line
numbers in error messages are the ones an editor or ``sed -n Np`` shows. A UTF-8 byte
order mark at the very start of a file is dropped.
"""
from typing import Iterator, List, Tuple

from .errors import SyntaxInputError

_BOM = "\ufeff"


def iter_decoded_lines(path: str) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_number, text)`` for every line of ``path`` (1-based, newline stripped).

    Empty lines are yielded too. Bytes that are not UTF-8 raise :class:`SyntaxInputError`
    naming the file, the line and the byte column; an unreadable file raises it naming the
    file.
    """
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


def read_text_lines(path: str, allow_empty: bool = False) -> List[str]:
    """Read ``path`` strictly as UTF-8 and return its lines without the newline.

    Nothing but the newline is stripped. An empty or whitespace-only line raises
    :class:`SyntaxInputError` naming the file and line (one sentence per line means no
    sentence may be empty), unless ``allow_empty`` is true (e.g. an alignment file, where
    an empty line is a sentence without links).
    """
    lines = []
    for number, text in iter_decoded_lines(path):
        if not allow_empty and not text.strip():
            raise SyntaxInputError(
                "empty line: every line must hold one non-empty sentence", path, number
            )
        lines.append(text)
    return lines
