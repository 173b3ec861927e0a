"""Stage 3 of preprocessing: project each sentence's word tree onto its subwords
(heads), record the word of each subword, binarise the word tree (the dependency tree
head-outward, or with ``--ptb-suffix`` the binarised constituency tree) and hang each
word's pieces below it, with :func:`fairseq_syntax.syntax.annotate.annotate` (as raw
input does)."""
from typing import Sequence

from fairseq_syntax.syntax.annotate import annotate
from fairseq_syntax.syntax.conllu_io import ParsedSentence
from fairseq_syntax.syntax.errors import SyntaxInputError

from .read import SplitData
from .subwords import EncodedSplit


class TreeProjection:
    """Projects one split's trees onto its subwords (``heads``, ``words``, ``trees`` of
    ``out``), sentence by sentence: called with the trees so far as the parser's workers
    send them (``on_tree`` of :func:`~.read.parse_split`), while the main process would
    otherwise only wait; :meth:`finish` projects the rest. A tree that does not fit stops
    the early part quietly: :meth:`finish` raises its error, naming file and sentence."""

    def __init__(self, data: SplitData, out: EncodedSplit):
        self.data, self.out = data, out
        self.stopped = False

    def __call__(self, parsed: Sequence[ParsedSentence]) -> None:
        if self.stopped:
            return
        try:
            self._project(parsed, len(parsed))
        except (ValueError, IndexError):
            self.stopped = True

    def _project(self, trees: Sequence[ParsedSentence], end: int) -> None:
        out, word_trees = self.out, self.data.word_trees
        for k in range(len(out.heads), end):
            sentence = annotate(out.source_counts[k], trees[k].heads,
                                None if word_trees is None else word_trees[k])
            out.heads.append(sentence.heads)
            out.words.append(sentence.words)
            out.trees.append(sentence.tree)

    def finish(self) -> None:
        trees = self.data.trees
        try:
            self._project(trees, len(trees))
        except ValueError as err:
            k = len(self.out.heads)
            raise SyntaxInputError(f"sentence {k + 1}: {err}", self.data.files.parse,
                                   trees[k].line or None) from None


def project_trees(data: SplitData, out: EncodedSplit) -> None:
    """Project the split's word trees onto its subwords (heads) and binarise them; with
    constituency trees (``data.word_trees``) the binary trees are theirs."""
    TreeProjection(data, out).finish()
