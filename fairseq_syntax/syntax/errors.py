"""One exception type for bad input, so every message names the file and line."""
import sys
from contextlib import contextmanager
from typing import Optional


class SyntaxInputError(ValueError):
    """Bad input data. ``str(err)`` reads ``FILE:LINE: message`` (or ``FILE: message``)."""

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None):
        self.message = message
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


@contextmanager
def exit_on_input_error(prog: str):
    """Turn a :class:`SyntaxInputError` or an ``OSError`` into ``PROG: error: ...`` on
    stderr and exit status 1 (the console scripts' one-line errors)."""
    try:
        yield
    except SyntaxInputError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(1)
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(f"{prog}: error: {where}{err.strerror or err}", file=sys.stderr)
        sys.exit(1)
