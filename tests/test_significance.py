"""paired_deltas is sacreBLEU's PairedTest, with Δ's interval on the same resamples; where
the two systems score the same on every sentence, p is 1, not PairedTest's 1/1001."""
import numpy as np
import pytest
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from conftest import drop_words
from fairseq_syntax.evaluation.significance import paired_deltas


def _corpus(seed, n=80):
    rng = np.random.default_rng(seed)
    words = "a man dog runs the red ball on grass near water two women sit".split()
    return [" ".join(rng.choice(words, size=rng.integers(4, 10))) for _ in range(n)]


def test_identical_scores_give_p_one_and_no_finding():
    refs = _corpus(0)
    base = drop_words(refs, 0.3, 1)
    _, res = PairedTest([("b", base), ("m", list(base))], {"bleu": BLEU()}, [refs],
                        test_type="bs", n_samples=1000)()
    assert res["BLEU"][1].p_value == 1 / 1001  # sacreBLEU's convention, which we correct
    d = paired_deltas("bleu", base, {"same": list(base)}, refs)["same"]
    assert (d.delta, d.low, d.high, d.p) == (0.0, 0.0, 0.0, 1.0)
    assert not d.significant


def test_different_systems_keep_paired_tests_p():
    refs = _corpus(0)
    base, better = drop_words(refs, 0.4, 1), drop_words(refs, 0.2, 2)
    _, res = PairedTest([("b", base), ("m", better)], {"bleu": BLEU()}, [refs],
                        test_type="bs", n_samples=1000)()
    d = paired_deltas("bleu", base, {"m": better}, refs)["m"]
    assert d.p == res["BLEU"][1].p_value < 0.05
    assert d.delta == res["BLEU"][1].score - res["BLEU"][0].score > 0
    assert 0 < d.low < d.delta < d.high
    assert d.significant


def test_ribes_is_resampled_over_sentences_as_its_definition_says():
    """RIBES through PairedTest (RibesMetric): Δ is the difference of corpus_ribes (the mean
    of sentence RIBES, %), the interval that of the same means over the very resamples
    PairedTest draws (sacreBLEU's seed 12345), its p PairedTest's own."""
    from fairseq_syntax.evaluation.translation_scores import RibesMetric
    from fairseq_syntax.syntax.ribes import corpus_ribes, sentence_ribes

    refs = _corpus(0)
    rng = np.random.default_rng(3)
    shuffled = [" ".join(rng.permutation(r.split())) for r in refs]  # words out of order
    base, better = shuffled, [r if k % 2 else s for k, (r, s) in enumerate(zip(refs, shuffled))]
    d = paired_deltas("ribes", base, {"m": better}, refs)["m"]
    words = [[r.split() for r in refs]]
    assert d.delta == 100 * (corpus_ribes(words, [h.split() for h in better])
                             - corpus_ribes(words, [h.split() for h in base]))
    per_sentence = np.array([[sentence_ribes(r.split(), h.split()) for h, r in zip(hyps, refs)]
                             for hyps in (base, better)])
    idx = np.random.default_rng(12345).choice(len(refs), size=(1000, len(refs)), replace=True)
    diffs = np.sort(100 * (per_sentence[1][idx].mean(1) - per_sentence[0][idx].mean(1)))
    assert d.low == pytest.approx(diffs[25], abs=1e-3)
    assert d.high == pytest.approx(diffs[974], abs=1e-3)
    _, res = PairedTest([("b", base), ("m", better)], {"ribes": RibesMetric()}, [refs],
                        test_type="bs", n_samples=1000)()
    assert d.p == res["RIBES"][1].p_value < 0.05
    assert 0 < d.low < d.delta < d.high


@pytest.mark.parametrize("df", range(1, 12))
def test_student_t_p_is_scipys_two_sided_t_test(df):
    """The closed form (Abramowitz & Stegun 26.7.3-4) against scipy's Student-t."""
    from scipy.stats import t as student_t

    from fairseq_syntax.evaluation.significance import student_t_p

    for t in (0.0, 0.1, 0.7, 1.0, 2.0, 4.303, 12.706, 60.0, -3.0):
        assert student_t_p(t, df) == pytest.approx(2 * student_t.sf(abs(t), df),
                                                   rel=1e-9, abs=1e-14)
    assert student_t_p(float("inf"), df) == 0.0


def test_seed_mean_p_is_the_one_sample_t_test_over_seeds():
    from scipy.stats import ttest_1samp

    from fairseq_syntax.evaluation.significance import seed_mean

    for deltas in ([0.52, 0.64, 0.72], [-4.00, -4.10, -2.94], [0.3, -0.2], [1, 2, 3, 4, 9]):
        m = seed_mean(deltas)
        assert m.p == pytest.approx(ttest_1samp(deltas, 0.0).pvalue, rel=1e-9)
        assert m.mean == pytest.approx(np.mean(deltas))
    same = seed_mean([0.2, 0.2])  # the same Δ in every seed (one sentence of agreement):
    assert (same.low, same.high, same.p, same.significant) == (None, None, None, False)
    assert seed_mean([0.0, 0.0]).p == 1.0
    assert seed_mean([0.5]).p is None  # one seed: no test over seeds


@pytest.mark.parametrize("df", [1, 2, 4, 10, 11, 12, 30, 100])
def test_the_seed_interval_is_scipys_student_t_interval_at_any_number_of_seeds(df):
    """The half-width multiplier is Student's 0.975 quantile at every df, to the 3 decimals
    of a printed table (the 95 % interval of 12 seeds is wider than the normal's 1.96 that
    was used beyond 10 df before)."""
    from scipy.stats import t as student_t

    from fairseq_syntax.evaluation.significance import seed_mean, student_t_quantile

    assert student_t_quantile(0.05, df) == pytest.approx(student_t.ppf(0.975, df), rel=1e-9)
    rng = np.random.default_rng(df)
    deltas = rng.normal(0.3, 1.0, df + 1)
    m = seed_mean(deltas)
    low, high = student_t.interval(0.95, df, loc=np.mean(deltas),
                                   scale=np.std(deltas, ddof=1) / np.sqrt(df + 1))
    sem = np.std(deltas, ddof=1) / np.sqrt(df + 1)
    assert (m.low, m.high) == (pytest.approx(low, abs=5e-4 * sem),
                               pytest.approx(high, abs=5e-4 * sem))
    assert m.high - m.low == pytest.approx(2 * round(student_t.ppf(0.975, df), 3) * sem)


def test_a_cached_comparison_keeps_sacrebleus_p_unrounded():
    """sacreBLEU's p is (c + 1) / 1001: 50 / 1001 = 0.04995 is significant, and stays so
    through the cache (rounded to 4 decimals it read 0.05)."""
    from fairseq_syntax.evaluation.significance import Delta

    d = Delta(0.8, 0.05, 1.6, 50 / 1001)
    assert d.significant and Delta(**d.to_json()).significant


def test_a_cell_whose_seeds_agree_to_the_sentence_shows_no_interval_and_no_bold():
    """Two seeds that each gain one sentence of agreement (+0.20, neither significant
    alone): the t test has no spread to estimate the noise from, so the cell says so
    instead of a zero-width interval in bold."""
    from fairseq_syntax.evaluation.significance import Delta
    from fairseq_syntax.experiment.tables import comparison_cell

    one = Delta(0.2, -0.2, 0.6, 0.62)
    assert comparison_cell({1: one, 2: one}) == "+0.20 in every seed, no interval (0/2)"
    assert comparison_cell({1: one, 2: Delta(0.4, 0.0, 0.8, 0.2)}) == (
        "+0.30 [-0.97, +1.57] p=0.205 (0/2)")


def test_a_bound_just_past_zero_is_not_printed_as_zero():
    """Two decimals, except a bound that is not 0 but rounds to ±0.00: it keeps two
    significant digits, so a bold interval [+0.003, +1.20] does not read [+0.00, +1.20]
    beside a plain one whose bound is 0; an exact 0 stays +0.00, and so does Δ."""
    from fairseq_syntax.evaluation.significance import Delta, bound, interval
    from fairseq_syntax.experiment.tables import comparison_cell

    assert [bound(v) for v in (1.234, -0.5, 0.0, 0.003, -0.0041, 0.00049)] == [
        "+1.23", "-0.50", "+0.00", "+0.003", "-0.0041", "+0.00049"]
    assert interval(0.004, 0.003, 1.2) == "+0.00 [+0.003, +1.20]"
    assert comparison_cell({1: Delta(0.6, 0.003, 1.2, 0.04)}) == (
        "**+0.60 [+0.003, +1.20] p=0.040** †")
    assert comparison_cell({1: Delta(0.3, 0.0, 0.6, 0.06)}) == "+0.30 [+0.00, +0.60] p=0.060"
