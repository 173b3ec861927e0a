"""BLEU, chrF and RIBES of detokenised translations, Japanese output included.

* BLEU: sacreBLEU with the target language's tokenisation, ``ja-mecab`` for Japanese
  (MeCab + IPAdic: ``mecab-python3`` and ``ipadic``, offline), ``13a`` otherwise.
* chrF: sacreBLEU's chrF (character n-grams, whitespace ignored: no tokenisation).
* RIBES (Isozaki et al. 2010; the metric of Eriguchi et al. 2016) on tokenised output:
  hypotheses and references are split by the same sacreBLEU tokenizer BLEU uses, so both
  metrics count the same words (for Japanese, the words of ``fairseq-syntax-tokenize
  --tokenizer ja-mecab``, the recipe's own tokenisation).

Each score comes with a signature (sacreBLEU's; RIBES's names its tokenizer and α, β).
"""
from dataclasses import dataclass
from typing import Dict, List, Sequence

from .ribes import ALPHA, BETA, corpus_ribes


@dataclass
class TranslationScores:
    bleu: float
    chrf: float
    ribes: float  # 0..100, as BLEU and chrF
    signatures: Dict[str, str]


def bleu_tokenization(lang: str) -> str:
    """sacreBLEU's tokenizer for output in ``lang``: ``ja-mecab`` for Japanese, else ``13a``."""
    return "ja-mecab" if lang == "ja" else "13a"


def _reference_sets(references) -> List[List[str]]:
    """One reference per sentence (a list of strings), or several sets (a list of lists)."""
    if references and isinstance(references[0], str):
        return [list(references)]
    return [list(refs) for refs in references]


def score_translations(hypotheses: Sequence[str], references, lang: str) -> TranslationScores:
    """Score detokenised ``hypotheses`` against ``references`` (one string per sentence, or
    a list of such sets) for target language ``lang``."""
    from sacrebleu.metrics import BLEU, CHRF

    refs = _reference_sets(references)
    hyps = list(hypotheses)
    for k, ref_set in enumerate(refs):
        if len(ref_set) != len(hyps):
            raise ValueError(f"reference set {k} has {len(ref_set)} sentences, the "
                             f"hypotheses {len(hyps)}")
    bleu = BLEU(tokenize=bleu_tokenization(lang))
    chrf = CHRF()
    tokenizer = bleu.tokenizer
    ribes = corpus_ribes([[tokenizer(r).split() for r in ref_set] for ref_set in refs],
                         [tokenizer(h).split() for h in hyps])
    return TranslationScores(
        bleu=bleu.corpus_score(hyps, refs).score,
        chrf=chrf.corpus_score(hyps, refs).score,
        ribes=100.0 * ribes,
        signatures={"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature()),
                    "ribes": f"nrefs:{len(refs)}|tok:{tokenizer.signature()}|alpha:{ALPHA}"
                             f"|beta:{BETA}|ribes.py-1.03"},
    )
