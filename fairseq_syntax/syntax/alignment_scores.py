"""Word-alignment quality: AER, precision, recall and F1 with sure and possible links.

Torch-free. Definitions (Och and Ney 2003; Mi et al. 2016 report F1), for a hypothesis
link set ``A``, sure links ``S`` and possible links ``P`` where ``P`` always includes
``S`` (a link given only as sure is also possible)::

    precision = |A ∩ P| / |A|
    recall    = |A ∩ S| / |S|
    F1        = 2 · precision · recall / (precision + recall)
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Corpus scores sum the four counts over sentences first (as every AER tool does), then
apply the formulas. Empty denominators: precision is 0 with no hypothesis link, recall 0
with no sure link, F1 0 when precision + recall is 0, AER 0 when ``|A| + |S|`` is 0.

File formats, links always ``(source, target)`` after reading:

* **Pharaoh** lines: ``i-j`` (sure) and ``ipj`` (possible), whitespace-separated, one
  line per sentence, an empty line is a sentence without links; ``index_base`` 0 or 1.
* **NAACL 2003** (Mihalcea and Pedersen): ``sentence_id i j [S|P] [confidence]`` per
  line, 1-based, sentences numbered from 1; a missing ``S|P`` means sure; position 0
  (the NULL word) links are dropped.

Soft attention to hard links (:func:`hard_links_from_attention`) follows Mi et al.
(2016, section 5.3): for each target word, the most probable source position is linked
when its probability exceeds a threshold (0.2); see :func:`collapse_attention_to_words`
for how subword attention becomes word attention.
"""
import math
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from .errors import SyntaxInputError
from .text_io import iter_decoded_lines

Link = Tuple[int, int]

_PHARAOH_LINK = re.compile(r"(\d+)([-p])(\d+)")


@dataclass(frozen=True)
class SentenceAlignment:
    """The links of one sentence: ``sure`` and ``possible`` (``possible`` ⊇ ``sure``)."""

    sure: FrozenSet[Link]
    possible: FrozenSet[Link]

    @classmethod
    def from_links(
        cls, sure: Iterable[Link] = (), possible: Iterable[Link] = ()
    ) -> "SentenceAlignment":
        sure = frozenset(sure)
        return cls(sure, frozenset(possible) | sure)

    def swapped(self) -> "SentenceAlignment":
        """The same links with source and target exchanged."""
        return SentenceAlignment(
            frozenset((j, i) for i, j in self.sure), frozenset((j, i) for i, j in self.possible)
        )

    def max_indices(self) -> Tuple[int, int]:
        """Largest source and target index over all links (-1 when there is none)."""
        if not self.possible:
            return -1, -1
        return max(i for i, _ in self.possible), max(j for _, j in self.possible)


@dataclass
class AlignmentCounts:
    """Summable link counts; the scores are properties (see the module docstring)."""

    hypothesis: int = 0
    sure: int = 0
    hyp_and_sure: int = 0
    hyp_and_possible: int = 0
    sentences: int = 0

    def __add__(self, other: "AlignmentCounts") -> "AlignmentCounts":
        return AlignmentCounts(
            self.hypothesis + other.hypothesis,
            self.sure + other.sure,
            self.hyp_and_sure + other.hyp_and_sure,
            self.hyp_and_possible + other.hyp_and_possible,
            self.sentences + other.sentences,
        )

    @property
    def precision(self) -> float:
        return self.hyp_and_possible / self.hypothesis if self.hypothesis else 0.0

    @property
    def recall(self) -> float:
        return self.hyp_and_sure / self.sure if self.sure else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    @property
    def aer(self) -> float:
        denominator = self.hypothesis + self.sure
        if denominator == 0:
            return 0.0
        return 1.0 - (self.hyp_and_sure + self.hyp_and_possible) / denominator

    def as_dict(self) -> Dict[str, float]:
        return {
            "sentences": self.sentences,
            "hypothesis_links": self.hypothesis,
            "sure_links": self.sure,
            "hyp_and_sure": self.hyp_and_sure,
            "hyp_and_possible": self.hyp_and_possible,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "aer": self.aer,
        }


def count_links(hypothesis: Iterable[Link], gold: SentenceAlignment) -> AlignmentCounts:
    """The counts of one sentence (``hypothesis`` duplicates count once)."""
    hyp = set(hypothesis)
    return AlignmentCounts(
        hypothesis=len(hyp),
        sure=len(gold.sure),
        hyp_and_sure=len(hyp & gold.sure),
        hyp_and_possible=len(hyp & gold.possible),
        sentences=1,
    )


def score_alignments(
    hypotheses: Sequence[Iterable[Link]], golds: Sequence[SentenceAlignment]
) -> AlignmentCounts:
    """Corpus counts for parallel lists of hypothesis link sets and gold alignments."""
    if len(hypotheses) != len(golds):
        raise ValueError(
            f"{len(hypotheses)} hypothesis sentences but {len(golds)} gold sentences"
        )
    total = AlignmentCounts()
    for hyp, gold in zip(hypotheses, golds):
        total = total + count_links(hyp, gold)
    return total


# --------------------------------------------------------------------------- reading


def parse_pharaoh_links(
    text: str,
    index_base: int = 0,
    allow_possible: bool = True,
    path: Optional[str] = None,
    line: Optional[int] = None,
) -> SentenceAlignment:
    """Parse one Pharaoh line with ``i-j`` (sure) and ``ipj`` (possible) links.

    Indices are converted to 0-based. A malformed token, a ``p`` link where
    ``allow_possible`` is false, or an index below ``index_base`` (0 in a 1-based file)
    raises :class:`SyntaxInputError` naming ``path`` and ``line``.
    """
    if index_base not in (0, 1):
        raise ValueError(f"index_base must be 0 or 1, got {index_base}")
    sure, possible = set(), set()
    for k, token in enumerate(text.split(), start=1):
        match = _PHARAOH_LINK.fullmatch(token)
        if match is None:
            raise SyntaxInputError(
                f"link {k} {token!r} is not of the form i-j (sure) or ipj (possible)", path, line
            )
        i, kind, j = int(match.group(1)), match.group(2), int(match.group(3))
        if kind == "p" and not allow_possible:
            raise SyntaxInputError(
                f"link {k} {token!r} is a possible link (ipj); hypothesis links must be i-j",
                path,
                line,
            )
        if min(i, j) < index_base:
            raise SyntaxInputError(
                f"link {k} {token!r} has index 0 but the file is read as 1-based "
                "(use index base 0 for 0-based links)",
                path,
                line,
            )
        link = (i - index_base, j - index_base)
        (sure if kind == "-" else possible).add(link)
    return SentenceAlignment.from_links(sure, possible)


def read_pharaoh_file(
    path: str, index_base: int = 0, allow_possible: bool = True
) -> List[SentenceAlignment]:
    """Read a Pharaoh file (one sentence per line, empty line = no links)."""
    return [
        parse_pharaoh_links(text, index_base, allow_possible, path, number)
        for number, text in iter_decoded_lines(path)
    ]


def read_naacl_file(path: str, num_sentences: Optional[int] = None) -> List[SentenceAlignment]:
    """Read a NAACL 2003 alignment file: ``sentence_id i j [S|P] [confidence]`` lines.

    Sentence ids and positions are 1-based; links touching position 0 (NULL) are
    dropped. The result has ``max(sentence_id, num_sentences)`` entries, sentence ``k``
    at index ``k - 1``; a sentence without lines has no links.
    """
    sure: Dict[int, set] = {}
    possible: Dict[int, set] = {}
    for number, text in iter_decoded_lines(path):
        fields = text.split()
        if not fields:
            continue
        if len(fields) < 3 or len(fields) > 5:
            raise SyntaxInputError(
                f"expected 'sentence_id i j [S|P] [confidence]', got {len(fields)} fields",
                path,
                number,
            )
        try:
            sid, i, j = (int(f) for f in fields[:3])
        except ValueError:
            raise SyntaxInputError(
                f"sentence id and positions must be integers, got {' '.join(fields[:3])!r}",
                path,
                number,
            ) from None
        kind = fields[3].upper() if len(fields) > 3 else "S"
        if kind not in ("S", "P"):
            raise SyntaxInputError(f"link kind must be S or P, got {fields[3]!r}", path, number)
        if len(fields) == 5:
            try:
                float(fields[4])
            except ValueError:
                raise SyntaxInputError(
                    f"confidence must be a number, got {fields[4]!r}", path, number
                ) from None
        if sid < 1 or i < 0 or j < 0:
            raise SyntaxInputError(
                "sentence ids start at 1 and positions at 1 (0 = NULL); got "
                f"{sid} {i} {j}",
                path,
                number,
            )
        if i == 0 or j == 0:
            continue
        (sure if kind == "S" else possible).setdefault(sid, set()).add((i - 1, j - 1))
    count = max([0, num_sentences or 0, *sure.keys(), *possible.keys()])
    return [
        SentenceAlignment.from_links(sure.get(k, ()), possible.get(k, ()))
        for k in range(1, count + 1)
    ]


def check_alignment_range(
    alignment: SentenceAlignment, n_src: int, n_tgt: int, path: Optional[str], line: Optional[int],
    index_base: int = 0, base_option: str = "its index base",
) -> None:
    """Raise :class:`SyntaxInputError` when a link falls outside ``n_src`` x ``n_tgt`` words
    (``base_option`` names the setting to change in the hint for a 1-based file read as
    0-based)."""
    max_i, max_j = alignment.max_indices()
    if max_i < n_src and max_j < n_tgt:
        return
    side, index, length = ("source", max_i, n_src) if max_i >= n_src else ("target", max_j, n_tgt)
    hint = ""
    if index_base == 0 and index == length:
        hint = f"; the file may be 1-based (set {base_option} to 1)"
    raise SyntaxInputError(
        f"{side} index {index + index_base} is out of range: the sentence has {n_src} source "
        f"and {n_tgt} target words ({index_base}-based indices allow "
        f"{index_base}..{length - 1 + index_base}){hint}",
        path,
        line,
    )


# --------------------------------------------------------------------------- subword attention


def collapse_attention_to_words(
    attention: Sequence[Sequence[float]],
    src_word_of_piece: Sequence[int],
    tgt_word_of_piece: Sequence[int],
) -> List[List[float]]:
    """Word-level attention from subword attention.

    ``attention[t][s]``: rows are target pieces, columns source pieces followed by any
    number of extra columns (source eos), which are kept as extra columns. A source
    word's probability is the **sum** over its pieces (the probability of attending to
    any piece of it); a target word's row is the **mean** of its pieces' rows, so every
    row stays a distribution. Rows beyond ``len(tgt_word_of_piece)`` (target eos) are
    dropped.
    """
    n_src_words = max(src_word_of_piece, default=-1) + 1
    n_tgt_words = max(tgt_word_of_piece, default=-1) + 1
    n_src_pieces = len(src_word_of_piece)
    width = n_src_words + (len(attention[0]) - n_src_pieces if len(attention) else 0)
    summed = [[0.0] * width for _ in range(n_tgt_words)]
    counts = [0] * n_tgt_words
    for t, w in enumerate(tgt_word_of_piece):
        counts[w] += 1
        for s, p in enumerate(attention[t]):
            col = src_word_of_piece[s] if s < n_src_pieces else n_src_words + s - n_src_pieces
            summed[w][col] += p
    return [[v / counts[w] for v in summed[w]] for w in range(n_tgt_words)]


def hard_links_from_attention(
    attention: Sequence[Sequence[float]], n_src_words: int, threshold: float = 0.2
) -> List[Link]:
    """Mi et al.'s extraction: for each target row ``t``, link ``(argmax_s, t)`` when the
    maximum is over a source word (columns ``< n_src_words``; a maximum on eos or another
    extra column means unaligned) and its probability exceeds ``threshold`` (strictly).
    Ties go to the lowest column."""
    links = []
    for t, row in enumerate(attention):
        if not row:
            continue
        best = max(range(len(row)), key=lambda s: (row[s], -s))
        if best < n_src_words and row[best] > threshold and not math.isnan(row[best]):
            links.append((best, t))
    return links
