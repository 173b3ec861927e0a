"""BLEU, chrF and RIBES of translations: the one scorer of the harness and the recipes.

* BLEU: sacreBLEU on the detokenised hypotheses against the raw references, with the
  corpus's tokenizer, by default sacreBLEU's own choice for the target language
  (:func:`bleu_tokenization`: ``ja-mecab`` for Japanese output, MeCab + IPAdic, offline;
  ``13a`` for most languages).
* chrF: sacreBLEU's chrF on the same text (character n-grams: no tokenisation).
* RIBES (Isozaki et al. 2010; the metric of Eriguchi et al. 2016) on tokenised output: the
  model's own words (its output before detokenisation) against the references in the
  recipe's tokenisation, so that it compares the words the model was trained on.

Each score comes with a signature (sacreBLEU's; RIBES's names its tokenisation and α, β).
RIBES is also a sacreBLEU metric (:class:`RibesMetric`), so that sacreBLEU's own
``PairedTest`` resamples it over sentences like BLEU and chrF.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from sacrebleu.metrics.base import Metric, Score, Signature
from sacrebleu.metrics.bleu import BLEU

from fairseq_syntax.syntax.ribes import ALPHA, BETA, corpus_ribes, sentence_ribes

RIBES_SIGNATURE = f"nrefs:1|tok:recipe-words|alpha:{ALPHA}|beta:{BETA}|ribes.py-1.03"


@dataclass
class TranslationScores:
    bleu: float
    chrf: float
    ribes: Optional[float]  # 0..100, as BLEU and chrF; None without tokenised text
    signatures: Dict[str, str]


def bleu_tokenization(lang: str) -> str:
    """sacreBLEU's own tokenizer for output in ``lang``, as ``BLEU(trg_lang=lang)`` chooses
    it: ``zh``, ``ja-mecab`` or ``ko-mecab`` for Chinese, Japanese or Korean, else ``13a``."""
    return BLEU._TOKENIZER_MAP.get(lang, BLEU.TOKENIZER_DEFAULT)


def bleu_tokenizations() -> List[str]:
    """The names sacreBLEU's ``BLEU(tokenize=...)`` takes."""
    return list(BLEU.TOKENIZERS)


def score_translations(hypotheses: Sequence[str], references: Sequence[str], bleu_tokenize: str,
                       hypotheses_tok: Optional[Sequence[str]] = None,
                       references_tok: Optional[Sequence[str]] = None) -> TranslationScores:
    """Score detokenised ``hypotheses`` against raw ``references`` (one per sentence) with
    sacreBLEU's ``bleu_tokenize``; RIBES when the tokenised text of both is given."""
    from sacrebleu.metrics import CHRF

    hyps, refs = list(hypotheses), list(references)
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    bleu, chrf = BLEU(tokenize=bleu_tokenize), CHRF()
    bleu_score, chrf_score = bleu.corpus_score(hyps, [refs]).score, chrf.corpus_score(hyps, [refs]).score
    signatures = {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())}
    ribes = None
    if hypotheses_tok is not None and references_tok is not None:
        if not len(hypotheses_tok) == len(references_tok) == len(hyps):
            raise ValueError(f"{len(hypotheses_tok)} tokenised hypotheses and "
                             f"{len(references_tok)} tokenised references for {len(hyps)} "
                             "sentences")
        ribes = 100.0 * corpus_ribes([[r.split() for r in references_tok]],
                                     [h.split() for h in hypotheses_tok])
        signatures["ribes"] = RIBES_SIGNATURE
    return TranslationScores(bleu=bleu_score, chrf=chrf_score, ribes=ribes, signatures=signatures)


class RibesMetric(Metric):
    """Corpus RIBES (%) of tokenised text, one reference: the mean of
    :func:`~fairseq_syntax.syntax.ribes.sentence_ribes` (a sentence's statistics:
    ``[its RIBES, 1]``), as :func:`~fairseq_syntax.syntax.ribes.corpus_ribes`."""

    _SIGNATURE_TYPE = Signature

    def _preprocess_segment(self, sent: str) -> str:
        return sent

    def _extract_reference_info(self, refs: Sequence[str]) -> Dict[str, Any]:
        return {"words": refs[0].split()}

    def _compute_segment_statistics(self, hypothesis: str, ref_kwargs: Dict) -> List[float]:
        return [sentence_ribes(ref_kwargs["words"], hypothesis.split()), 1.0]

    def _compute_score_from_stats(self, stats: List[Any]) -> Score:
        return Score("RIBES", 100.0 * float(stats[0]) / float(stats[1]) if stats[1] else 0.0)

    def _aggregate_and_compute(self, stats: List[List[Any]]) -> Score:
        return self._compute_score_from_stats([sum(s[0] for s in stats), sum(s[1] for s in stats)])
