"""The synthetic corpus's main-verb agreement accuracy as a sacreBLEU metric, so that
sacreBLEU's own ``PairedTest`` resamples it over sentences like BLEU and chrF."""
from typing import Any, Dict, List, Sequence

from sacrebleu.metrics.base import Metric, Score, Signature

from fairseq_syntax.data.synthetic_corpus import main_verb_number


class AgreementMetric(Metric):
    """Share (%) of hypotheses whose main verb has the reference main verb's number
    (:func:`~fairseq_syntax.data.synthetic_corpus.agreement_counts`, one sentence's
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
