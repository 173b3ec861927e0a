"""Main-verb agreement of the synthetic corpus's translations: accuracy overall and on
long-distance sentences (attractors in the source tree), and the same as a sacreBLEU metric,
so that sacreBLEU's own ``PairedTest`` resamples it over sentences like BLEU and chrF."""
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sacrebleu.metrics.base import Metric, Score, Signature

from fairseq_syntax.data.synthetic_corpus import source_noun_number, verb_number

_TOKEN = re.compile(r"\w+|[^\w\s]")


def main_verb_number(sentence: str) -> Optional[str]:
    """The number of the last vf verb form in ``sentence`` (the target is verb-final)."""
    numbers = [verb_number(t) for t in _TOKEN.findall(sentence)]
    numbers = [n for n in numbers if n is not None]
    return numbers[-1] if numbers else None


def agreement_counts(hypotheses: Sequence[str], references: Sequence[str]) -> Tuple[int, int]:
    """(correct, total): sentences whose main verb has the reference main verb's number."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    correct = 0
    for k, (hyp, ref) in enumerate(zip(hypotheses, references)):
        expected = main_verb_number(ref)
        if expected is None:
            raise ValueError(f"reference {k + 1} has no vf verb form: {ref!r}")
        correct += main_verb_number(hyp) == expected
    return correct, len(references)


def agreement_accuracy(hypotheses: List[str], references: List[str]) -> float:
    """Share (0..1) of hypotheses whose main verb agrees like the reference's.

    The main verb is the last verb form of a sentence (identified through the lexicon);
    a hypothesis without any verb form counts as wrong. Sentences may be whitespace
    tokenised or detokenised. Returns 0.0 for empty input.
    """
    correct, total = agreement_counts(hypotheses, references)
    return correct / total if total else 0.0


def attractors(words: Sequence[str], heads: Sequence[int]) -> int:
    """Attractors of a source tree (0-based ``heads``, -1 for the root).

    The subject head noun is the dependent of the root (the main verb) closest to its
    left that is an English noun form (a fronted PP's noun is farther left); the
    attractors are the other nouns before the root whose number differs from the
    subject head noun's: those between subject and verb and those of a fronted PP. 0
    when the root has no noun dependent to its left.
    """
    root = list(heads).index(-1)
    subjects = [i for i in range(root) if heads[i] == root and source_noun_number(words[i])]
    if not subjects:
        return 0
    number = source_noun_number(words[subjects[-1]])
    return sum(source_noun_number(w) not in (None, number) for w in words[:root])


LONG_DISTANCE_ATTRACTORS = 2  #: a sentence is long-distance with at least this many attractors


@dataclass
class AgreementReport:
    """Main-verb agreement overall and on long-distance sentences (accuracies in %)."""

    accuracy: float
    correct: int
    total: int
    long_distance_accuracy: float
    long_distance_correct: int
    long_distance_total: int


def agreement_report(hypotheses: Sequence[str], references: Sequence[str],
                     source_trees: Sequence) -> AgreementReport:
    """Agreement accuracy (as :func:`agreement_counts`), overall and long-distance.

    ``source_trees`` has one source tree per sentence: a ``(words, heads)`` pair or an
    object with ``words`` and ``heads`` (e.g. from
    :func:`fairseq_syntax.syntax.conllu_io.read_conllu_trees` of ``S.en.conllu``). A
    sentence is long-distance if its source has at least
    :data:`LONG_DISTANCE_ATTRACTORS` (2) :func:`attractors`. Accuracies of an empty set are 0.
    """
    if len(source_trees) != len(references):
        raise ValueError(f"{len(source_trees)} source trees but {len(references)} references")
    correct, total = agreement_counts(hypotheses, references)
    long_correct = long_total = 0
    for hyp, ref, tree in zip(hypotheses, references, source_trees):
        words, heads = tree if isinstance(tree, tuple) else (tree.words, tree.heads)
        if attractors(words, heads) >= LONG_DISTANCE_ATTRACTORS:
            long_total += 1
            long_correct += main_verb_number(hyp) == main_verb_number(ref)

    def percent(c: int, n: int) -> float:
        return 100.0 * c / n if n else 0.0

    return AgreementReport(percent(correct, total), correct, total,
                           percent(long_correct, long_total), long_correct, long_total)


class AgreementMetric(Metric):
    """Share (%) of hypotheses whose main verb has the reference main verb's number
    (:func:`agreement_counts`, one sentence's
    statistics: ``[agrees, 1]``)."""

    _SIGNATURE_TYPE = Signature

    def _preprocess_segment(self, sent: str) -> str:
        return sent

    def _extract_reference_info(self, refs: Sequence[str]) -> Dict[str, Any]:
        number = main_verb_number(refs[0])
        if number is None:
            raise ValueError(f"reference has no vf verb form: {refs[0]!r}")
        return {"number": number}

    def _compute_segment_statistics(self, hypothesis: str, ref_kwargs: Dict) -> List[int]:
        return [int(main_verb_number(hypothesis) == ref_kwargs["number"]), 1]

    def _compute_score_from_stats(self, stats: List[Any]) -> Score:
        return Score("agreement", 100.0 * float(stats[0]) / float(stats[1]) if stats[1] else 0.0)

    def _aggregate_and_compute(self, stats: List[List[Any]]) -> Score:
        return self._compute_score_from_stats([sum(s[0] for s in stats), sum(s[1] for s in stats)])
