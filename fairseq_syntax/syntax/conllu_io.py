"""Reading and writing dependency trees in CoNLL-U, with file:line in every error.

Reading uses the ``conllu`` package (``conllu.parse_incr``). Multi-word token ranges
(``1-2``) and empty nodes (``1.1``) are skipped: a :class:`ParsedSentence` holds the
syntactic words only, with 0-based heads (``-1`` for the root).
"""
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Sequence, Tuple

import conllu
from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_line

from .dependency import validate_heads
from .errors import SyntaxInputError
from .text_io import atomic_text_file, iter_decoded_lines


@dataclass
class ParsedSentence:
    """One dependency tree: ``heads[i]`` is the 0-based head of ``words[i]``, -1 for root."""

    words: List[str]
    heads: List[int]
    deprels: List[str] = field(default_factory=list)
    line: int = 0  # 1-based line where the sentence starts in its file (0: not from a file)


def _blocks(lines: Iterable[Tuple[int, str]]) -> Iterator[List[Tuple[int, str]]]:
    """Split lines into sentence blocks exactly as ``conllu.parse_sentences`` does."""
    buf = []
    for number, text in lines:
        if text.strip() == "":
            if buf:
                yield buf
                buf = []
        else:
            buf.append((number, text))
    if buf:
        yield buf


class _LineFile:
    """Decoded lines as the text file ``conllu.parse_incr`` reads, one line at a time."""

    def __init__(self, lines: Iterable[Tuple[int, str]]):
        self._lines = (text + "\n" for _, text in lines)

    def read(self, size: int = -1) -> str:
        return "".join(self._lines)

    def __iter__(self) -> Iterator[str]:
        return self._lines


def _locate_parse_error(block: List[Tuple[int, str]], fields) -> Tuple[int, str]:
    """Find the first line of a block that conllu cannot parse, with conllu's message."""
    for number, text in block:
        stripped = text.strip()
        try:
            if stripped.startswith("#"):
                parse_comment_line(stripped)
            else:
                parse_line(stripped, fields)
        except ParseException as err:
            return number, str(err)
    return block[0][0], ""


COLUMNS = 10
_COLUMN_SEPARATOR = re.compile(r"\t| {2,}")  # as conllu.parser.parse_line splits a line


def _check_columns(block: List[Tuple[int, str]], path: str) -> None:
    """Refuse a word line of more than 10 columns: a column holds a tab (or two spaces in
    a row, which the conllu reader also splits at), and every later column would be read
    as the one after it (the FEATS as the HEAD, ...); and a ``# global.columns`` comment
    other than the standard ten (:func:`_check_comment`)."""
    for number, text in block:
        stripped = text.strip()
        if stripped.startswith("#"):
            _check_comment(stripped, path, number)
            continue
        columns = _COLUMN_SEPARATOR.split(stripped)
        if len(columns) > COLUMNS:
            raise SyntaxInputError(
                f"{len(columns)} columns where CoNLL-U has {COLUMNS}: a column holds a tab or "
                "two spaces in a row (word "
                f"{columns[0]}: FORM {columns[1]!r}, then {columns[2]!r}?); a word may hold "
                "neither: remove them from the text and the parse",
                path, number)


def read_conllu_trees(path: str) -> List[ParsedSentence]:
    """Read every sentence of a CoNLL-U file as a validated :class:`ParsedSentence`.

    Raises :class:`SyntaxInputError` naming ``path`` and a line: the offending line for a
    line conllu cannot parse (or bytes that are not UTF-8, before any other error), the
    sentence's first line for a sentence that is not a tree (see :func:`validate_heads`),
    has no words, misses a HEAD, or has word IDs other than ``1..n`` in order.
    """
    for _ in iter_decoded_lines(path):  # bad UTF-8 anywhere is reported first
        pass
    return list(iter_conllu_trees(path))


def iter_conllu_trees(path: str) -> Iterator[ParsedSentence]:
    """The sentences of a CoNLL-U file one by one, checked as :func:`read_conllu_trees`
    does (but an error is raised when its sentence is reached: bad UTF-8 late in the
    file comes after the trees before it)."""
    parsed = iter(conllu.parse_incr(_LineFile(iter_decoded_lines(path))))
    for index, block in enumerate(_blocks(iter_decoded_lines(path))):
        start = block[0][0]
        _check_columns(block, path)
        try:
            tokenlist = next(parsed)
        except ParseException as err:
            number, message = _locate_parse_error(block, conllu.parser.DEFAULT_FIELDS)
            raise SyntaxInputError(
                f"malformed CoNLL-U line: {message or err}", path, number
            ) from None
        token_lines = [
            number
            for number, t in block
            if not t.startswith("#") and not t.strip().startswith("#")
        ]
        words, heads, deprels = [], [], []
        has_ranges = False
        for k, token in enumerate(tokenlist):
            number = token_lines[k] if k < len(token_lines) else start
            tid = token.get("id")
            if isinstance(tid, tuple):
                has_ranges = has_ranges or tid[1] == "-"
                continue  # multi-word token range or empty node
            if tid is None:
                raise SyntaxInputError("word has no ID (ID column is '_' or missing)", path, number)
            if tid != len(words) + 1:
                raise SyntaxInputError(
                    f"word ID {tid} where {len(words) + 1} was expected: the IDs of a sentence's "
                    "words must be 1, 2, 3, ... in order",
                    path,
                    number,
                )
            form = token.get("form")
            if form is None:
                raise SyntaxInputError(f"word {tid} has no FORM column", path, number)
            head = token.get("head")
            if head is None:
                raise SyntaxInputError(
                    f"word {tid} ({form!r}) has no HEAD (column 7 is '_' or missing); "
                    "every word needs a head, 0 for the root",
                    path,
                    number,
                )
            words.append(form)
            heads.append(int(head) - 1)
            deprel = token.get("deprel")
            deprels.append(deprel if deprel else "_")
        if not words:
            raise SyntaxInputError(f"sentence {index + 1} has no words", path, start)
        try:
            validate_heads(heads, words=words, index_base=1)
        except ValueError as err:
            raise SyntaxInputError(
                f"sentence {index + 1} is not a dependency tree: {err}"
                + (" (word IDs skip multi-word token ranges)" if has_ranges else ""),
                path,
                start,
            ) from None
        yield ParsedSentence(words, heads, deprels, start)


def iter_checked_conllu_trees(path: str) -> Iterator[ParsedSentence]:
    """The sentences :func:`iter_conllu_trees` gives for a file it has accepted, read fast:
    each line split into columns as conllu splits it, without conllu and tree checks.
    Raises :class:`SyntaxInputError` naming file and line where its reading could differ: a
    ``# global.columns`` other than the ten standard columns, a word ID out of order, a
    sentence without words."""
    sentence = None
    for number, text in iter_decoded_lines(path):
        line = text.strip()
        if not line:
            if sentence is not None:
                yield _checked(sentence, path)
            sentence = None
            continue
        if sentence is None:
            sentence = ParsedSentence([], [], [], number)
        if line.startswith("#"):
            _check_comment(line, path, number)
        else:
            _add_word(sentence, _split_columns(line), path, number)
    if sentence is not None:
        yield _checked(sentence, path)


def _split_columns(line: str) -> List[str]:
    """A stripped word line's columns, split as conllu splits it (at a tab or two or more
    spaces in a row; without two spaces in a row, at tabs: the fast way)."""
    return _COLUMN_SEPARATOR.split(line) if "  " in line else line.split("\t")


def _check_comment(line: str, path: str, number: int) -> None:
    """Refuse a ``# global.columns`` comment that would make conllu (or a reader that
    follows it) read other columns than CoNLL-U's ten."""
    if line.startswith("# global.columns"):
        columns = [name.lower() for name in line.partition("=")[2].split()]
        if columns != list(conllu.parser.DEFAULT_FIELDS):
            raise SyntaxInputError(
                "# global.columns names other columns than CoNLL-U's ten (ID FORM LEMMA UPOS "
                "XPOS FEATS HEAD DEPREL DEPS MISC); write the parse in the ten columns",
                path, number)


def _add_word(sentence: ParsedSentence, columns: List[str], path: str, number: int) -> None:
    """Append the word of a word line to ``sentence``; skip a multi-word token range
    (ID ``1-2``) or an empty node (ID ``1.1``)."""
    word_id = columns[0]
    if "-" in word_id or "." in word_id:
        return
    if word_id != str(len(sentence.words) + 1) or len(columns) < 7:
        raise SyntaxInputError("not a word line of a checked CoNLL-U file", path, number)
    sentence.words.append(columns[1])
    sentence.heads.append(int(columns[6]) - 1)
    sentence.deprels.append((columns[7] if len(columns) > 7 else "") or "_")


def _checked(sentence: ParsedSentence, path: str) -> ParsedSentence:
    """``sentence``, refused if it has no words."""
    if not sentence.words:
        raise SyntaxInputError("a sentence without words", path, sentence.line)
    return sentence


def format_conllu(words: Sequence[str], heads: Sequence[int], deprels: Sequence[str] = (),
                  comments: Sequence[Tuple[str, str]] = (), lemmas: Sequence[str] = (),
                  upos: Sequence[str] = (), feats: Sequence[str] = ()) -> str:
    """One sentence as a CoNLL-U block: the ``# key = value`` comments, ``# text = ...``
    (words joined by spaces), one line per word (0-based ``heads`` written 1-based, 0 for
    the root; ``_`` for a column not given) and a blank line. Checks nothing."""
    lines = [f"# {key} = {value}" for key, value in comments]
    lines.append("# text = " + " ".join(words))
    for i, (word, head) in enumerate(zip(words, heads)):
        cols = [str(i + 1), word, lemmas[i] if lemmas else "_", upos[i] if upos else "_", "_",
                feats[i] if feats else "_", str(int(head) + 1),
                (deprels[i] if deprels else "") or "_", "_", "_"]
        lines.append("\t".join(cols))
    return "\n".join(lines) + "\n\n"


def write_conllu(path: str, sentences: Iterable[ParsedSentence]) -> None:
    """Write sentences as CoNLL-U (:func:`format_conllu`). Words must be non-empty and
    hold no tab or newline."""
    with atomic_text_file(path) as out:
        for sentence in sentences:
            if len(sentence.heads) != len(sentence.words):
                raise ValueError(
                    f"{len(sentence.words)} words but {len(sentence.heads)} heads"
                )
            for i, word in enumerate(sentence.words):
                if any(c in word for c in "\t\n\r") or not word:
                    raise ValueError(f"word {i + 1} {word!r} is empty or holds a tab or newline")
            out.write(format_conllu(sentence.words, sentence.heads, sentence.deprels))
