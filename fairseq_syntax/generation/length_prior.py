"""Target-length prior ``p(len(y) | len(x))`` from training statistics (Eriguchi et al. 2016, eq. 17).

Counts come from ``length_counts`` ``{src_len: {tgt_len: count}}`` in ``syntax_manifest.json``
(subword tokens without eos); the beam search of
:mod:`~fairseq_syntax.generation.length_prior_generator` adds the log prior to finishing
candidates before the top-k (eq. 16).  The paper does not say how it smooths; here, add-``k``
towards a discretised Gaussian of the length ratio::

    p(m | n) = (c(n, m) + k · g(m | n)) / (c(n) + k),   g(m | n) ∝ exp(-(m - ρ n)² / 2σ(n)²),
    σ(n) = max(s · n, 1),   ρ, s = mean and std of m / n over the training pairs (n >= 1)

so unseen lengths are penalised, never excluded; computed in log space.
"""
import json
import math
import os
from functools import lru_cache
from typing import Dict, Mapping

from fairseq_syntax.data.side_files import MANIFEST


def load_length_counts(data_dir: str) -> Dict[int, Dict[int, int]]:
    """``length_counts`` of the data-bin's manifest as ``{src_len: {tgt_len: count}}`` (ints)."""
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} not found: the length prior needs the training length statistics that "
            "fairseq-syntax-preprocess writes into the data-bin's manifest"
        )
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if "length_counts" not in manifest:
        raise KeyError(f"{path} has no 'length_counts': remake the data-bin with fairseq-syntax-preprocess")
    return {
        int(src): {int(tgt): int(count) for tgt, count in row.items()}
        for src, row in manifest["length_counts"].items()
    }


class LengthPrior:
    """Smoothed ``log p(len(y) | len(x))``; ``smoothing`` is the pseudo-count ``k`` (> 0)."""

    def __init__(self, counts: Mapping[int, Mapping[int, int]], smoothing: float = 1.0):
        if not smoothing > 0:
            raise ValueError(f"the length-prior smoothing must be > 0, got {smoothing}")
        self.counts = {int(n): {int(m): int(c) for m, c in row.items() if c > 0} for n, row in counts.items()}
        self.totals = {n: sum(row.values()) for n, row in self.counts.items()}
        self.smoothing = float(smoothing)
        weight = total = square = 0.0
        for n, row in self.counts.items():
            if n < 1:
                continue
            for m, c in row.items():
                weight += c
                total += c * m / n
                square += c * (m / n) ** 2
        if weight == 0:
            self.ratio_mean, self.ratio_std = 1.0, 0.0
        else:
            self.ratio_mean = total / weight
            self.ratio_std = math.sqrt(max(square / weight - self.ratio_mean ** 2, 0.0))
        self.log_prob = lru_cache(maxsize=1 << 16)(self._log_prob)
        self._log_norm = lru_cache(maxsize=1 << 12)(self._backoff_log_norm)

    @classmethod
    def from_data_dir(cls, data_dir: str, smoothing: float = 1.0) -> "LengthPrior":
        return cls(load_length_counts(data_dir), smoothing)

    def sigma(self, src_len: int) -> float:
        return max(self.ratio_std * src_len, 1.0)

    def _exponent(self, src_len: int, tgt_len: int) -> float:
        mu, sigma = self.ratio_mean * src_len, self.sigma(src_len)
        return -((tgt_len - mu) ** 2) / (2 * sigma ** 2)

    def _backoff_log_norm(self, src_len: int) -> float:
        # the sum over m' >= 0 of the Gaussian terms, which are negligible beyond 40 sigma
        # of the mean; summed in log space around the largest term
        mu, sigma = self.ratio_mean * src_len, self.sigma(src_len)
        peak = self._exponent(src_len, max(0, int(round(mu))))
        last = int(math.ceil(mu + 40 * sigma)) + 1
        return peak + math.log(sum(math.exp(self._exponent(src_len, m) - peak) for m in range(last + 1)))

    def backoff_log_prob(self, src_len: int, tgt_len: int) -> float:
        """``log g(tgt_len | src_len)``, the discretised Gaussian of the length ratio."""
        return self._exponent(src_len, tgt_len) - self._log_norm(src_len)

    def _log_prob(self, src_len: int, tgt_len: int) -> float:
        src_len, tgt_len = int(src_len), int(tgt_len)
        count = self.counts.get(src_len, {}).get(tgt_len, 0)
        total = self.totals.get(src_len, 0)
        smoothed = math.log(self.smoothing) + self.backoff_log_prob(src_len, tgt_len)
        numerator = smoothed if count == 0 else _logaddexp(math.log(count), smoothed)
        return numerator - math.log(total + self.smoothing)


def _logaddexp(a: float, b: float) -> float:
    top = max(a, b)
    return top + math.log(math.exp(a - top) + math.exp(b - top))
