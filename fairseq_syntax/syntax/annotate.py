"""One source sentence as the side-files store it, shared by ``fairseq-syntax-preprocess`` and raw
``fairseq-interactive`` input (docs/design.md §3.1).

Words are encoded one by one (:func:`encode_words`); :func:`annotate` projects the word-level
parse onto the pieces: ``heads`` (eos last), ``words`` (:data:`EOS_WORD` for eos), ``tree``
(head-outward binarisation or a given binary word tree, pieces hung below their word) and
``links``.  A sentence without words is eos alone, its own root.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax.dependency import (hang_pieces_below_words, project_dependency_tree,
                                              project_heads_to_subwords)
from fairseq_syntax.syntax.pharaoh import project_alignment_to_subwords
from fairseq_syntax.syntax.subwords import words_row

Link = Tuple[int, int]


@dataclass
class Annotation:
    """One source sentence at subword level: side-file rows (int32), ``None`` where nothing was given."""

    pieces_per_word: List[int]
    heads: Optional[np.ndarray] = None  # [n + 1]: head of each piece, -1 for the root
    tree: Optional[np.ndarray] = None  # [2 (n - 1)]: (left, right) rows, flattened
    links: Optional[List[Link]] = None  # (source piece, target piece), sorted

    @property
    def words(self) -> np.ndarray:
        """[n + 1]: word of each piece, EOS_WORD for eos."""
        return words_row(self.pieces_per_word)


def encode_words(sp, sentences: Sequence[Sequence[str]]) -> List[List[List[str]]]:
    """Pieces of every word, each word encoded alone with ``sp`` (distinct words once, one batched call)."""
    types = sorted({w for words in sentences for w in words})
    table = dict(zip(types, sp.encode(types, out_type=str)))
    return [[table[w] for w in words] for words in sentences]


def annotate(pieces_per_word: Sequence[int], word_heads: Optional[Sequence[int]] = None,
             word_tree=None, word_links: Optional[Sequence[Link]] = None,
             target_pieces_per_word: Optional[Sequence[int]] = None) -> Annotation:
    """Project a sentence's word parse (``word_heads``, or ``word_tree``) and links onto its pieces;
    ``ValueError`` when they do not fit.
    """
    counts = [int(c) for c in pieces_per_word]
    out = Annotation(counts)
    if word_heads is not None:
        if not counts and not len(word_heads):
            out.heads = np.asarray([-1], dtype=np.int32)
            out.tree = np.zeros(0, dtype=np.int32)
        else:
            if word_tree is None:
                heads, binary = project_dependency_tree(word_heads, counts)
            else:
                heads = project_heads_to_subwords(word_heads, counts)
                binary = hang_pieces_below_words(word_tree, counts)
            out.heads = np.asarray(heads, dtype=np.int32)
            out.tree = binary.astype(np.int32).reshape(-1)
    if word_links is not None:
        out.links = project_alignment_to_subwords(word_links, counts, target_pieces_per_word)
    return out
