"""Induced dependency trees: subword collapsing, Chu-Liu-Edmonds decoding, attachment scores.

Torch-free support for the grammar-induction analysis of Tran & Bisk (2018), "Inducing
Grammars with and for Neural Machine Translation", section 7.1 and Table 3.

From subword marginals to a word-level tree (:func:`extract_tree`)
    1. **Words** (:func:`~fairseq_syntax.syntax.subwords.pieces_per_word`): a word starts
       at every sentencepiece piece that begins with ``▁`` (U+2581; the first piece always
       starts a word) or is ``<unk>`` (its mark is lost: a guess, the unknown piece may
       continue a word) and runs up to the next such piece. The caller drops fairseq's
       final ``eos`` position (and any padding) before calling: arcs from or to eos
       carry no word-level mass.
    2. **Collapsing** (:func:`collapse_marginals`, §7.1: "we obtain a new matrix by
       summing over [the marginals] that are the corresponding BPE segments"): the
       word-level score of head word ``H`` → modifier word ``M`` is the total marginal
       mass of the piece arcs between them, ``W[H, M] = Σ_{i∈H} Σ_{j∈M} P(i → j)``, and the
       root score of ``M`` is ``R[M] = Σ_{j∈M} P(root → j)``. Arcs inside a word (a
       word's later pieces attached to its first) are dropped (``W[M, M] = 0``).
    3. **Best tree** (:func:`max_spanning_tree`): Chu-Liu-Edmonds through
       ``networkx.maximum_spanning_arborescence`` over the words plus an artificial root
       node 0 (arcs ``0 → M`` weigh ``R[M]``). The weights are the summed marginals
       themselves, not their logarithms: the tree maximises the expected number of
       correctly attached words under the model's distribution (a minimum-Bayes-risk
       decode). **Single root**: every root arc is lowered by the same penalty ``P``
       larger than the largest possible weight difference between two trees
       (``P = 1 + 2 Σ |w|`` over all arcs), so a tree with ``r`` root arcs pays ``r·P``;
       since every arborescence has at least one root arc, the optimum has exactly one,
       and among single-root trees the ranking is unchanged (all pay ``P`` once). This is
       exact, unlike picking the root word first and then solving (the authors' script).

Scores (:func:`attachment_counts`)
    Directed attachment accuracy: a word is right when its predicted head is its gold
    head (root included). Undirected: also right when the predicted arc is a gold arc
    reversed (the predicted head's gold head is the word). Words whose gold UPOS is
    ``PUNCT`` are not scored ("without punctuation", Table 3); they still take part in
    the trees.

Baselines (Table 3's L, R, Un)
    :func:`left_branching`: every word is the dependent of the word to its right (the
    last word is the root): ``a ← b ← c``. :func:`right_branching`: every word is the
    dependent of the word to its left (the first word is the root): ``a → b → c``. The
    undirected baseline "Un" is the undirected accuracy of the adjacent-word chain; the
    two chains have the same undirected arcs and differ only in which end is the root,
    and Un is taken from the left-branching one (both are in :func:`score_corpus`).
"""
import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import networkx as nx
import numpy as np

from .conllu_io import read_conllu_trees
from .dependency import validate_heads
from .errors import SyntaxInputError
from .subwords import pieces_per_word, spans_of_word_lengths, word_forms

PUNCT_TAGS = ("PUNCT",)

__all__ = [
    "collapse_marginals", "max_spanning_tree", "extract_tree", "left_branching",
    "right_branching", "AttachmentCounts", "attachment_counts", "GoldTree", "read_gold_trees",
    "CorpusScores", "score_corpus", "TABLE3_COLUMNS", "format_table3",
]


def collapse_marginals(
    head_marginals, root_marginals, spans: Sequence[Tuple[int, int]]
) -> Tuple[np.ndarray, np.ndarray]:
    """Word-level arc and root scores from piece-level marginals (summed, §7.1).

    Args:
        head_marginals: ``[n, n]`` (or larger; positions past the last span are ignored),
            ``head_marginals[i, j] = P(piece i is the head of piece j)``.
        root_marginals: ``[n]``, ``P(piece j is the root)``.
        spans: the words' piece ranges
            (:func:`~fairseq_syntax.syntax.subwords.spans_of_word_lengths`).

    Returns:
        ``(W, R)``: ``W[H, M] = Σ_{i∈H, j∈M} P(i → j)`` with a zero diagonal, ``[k, k]``;
        ``R[M] = Σ_{j∈M} P(root → j)``, ``[k]``.
    """
    head = np.asarray(head_marginals, dtype=np.float64)
    root = np.asarray(root_marginals, dtype=np.float64)
    k = len(spans)
    n = spans[-1][1] if spans else 0
    if head.ndim != 2 or head.shape[0] < n or head.shape[1] < n or root.shape[0] < n:
        raise ValueError(
            f"marginals of shape {head.shape} / {root.shape} do not cover the {n} pieces "
            "of the words"
        )
    # one-hot word membership of each piece: M[w, i] = 1 iff piece i is in word w
    member = np.zeros((k, n))
    for w, (s, e) in enumerate(spans):
        member[w, s:e] = 1.0
    arcs = member @ head[:n, :n] @ member.T
    np.fill_diagonal(arcs, 0.0)
    return arcs, member @ root[:n]


# ---------------------------------------------------------------------------------------
# Chu-Liu-Edmonds
# ---------------------------------------------------------------------------------------


def max_spanning_tree(arc_scores, root_scores) -> List[int]:
    """Highest-scoring single-root dependency tree (Chu-Liu-Edmonds via networkx).

    ``arc_scores[h, m]`` scores head ``h`` → modifier ``m`` (the diagonal is ignored),
    ``root_scores[m]`` scores ``m`` as the root. Returns 0-based heads, ``-1`` for the
    root; exactly one root (see the module docstring for the penalty that enforces it).
    """
    arcs = np.asarray(arc_scores, dtype=np.float64)
    roots = np.asarray(root_scores, dtype=np.float64)
    k = roots.shape[0]
    if arcs.shape != (k, k):
        raise ValueError(f"arc scores of shape {arcs.shape} for {k} root scores")
    if k == 0:
        return []
    if k == 1:
        return [-1]
    if not (np.isfinite(arcs).all() and np.isfinite(roots).all()):
        raise ValueError("arc and root scores must be finite")
    off_diagonal = ~np.eye(k, dtype=bool)
    penalty = 1.0 + 2.0 * (np.abs(arcs[off_diagonal]).sum() + np.abs(roots).sum())
    graph = nx.DiGraph()
    graph.add_nodes_from(range(k + 1))  # node 0: the artificial root; word m is node m + 1
    graph.add_weighted_edges_from((0, m + 1, float(roots[m] - penalty)) for m in range(k))
    graph.add_weighted_edges_from(
        (h + 1, m + 1, float(arcs[h, m])) for h in range(k) for m in range(k) if h != m
    )
    tree = nx.maximum_spanning_arborescence(graph, attr="weight", preserve_attrs=False)
    heads = [-2] * k
    for h, m in tree.edges():
        heads[m - 1] = h - 1  # node 0 -> -1 (root)
    validate_heads(heads)  # one root, no cycle: guaranteed, checked anyway
    return heads


def extract_tree(
    pieces: Sequence[str], head_marginals, root_marginals,
    spans: Optional[Sequence[Tuple[int, int]]] = None,
) -> Tuple[List[str], List[int]]:
    """Word forms and the best word-level tree from one sentence's piece marginals.

    ``pieces`` are the sentence's subword pieces *without* the final eos; the marginals
    may be larger than ``len(pieces)`` (eos and padding rows are ignored). ``spans``
    groups the pieces into consecutive words (default: the sentencepiece marks, ``<unk>``
    starting a word, :func:`~fairseq_syntax.syntax.subwords.pieces_per_word`).
    """
    if not pieces:
        return [], []
    if spans is None:
        spans = spans_of_word_lengths(pieces_per_word(pieces, unknown_starts_word=True))
    elif not spans or spans[-1][1] != len(pieces):
        raise ValueError(f"word spans {list(spans)} do not cover the {len(pieces)} pieces")
    arcs, roots = collapse_marginals(head_marginals, root_marginals, spans)
    return word_forms(pieces, [e - s for s, e in spans]), max_spanning_tree(arcs, roots)


# ---------------------------------------------------------------------------------------
# baselines and scores
# ---------------------------------------------------------------------------------------


def left_branching(n: int) -> List[int]:
    """Each word depends on the next one; the last word is the root."""
    return [i + 1 for i in range(n - 1)] + [-1] if n else []


def right_branching(n: int) -> List[int]:
    """Each word depends on the previous one; the first word is the root."""
    return [-1] + list(range(n - 1)) if n else []


@dataclass
class AttachmentCounts:
    """Correctly attached words (directed, undirected) out of ``total`` scored words."""

    directed: int = 0
    undirected: int = 0
    total: int = 0

    def __iadd__(self, other: "AttachmentCounts") -> "AttachmentCounts":
        self.directed += other.directed
        self.undirected += other.undirected
        self.total += other.total
        return self

    @property
    def directed_accuracy(self) -> float:
        """Percent (0 when nothing was scored)."""
        return 100.0 * self.directed / self.total if self.total else 0.0

    @property
    def undirected_accuracy(self) -> float:
        return 100.0 * self.undirected / self.total if self.total else 0.0


def attachment_counts(
    predicted: Sequence[int], gold: Sequence[int], upos: Optional[Sequence[str]] = None,
    punct_tags: Sequence[str] = PUNCT_TAGS,
) -> AttachmentCounts:
    """Directed and undirected attachment counts of one sentence, without punctuation.

    Heads are 0-based, ``-1`` for the root. Word ``m`` is scored unless ``upos[m]`` is in
    ``punct_tags``; it counts as directed-correct when ``predicted[m] == gold[m]`` and as
    undirected-correct when, in addition, the predicted arc reversed is a gold arc
    (``gold[predicted[m]] == m``).
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted heads for {len(gold)} gold heads")
    if upos is not None and len(upos) != len(gold):
        raise ValueError(f"{len(upos)} UPOS tags for {len(gold)} words")
    skip = set(punct_tags)
    counts = AttachmentCounts()
    for m, (p, g) in enumerate(zip(predicted, gold)):
        if upos is not None and upos[m] in skip:
            continue
        p, g = int(p), int(g)
        counts.total += 1
        if p == g:
            counts.directed += 1
            counts.undirected += 1
        elif p >= 0 and int(gold[p]) == m:
            counts.undirected += 1
    return counts


@dataclass
class GoldTree:
    """A gold tree with the UPOS tags that decide which words are punctuation."""

    words: List[str]
    heads: List[int]
    upos: List[str]
    line: int = 0


def read_gold_trees(path: str) -> List[GoldTree]:
    """Gold trees and UPOS tags of a CoNLL-U file (validated by
    :func:`~fairseq_syntax.syntax.conllu_io.read_conllu_trees`; multi-word ranges and
    empty nodes skipped). A UPOS of ``_`` falls back to the DEPREL: ``punct`` marks
    punctuation."""
    import conllu

    trees = read_conllu_trees(path)
    with open(path, encoding="utf-8") as handle:
        tokenlists = list(conllu.parse_incr(handle))
    if len(tokenlists) != len(trees):  # pragma: no cover - both read the same blocks
        raise SyntaxInputError(
            f"{len(tokenlists)} sentences parsed but {len(trees)} trees read", path, 0
        )
    gold = []
    for tree, tokenlist in zip(trees, tokenlists):
        upos = []
        for token in tokenlist:
            if isinstance(token.get("id"), tuple):
                continue
            tag = token.get("upos") or "_"
            if tag == "_" and (token.get("deprel") or "").split(":")[0] == "punct":
                tag = "PUNCT"
            upos.append(tag)
        gold.append(GoldTree(list(tree.words), list(tree.heads), upos, tree.line))
    return gold


@dataclass
class CorpusScores:
    """Attachment counts of the model and of the branching baselines over a corpus."""

    model: AttachmentCounts = field(default_factory=AttachmentCounts)
    left: AttachmentCounts = field(default_factory=AttachmentCounts)
    right: AttachmentCounts = field(default_factory=AttachmentCounts)
    sentences: int = 0

    def baselines(self) -> Dict[str, float]:
        """Table 3's L and R (directed) and Un (undirected, of the adjacent chain)."""
        return {
            "L": self.left.directed_accuracy,
            "R": self.right.directed_accuracy,
            "Un": self.left.undirected_accuracy,
        }


def score_corpus(
    predicted: Sequence[Sequence[int]], gold: Sequence[GoldTree],
    punct_tags: Sequence[str] = PUNCT_TAGS,
) -> CorpusScores:
    """Score predicted trees (one head list per gold sentence, in order) and the baselines."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted trees for {len(gold)} gold trees")
    scores = CorpusScores(sentences=len(gold))
    for index, (heads, tree) in enumerate(zip(predicted, gold)):
        if len(heads) != len(tree.heads):
            raise ValueError(
                f"sentence {index}: the predicted tree has {len(heads)} words, the gold tree "
                f"{len(tree.heads)} (gold line {tree.line}: {' '.join(tree.words)})"
            )
        n = len(tree.heads)
        scores.model += attachment_counts(heads, tree.heads, tree.upos, punct_tags)
        scores.left += attachment_counts(left_branching(n), tree.heads, tree.upos, punct_tags)
        scores.right += attachment_counts(right_branching(n), tree.heads, tree.upos, punct_tags)
    return scores


# ---------------------------------------------------------------------------------------
# Table 3
# ---------------------------------------------------------------------------------------

#: Table 3's model columns: (group, column, key); "1set" is shown only when given.
TABLE3_COLUMNS: Tuple[Tuple[str, str, str], ...] = (
    ("FA", "no-shared", "fa_separate"),
    ("FA", "shared", "fa_shared"),
    ("SA", "no-shared", "sa_separate"),
    ("SA", "shared", "sa_shared"),
    ("SA", "hard", "sa_hard"),
    ("SA", "1set", "sa_1set"),
    ("SA", "transformer", "sa_transformer"),  # sa_transformer (not in the paper)
)
OPTIONAL_COLUMNS = ("sa_1set", "sa_transformer")  # shown only when a model fills them
BASELINE_COLUMNS = ("L", "R", "Un")


def format_table3(
    label: str, models: Dict[str, Tuple[float, float]], baselines: Dict[str, float]
) -> str:
    """Table 3 of Tran & Bisk (2018): directed/undirected accuracy (DA/UA, percent,
    without punctuation) of each model column next to the L, R and Un baselines.

    ``models`` maps a column key of :data:`TABLE3_COLUMNS` to ``(DA, UA)``; columns
    without a model are left blank (``-``), the ``1set`` and ``transformer`` columns
    (:data:`OPTIONAL_COLUMNS`) are shown only when given.
    """
    unknown = set(models) - {key for _, _, key in TABLE3_COLUMNS}
    if unknown:
        raise ValueError(f"unknown Table 3 columns: {sorted(unknown)}")
    columns = [c for c in TABLE3_COLUMNS if c[2] not in OPTIONAL_COLUMNS or c[2] in models]
    cells = [
        f"{models[key][0]:04.1f}/{models[key][1]:04.1f}" if key in models else "-"
        for _, _, key in columns
    ] + [f"{baselines[name]:04.1f}" for name in BASELINE_COLUMNS]
    heads = [name for _, name, _ in columns] + list(BASELINE_COLUMNS)
    # model cells are DA/UA ("27.8/42.6"), baseline cells one number
    minimum = [9] * len(columns) + [5] * len(BASELINE_COLUMNS)
    widths = [max(len(h), len(c), w) for h, c, w in zip(heads, cells, minimum)]
    label_width = max(len(label), 5)

    groups: List[Tuple[str, int]] = []  # (group name, width it spans)
    for group, members in itertools.groupby(
        [(g, w) for (g, _, _), w in zip(columns, widths)], key=lambda gw: gw[0]
    ):
        spans = [w for _, w in members]
        groups.append((group, sum(spans) + 2 * (len(spans) - 1)))
    baseline_width = sum(widths[len(columns):]) + 2 * (len(BASELINE_COLUMNS) - 1)
    groups.append(("Baseline", baseline_width))

    def row(first: str, items: Sequence[str], sizes: Sequence[int]) -> str:
        return "  ".join([first.ljust(label_width)] + [i.center(s) for i, s in zip(items, sizes)])

    lines = [
        row("", [g for g, _ in groups], [w for _, w in groups]).rstrip(),
        row("", heads, widths).rstrip(),
        row(label, cells, widths).rstrip(),
    ]
    return "\n".join(lines)
