"""Detokenise space-separated tokens with a glue table (Multi30k's German side).

The table (``examples/multi30k/spacy_text.py tokenize --glue-table``) maps a token to
``left``, the share of its occurrences after a word (a token with a letter or digit)
that the tokenizer found written without a space before it, and ``right``, the same
share before a word without a space after it. A token is glued to the one before it
when its ``left`` or its predecessor's ``right`` is at least the threshold (0.5), so
``.`` glues left, ``(`` right and ``-`` in ``saftig-grünes`` both ways; unseen tokens
are separated by a space.
"""
import json
from typing import Dict, Sequence

GlueTable = Dict[str, Dict[str, float]]


def read_glue_table(path: str) -> GlueTable:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def detokenize_line(tokens: Sequence[str], table: GlueTable, threshold: float = 0.5) -> str:
    """``tokens`` joined into text: no space where the table glues two tokens."""
    out = ""
    for i, token in enumerate(tokens):
        if i > 0:
            prev = table.get(tokens[i - 1], {})
            here = table.get(token, {})
            if not (here.get("left", 0.0) >= threshold or prev.get("right", 0.0) >= threshold):
                out += " "
        out += token
    return out


def detokenize_file(glue_table: str, input_path: str, output_path: str) -> None:
    """Each line of ``input_path`` (space-separated tokens) as text into ``output_path``."""
    table = read_glue_table(glue_table)
    with open(input_path, encoding="utf-8") as f, \
            open(output_path, "w", encoding="utf-8") as out:
        for line in f:
            out.write(detokenize_line(line.split(), table) + "\n")
