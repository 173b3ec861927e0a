"""Stage 3 of preprocessing: project each sentence's word tree onto its subwords
(heads), record the word of each subword, binarise the word tree (the dependency tree
head-outward, or with ``--ptb-suffix`` the binarised constituency tree) and hang each
word's pieces below it, with :func:`fairseq_syntax.syntax.annotate.annotate` (as raw
input does)."""
import os
import pickle
from typing import List, Optional, Sequence

import numpy as np

from fairseq_syntax.syntax.annotate import annotate
from fairseq_syntax.syntax.conllu_io import ParsedSentence
from fairseq_syntax.syntax.errors import SyntaxInputError

from .read import SplitData
from .subwords import EncodedSplit


class EarlyProjection:
    """Projects a split's trees while the parser still parses (``on_tree`` of
    :func:`parse_split`), in the main process, which otherwise only waits for the
    workers: once the background stage has written the pieces per source word
    (``counts_path``), each arriving tree is projected and binarised. Anything unexpected
    (a tree that does not fit its counts) stops it quietly: :func:`project_trees` then
    does the rest, and raises the error as it always has."""

    CHECK_EVERY = 256  # trees between looks for the counts file

    def __init__(self, counts_path: str, name: str):
        self.counts_path = counts_path
        self.name = name
        self.counts: Optional[List[List[int]]] = None
        self.heads: List[np.ndarray] = []
        self.words: List[np.ndarray] = []
        self.trees: List[np.ndarray] = []
        self.stopped = False

    def __call__(self, parsed: Sequence[ParsedSentence]) -> None:
        if self.stopped:
            return
        if self.counts is None:
            if len(parsed) % self.CHECK_EVERY or not os.path.exists(self.counts_path):
                return
            with open(self.counts_path, "rb") as f:
                self.counts = pickle.load(f).get(self.name)
            if self.counts is None:
                self.stopped = True
                return
        try:
            for k in range(len(self.heads), min(len(parsed), len(self.counts))):
                sentence = annotate(self.counts[k], parsed[k].heads)
                self.heads.append(sentence.heads)
                self.words.append(sentence.words)
                self.trees.append(sentence.tree)
        except (ValueError, IndexError):
            self.stopped = True


def project_trees(data: SplitData, out: EncodedSplit,
                  early: Optional[EarlyProjection] = None) -> None:
    """Project the split's word trees onto its subwords (heads) and binarise them
    (after what ``early`` projected already while parsing, if given); with constituency
    trees (``data.word_trees``) the binary trees are theirs."""
    files = data.files
    word_trees = data.word_trees
    start = 0
    if early is not None and early.counts == out.source_counts and word_trees is None:
        start = len(early.heads)
        out.heads, out.words, out.trees = early.heads[:], early.words[:], early.trees[:]
    for k, (tree, counts) in enumerate(zip(data.trees, out.source_counts)):
        if k < start:
            continue
        try:
            sentence = annotate(counts, tree.heads, None if word_trees is None else word_trees[k])
        except ValueError as err:
            raise SyntaxInputError(f"sentence {k + 1}: {err}", files.parse,
                                   tree.line or None) from None
        out.heads.append(sentence.heads)
        out.words.append(sentence.words)
        out.trees.append(sentence.tree)
