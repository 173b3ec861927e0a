"""Detokenise space-separated tokens with a glue table (Multi30k's German, KFTT's Japanese).

The table (``fairseq-syntax-tokenize tokenize --glue-table``) gives each token
``left``/``right``: the share of its occurrences next to a word written without a space on that
side.  A token glues to its predecessor when its ``left`` or the predecessor's ``right`` is
>= 0.5.  When neither share is in the table (neither token was seen on that side of a word),
the table's :data:`PAIRS` entry decides, when it has one: the share of glued boundaries
between the two character classes that meet there (say a kanji or kana before a narrow
digit), so unseen Japanese words and numbers glue and unseen English words do not; else
they do not glue.  A straight double quote ``"`` opens and closes alike, so its shares are
kept apart by its place in the line (:func:`glue_keys`): the 1st, 3rd, ... ``"`` of a line
is counted as ``" open``, the others as ``" close``.
"""
import json
import unicodedata
from typing import Dict, List, Sequence

GlueTable = Dict[str, Dict[str, float]]

PAIRS = " pairs"  # the table's entry of character-class pairs (no token holds a space)
SYMMETRIC = ('"',)  # tokens that open and close alike: counted by their place in the line


def char_class(char: str) -> str:
    """``L`` letter, ``N`` digit or other number, ``P`` anything else; prefixed by ``W``
    for East Asian wide and full-width characters (kanji, kana, ``、``, ``（``)."""
    category = unicodedata.category(char)
    kind = "L" if category[0] == "L" else "N" if category[0] == "N" else "P"
    return ("W" + kind) if unicodedata.east_asian_width(char) in "WF" else kind


def boundary(before: str, after: str) -> str:
    """The character-class pair where token ``before`` meets token ``after``: ``"WL N"``."""
    return f"{char_class(before[-1])} {char_class(after[0])}"


def glue_keys(tokens: Sequence[str]) -> List[str]:
    """The table keys of ``tokens``: the token itself, or for a :data:`SYMMETRIC` one
    ``'" open'`` (its 1st, 3rd, ... occurrence in the line) or ``'" close'``."""
    seen: Dict[str, int] = {}
    keys = []
    for token in tokens:
        if token in SYMMETRIC:
            seen[token] = seen.get(token, 0) + 1
            token = f"{token} {'open' if seen[token] % 2 else 'close'}"
        keys.append(token)
    return keys


def read_glue_table(path: str) -> GlueTable:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def detokenize_line(tokens: Sequence[str], table: GlueTable, threshold: float = 0.5) -> str:
    """``tokens`` joined into text: no space where the table glues two tokens."""
    pairs = table.get(PAIRS, {})
    keys = glue_keys(tokens)
    out = ""
    for i, token in enumerate(tokens):
        if i > 0:
            prev = tokens[i - 1]
            # a table written before the open/close keys has the quote itself
            left = table.get(keys[i], table.get(token, {})).get("left")
            right = table.get(keys[i - 1], table.get(prev, {})).get("right")
            if left is None and right is None:  # neither token tells: the classes do
                left = pairs.get(boundary(prev, token), 0.0)
            if not ((left or 0.0) >= threshold or (right or 0.0) >= threshold):
                out += " "
        out += token
    return out


def detokenize_file(glue_table: str, input_path: str, output_path: str) -> None:
    """Each line of ``input_path`` (space-separated tokens) as text into ``output_path``
    (``-``: stdin, stdout)."""
    import sys

    table = read_glue_table(glue_table)
    with open(sys.stdin.fileno() if input_path == "-" else input_path, encoding="utf-8",
              closefd=input_path != "-") as f, \
            open(sys.stdout.fileno() if output_path == "-" else output_path, "w",
                 encoding="utf-8", closefd=output_path != "-") as out:
        for line in f:
            out.write(detokenize_line(line.split(), table) + "\n")
