"""RIBES (Isozaki et al. 2010), the word-order metric Eriguchi et al. (2016) report with BLEU::

    RIBES = NKT · P^α · BP^β,   α = 0.25, β = 0.10

NKT = ``(τ + 1) / 2`` of the aligned reference positions in hypothesis order; ``P`` unigram
precision; ``BP = min(1, exp(1 - |r| / |h|))``.  A word is aligned when unique in both sentences,
else by the shortest left-then-right context unique in both.  Fewer than two aligned words give 0
(one-word reference aligned: NKT 1).  Corpus score: mean over sentences, best reference each.
Follows the authors' RIBES.py 1.03 on token lists; no lowercasing.
"""
import math
from typing import List, NamedTuple, Optional, Sequence

ALPHA = 0.25
BETA = 0.10


class RibesParts(NamedTuple):
    nkt: float
    precision: float
    brevity_penalty: float


def _occurrences(ngram: Sequence[str], sentence: Sequence[str]) -> List[int]:
    """Start positions of every (possibly overlapping) occurrence of ``ngram``."""
    width = len(ngram)
    ngram = list(ngram)
    return [s for s in range(len(sentence) - width + 1) if list(sentence[s:s + width]) == ngram]


def align_words(reference: Sequence[str], hypothesis: Sequence[str]) -> List[int]:
    """Reference position of each aligned hypothesis word, in hypothesis order."""
    aligned: List[int] = []
    for i, word in enumerate(hypothesis):
        if word not in reference:
            continue
        in_ref = _occurrences([word], reference)
        if len(in_ref) == 1 and hypothesis.count(word) == 1:
            aligned.append(in_ref[0])
            continue
        for width in range(1, max(i + 1, len(hypothesis) - i + 1)):
            if width <= i:
                left = hypothesis[i - width:i + 1]
                starts = _occurrences(left, reference)
                if len(starts) == 1 and len(_occurrences(left, hypothesis)) == 1:
                    aligned.append(starts[0] + width)
                    break
            if i + width < len(hypothesis):
                right = hypothesis[i:i + width + 1]
                starts = _occurrences(right, reference)
                if len(starts) == 1 and len(_occurrences(right, hypothesis)) == 1:
                    aligned.append(starts[0])
                    break
    return aligned


def normalized_kendall_tau(ranks: Sequence[int]) -> float:
    """``(τ + 1) / 2``: the fraction of pairs ``i < j`` with ``ranks[i] < ranks[j]``."""
    n = len(ranks)
    ascending = sum(1 for i in range(n) for j in range(i + 1, n) if ranks[i] < ranks[j])
    return ascending / (n * (n - 1) / 2)


def ribes_parts(reference: Sequence[str], hypothesis: Sequence[str]) -> RibesParts:
    """``(NKT, P, BP)`` of one hypothesis against one reference."""
    reference, hypothesis = list(reference), list(hypothesis)
    if not reference:
        raise ValueError("RIBES: the reference has no words")
    if not hypothesis:
        return RibesParts(0.0, 0.0, 0.0)
    bp = min(1.0, math.exp(1.0 - len(reference) / len(hypothesis)))
    aligned = align_words(reference, hypothesis)
    n = len(aligned)
    if n == 1 and len(reference) == 1:
        return RibesParts(1.0, 1.0 / len(hypothesis), bp)
    if n < 2:
        return RibesParts(0.0, 0.0, bp)
    return RibesParts(normalized_kendall_tau(aligned), n / len(hypothesis), bp)


def sentence_ribes(reference: Sequence[str], hypothesis: Sequence[str],
                   alpha: float = ALPHA, beta: float = BETA) -> float:
    """``NKT · P^α · BP^β`` of one tokenised hypothesis against one tokenised reference."""
    nkt, precision, bp = ribes_parts(reference, hypothesis)
    return nkt * precision ** alpha * bp ** beta


def corpus_ribes(references: Sequence[Sequence[Sequence[str]]], hypotheses: Sequence[Sequence[str]],
                 alpha: float = ALPHA, beta: float = BETA) -> float:
    """Mean sentence RIBES; ``references[k][i]`` is the ``k``-th reference of sentence ``i`` (as sacrebleu)."""
    if not hypotheses:
        raise ValueError("RIBES: no hypotheses")
    for k, refs in enumerate(references):
        if len(refs) != len(hypotheses):
            raise ValueError(f"RIBES: reference set {k} has {len(refs)} sentences, "
                             f"the hypotheses {len(hypotheses)}")
    total = 0.0
    for i, hyp in enumerate(hypotheses):
        best: Optional[float] = None
        for refs in references:
            score = sentence_ribes(refs[i], hyp, alpha, beta)
            best = score if best is None else max(best, score)
        total += best or 0.0
    return total / len(hypotheses)
