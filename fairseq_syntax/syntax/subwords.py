"""Subword pieces and the words they form: the one place for the piece/word rules.

A sentence's pieces are grouped into words by :func:`pieces_per_word`; everything else
works on those counts (``[2, 1]``: word 0 is pieces 0-1, word 1 is piece 2).

* ``sentencepiece``: a word starts at piece 0 and at every piece beginning with ``▁``
  (U+2581). With ``unknown_starts_word``, ``<unk>`` (a piece the dictionary does not know,
  whose mark is lost) also starts a word: a guess, since it may continue one.
* ``bpe``: a piece ending with ``@@`` continues into the next piece.
* ``none``: every piece is a word.
* ``auto``: ``sentencepiece`` when any piece begins with ``▁``, else ``none``.
"""
from typing import Iterable, List, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax.side_values import EOS_WORD

WORD_START = "\u2581"  # sentencepiece's word-boundary mark "▁"
UNKNOWN_PIECE = "<unk>"  # fairseq's unknown-word symbol
STYLES = ("sentencepiece", "bpe", "none", "auto")


def pieces_per_word(pieces: Sequence[str], style: str = "sentencepiece",
                    unknown_starts_word: bool = False) -> List[int]:
    """How many pieces each word has, under the rules of the module doc."""
    if style == "auto":
        style = "sentencepiece" if any(p.startswith(WORD_START) for p in pieces) else "none"
    if style == "none":
        return [1] * len(pieces)
    counts: List[int] = []
    if style == "sentencepiece":
        for k, piece in enumerate(pieces):
            if (k == 0 or piece.startswith(WORD_START)
                    or (unknown_starts_word and piece == UNKNOWN_PIECE)):
                counts.append(1)
            else:
                counts[-1] += 1
    elif style == "bpe":
        continues = False
        for piece in pieces:
            if continues:
                counts[-1] += 1
            else:
                counts.append(1)
            continues = piece.endswith("@@")
    else:
        raise ValueError(f"unknown subword style {style!r} ({', '.join(STYLES)})")
    return counts


def word_index_of_pieces(pieces_per_word: Sequence[int]) -> List[int]:
    """``out[k]`` is the 0-based word of piece ``k``."""
    return [w for w, count in enumerate(pieces_per_word) for _ in range(count)]


def words_row(pieces_per_word: Sequence[int]) -> np.ndarray:
    """The ``words`` side-file row (int32): the word of each piece, then :data:`EOS_WORD` for eos."""
    counts = np.asarray(pieces_per_word, dtype=np.int64)
    return np.append(np.repeat(np.arange(len(counts), dtype=np.int32), counts),
                     np.int32(EOS_WORD))


def spans_of_word_lengths(pieces_per_word: Sequence[int]) -> List[Tuple[int, int]]:
    """``[start, end)`` piece ranges of consecutive words of ``pieces_per_word`` pieces."""
    spans, start = [], 0
    for count in pieces_per_word:
        spans.append((start, start + int(count)))
        start += int(count)
    return spans


def word_forms(pieces: Sequence[str], pieces_per_word: Sequence[int], empty: str = ""
               ) -> List[str]:
    """Each word's pieces joined, without ``▁`` marks; ``empty`` for a word that is only
    marks."""
    return ["".join(pieces[s:e]).replace(WORD_START, "") or empty
            for s, e in spans_of_word_lengths(pieces_per_word)]


def word_links(links: Iterable[Tuple[int, int]], src_word_of_piece: Sequence[int],
               tgt_word_of_piece: Sequence[int]) -> List[Tuple[int, int]]:
    """Piece links ``(source piece, target piece)`` to sorted, deduplicated word links (a
    word pair is linked when any of their pieces is); links outside the pieces are dropped."""
    out = set()
    for s, t in links:
        s, t = int(s), int(t)
        if 0 <= s < len(src_word_of_piece) and 0 <= t < len(tgt_word_of_piece):
            out.add((src_word_of_piece[s], tgt_word_of_piece[t]))
    return sorted(out)
