"""Projection for preprocessing, a chunk of sentence pairs at a time: each sentence's
word tree onto its subwords (heads), the word of each subword, the word tree binarised
(the dependency tree head-outward, or with ``--ptb-suffix`` the binarised constituency
tree) with each word's pieces hung below it, and the word alignments onto subwords, with
:func:`fairseq_syntax.syntax.annotate.annotate` (as raw input does)."""
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax.annotate import annotate
from fairseq_syntax.syntax.errors import SyntaxInputError

from .read import Pair, SplitFiles
from .subwords import EncodedChunk


@dataclass
class ProjectedChunk:
    """A chunk's side-file rows (int32) and subword links (None: no alignments)."""

    heads: List[np.ndarray] = field(default_factory=list)
    words: List[np.ndarray] = field(default_factory=list)  # word of each subword, -1 for eos
    trees: List[np.ndarray] = field(default_factory=list)
    links: Optional[List[List[Tuple[int, int]]]] = None
    #: the first tree that does not fit its sentence (its rows and the later ones missing)
    error: Optional[SyntaxInputError] = None


def project_chunk(files: SplitFiles, first: int, pairs: Sequence[Pair],
                  encoded: EncodedChunk, trees: bool = True) -> ProjectedChunk:
    """Project the chunk of pairs from sentence ``first + 1``: the trees (unless not
    ``trees``: an earlier one did not fit) and the alignments, if the pairs have them."""
    out = ProjectedChunk()
    for k, (pair, counts) in enumerate(zip(pairs if trees else (), encoded.source_counts)):
        try:
            sentence = annotate(counts, pair.tree.heads, pair.word_tree)
        except ValueError as err:
            out.error = SyntaxInputError(f"sentence {first + k + 1}: {err}", files.parse,
                                         pair.tree.line or None)
            break
        out.heads.append(sentence.heads)
        out.words.append(sentence.words)
        out.trees.append(sentence.tree)
    if pairs and pairs[0].links is not None:
        out.links = [annotate(counts, word_links=pair.links,
                              target_pieces_per_word=target_counts).links
                     for pair, counts, target_counts in zip(pairs, encoded.source_counts,
                                                            encoded.target_counts)]
    return out
