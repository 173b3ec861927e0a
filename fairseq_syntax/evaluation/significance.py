"""Is a method's score different from its backbone's? Paired bootstrap resampling over
the test sentences (Koehn 2004), as the papers test it, through sacreBLEU's own
``PairedTest``; and the mean difference over training seeds.

Per seed and test set: Δ = score(method) - score(backbone), PairedTest's p (its
two-sided paired bootstrap test) and Δ's 95 % interval over the very resamples PairedTest
draws (sacreBLEU seeds each comparison with ``SACREBLEU_SEED``, 12345 by default, so the
same sentence indices; the 2.5th and 97.5th percentiles, as sacreBLEU's ``estimate_ci``
takes them). Over seeds: the mean Δ with a Student-t 95 % interval and the two-sided p
of the one-sample t test of the seeds' Δ against 0 (so that a correction for testing
several scores, such as Bonferroni's p < 0.05 / k, can be read off the table)."""
import functools
import math
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Sequence

import numpy as np

N_SAMPLES = 1000  # bootstrap resamples (sacreBLEU's default for ``bs``)
ALPHA = 0.05


@dataclass
class Delta:
    """One paired comparison: Δ of the method over the backbone, its 95 % interval, p."""

    delta: float
    low: float
    high: float
    p: float

    @property
    def significant(self) -> bool:
        """p < 0.05 and the interval excludes 0."""
        return self.p < ALPHA and (self.low > 0 or self.high < 0)

    def to_json(self) -> dict:
        """Unrounded: sacreBLEU's p is (c + 1) / 1001, and 50 / 1001 rounded to 4 decimals
        would read 0.05, no longer below ``ALPHA`` (caches written before 2026-12-05 hold 4
        decimals; none of their p = 0.05 has an interval that excludes 0)."""
        return asdict(self)


def make_metric(name: str, tokenize: str = "13a"):
    """The sacreBLEU metric object of ``name``: ``bleu`` (with sacreBLEU's ``tokenize``),
    ``chrf``, ``agreement`` (:class:`~.agreement.AgreementMetric`) or ``ribes`` of
    tokenised text (:class:`~.translation_scores.RibesMetric`)."""
    from sacrebleu.metrics import BLEU, CHRF

    if name == "bleu":
        return BLEU(tokenize=tokenize)
    if name == "chrf":
        return CHRF()
    if name == "agreement":
        from .agreement import AgreementMetric

        return AgreementMetric()
    if name == "ribes":
        from .translation_scores import RibesMetric

        return RibesMetric()
    raise ValueError(f"no paired test for the score {name!r} (bleu, chrf, agreement, ribes)")


def paired_deltas(metric_name: str, backbone: Sequence[str], systems: Dict[str, Sequence[str]],
                  references: Sequence[str], tokenize: str = "13a",
                  n_samples: int = N_SAMPLES) -> Dict[str, Delta]:
    """Each system of ``systems`` (name -> hypotheses) against ``backbone`` on one test
    set: sacreBLEU's ``PairedTest(test_type="bs")``, and Δ's interval on its resamples."""
    from sacrebleu.significance import PairedTest

    refs = [list(references)]
    for name, hyps in [("backbone", backbone), *systems.items()]:
        if len(hyps) != len(references):
            raise ValueError(f"{name}: {len(hyps)} hypotheses for {len(references)} references")
    metric = make_metric(metric_name, tokenize)
    test = PairedTest([("backbone", list(backbone)), *((k, list(v)) for k, v in systems.items())],
                      {metric_name: metric}, refs, test_type="bs", n_samples=n_samples)
    _, results = test()
    score_name = next(k for k in results if k != "System")
    base = results[score_name][0].score
    # the resamples _paired_bs_test draws for every system: default_rng(seed).choice(...)
    idxs = np.random.default_rng(test._seed or None).choice(
        len(references), size=(n_samples, len(references)), replace=True)
    base_stats = np.array(metric._extract_corpus_statistics(list(backbone), refs), dtype="float32")
    base_scores = np.array([metric._compute_score_from_stats(s.sum(0)).score
                            for s in base_stats[idxs]])
    out = {}
    for name, result in zip(results["System"][1:], results[score_name][1:]):
        stats = np.array(metric._extract_corpus_statistics(list(systems[name]), refs),
                         dtype="float32")
        diffs = np.sort(np.array([metric._compute_score_from_stats(s.sum(0)).score
                                  for s in stats[idxs]]) - base_scores)
        cut = len(diffs) // 40
        delta = result.score - base
        # PairedTest counts resamples whose |Δ| exceeds the real one, plus one: 1/1001 where
        # every resample scores the same (identical scores per sentence). No difference at
        # all is p = 1.
        p = 1.0 if delta == 0 and diffs[0] == diffs[-1] == 0 else float(result.p_value)
        out[name] = Delta(delta, float(diffs[cut]), float(diffs[len(diffs) - cut - 1]), p)
    return out


@dataclass
class SeedMean:
    """The mean Δ over seeds, its Student-t 95 % interval and the one-sample t test's
    two-sided p. Interval and p are None under 2 seeds, and where every seed has the same
    nonzero Δ: the seeds' spread is 0, so the t test has no estimate of the noise (a
    discrete score such as agreement moves in steps of one sentence)."""

    mean: float
    low: Optional[float]
    high: Optional[float]
    n: int
    p: Optional[float] = None

    @property
    def significant(self) -> bool:
        return self.low is not None and (self.low > 0 or self.high < 0)


def student_t_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (an integer >= 1) degrees of freedom, in
    closed form: 1 - A(t|df) of Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even)."""
    if df < 1:
        raise ValueError(f"Student's t needs df >= 1, not {df}")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # 26.7.3: (2/pi)(theta + sin(cos + 2/3 cos^3 + ... + cos^(df-2) term))
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        a = 2 / math.pi * (theta + sin * total)
    else:  # 26.7.4: sin(1 + 1/2 cos^2 + (1.3)/(2.4) cos^4 + ... + cos^(df-2) term)
        term, total = 1.0, 0.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= cos2 * (2 * k - 1) / (2 * k)
        a = sin * total
    return min(1.0, max(0.0, 1.0 - a))


@functools.lru_cache(maxsize=None)  # a rendering asks for the same few df in every cell
def student_t_quantile(p: float, df: int) -> float:
    """The t > 0 with :func:`student_t_p` (t, df) = p: the half-width multiplier of a
    two-sided 1 - p interval (4.303 for p = 0.05 and 2 degrees of freedom), by bisection."""
    low, high = 0.0, 1.0
    while student_t_p(high, df) > p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if student_t_p(mid, df) > p else (low, mid)
    return (low + high) / 2


def seed_mean(deltas: Sequence[float]) -> SeedMean:
    values = np.asarray(list(deltas), dtype=float)
    mean, n = float(values.mean()), len(values)
    if n < 2:
        return SeedMean(mean, None, None, n)
    sem = float(values.std(ddof=1)) / math.sqrt(n)
    if sem == 0:  # every seed the same Δ
        return SeedMean(mean, mean, mean, n, 1.0) if mean == 0 else SeedMean(mean, None, None, n)
    # the quantile to 3 decimals, as Student-t tables print it (4.303 at 2 df: every
    # interval published here was computed so)
    half = round(student_t_quantile(ALPHA, n - 1), 3) * sem
    return SeedMean(mean, mean - half, mean + half, n, student_t_p(mean / sem, n - 1))


def bound(value: float) -> str:
    """An interval's bound with its sign to two decimals; one that is not 0 but would round
    to ±0.00 keeps two significant digits (+0.003), so a bound just past 0 is not read as 0."""
    return f"{value:+.2g}" if value and abs(value) < 0.005 else f"{value:+.2f}"


def interval(delta: float, low: float, high: float) -> str:
    """``Δ [low, high]``: Δ to two decimals, each bound a :func:`bound`."""
    return f"{delta:+.2f} [{bound(low)}, {bound(high)}]"
