"""RIBES (Isozaki et al. 2010) on hand-worked examples."""
import math

import pytest

from fairseq_syntax.syntax.ribes import (
    align_words, corpus_ribes, normalized_kendall_tau, ribes_parts, sentence_ribes,
)


def test_reordered_unique_words():
    ref, hyp = "a b c d e".split(), "c d a b".split()
    # every word occurs once: ranks 2 3 0 1; ascending pairs (2,3) and (0,1) of 6
    assert align_words(ref, hyp) == [2, 3, 0, 1]
    nkt, precision, bp = ribes_parts(ref, hyp)
    assert nkt == pytest.approx(1 / 3)
    assert precision == 1.0
    assert bp == pytest.approx(math.exp(1 - 5 / 4))
    assert sentence_ribes(ref, hyp) == pytest.approx((1 / 3) * math.exp(-0.25) ** 0.10)
    assert sentence_ribes(ref, hyp) == pytest.approx(0.325104, abs=1e-6)


def test_repeated_words_are_aligned_by_their_context():
    ref, hyp = "the cat saw the dog".split(), "the dog saw the cat".split()
    # hyp[0] 'the': right bigram 'the dog' is unique -> ref 3; hyp[3] 'the': left bigram
    # 'saw the' is unique -> ref 2 + 1 = 3; ranks 3 4 2 3 1: ascending (3,4), (2,3) of 10
    assert align_words(ref, hyp) == [3, 4, 2, 3, 1]
    assert normalized_kendall_tau([3, 4, 2, 3, 1]) == pytest.approx(0.2)
    assert sentence_ribes(ref, hyp) == pytest.approx(0.2)


def test_precision_and_brevity():
    # 'x' is not in the reference: 2 of 3 words aligned, in order
    assert sentence_ribes("a b c".split(), "x a b".split()) == pytest.approx((2 / 3) ** 0.25)
    # short hypothesis: BP = exp(1 - 4/2)
    assert sentence_ribes("a b c d".split(), "a b".split()) == pytest.approx(math.exp(-1) ** 0.1)
    # one aligned word and a one-word reference: NKT 1, P = 1/2
    assert sentence_ribes(["a"], "a b".split()) == pytest.approx(0.5 ** 0.25)
    # fewer than two aligned words otherwise: 0
    assert sentence_ribes("a b".split(), "a c".split()) == 0.0
    assert sentence_ribes("a b".split(), []) == 0.0
    assert sentence_ribes("a b c".split(), "a b c".split()) == 1.0
    # alpha and beta are the exponents
    assert sentence_ribes("a b c".split(), "x a b".split(), alpha=1.0) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        sentence_ribes([], ["a"])


def test_corpus_score_is_the_mean_of_the_best_reference():
    hyps = ["c d a b".split(), "a b c".split()]
    refs_1 = ["a b c d e".split(), "c b a".split()]
    refs_2 = ["c d a b".split(), "a b c".split()]
    first = (1 / 3) * math.exp(-0.25) ** 0.10
    assert corpus_ribes([refs_1], hyps) == pytest.approx((first + 0.0) / 2)
    assert corpus_ribes([refs_1, refs_2], hyps) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        corpus_ribes([refs_1[:1]], hyps)
