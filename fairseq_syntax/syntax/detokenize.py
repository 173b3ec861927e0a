"""Detokenise space-separated tokens with a glue table (Multi30k's German side).

The table (``spacy_text.py tokenize --glue-table``) gives each token ``left``/``right``: the share
of its occurrences next to a word written without a space on that side.  A token glues to its
predecessor when its ``left`` or the predecessor's ``right`` is >= 0.5; unseen tokens do not glue.
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
