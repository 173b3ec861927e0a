"""One exception type for bad input, so every message names the file and line."""
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
