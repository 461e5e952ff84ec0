"""Regression detection: a candidate against its baseline, and change points in a case's history.

Pure Python + NumPy/SciPy (no torch, no database), so the gate, the dashboard and the evaluation
benchmark share it.

* :func:`compare_case`: a case regresses when its slowdown is larger than a minimum effect AND
  statistically supported twice over: within the two runs (one-sided Mann-Whitney U on the timing
  samples) and against the case's own run-to-run noise on this hardware: the share of the history's
  deviations from their rolling median at least as large as the candidate's (when there are any),
  else a normal tail fitted robustly (MAD) to those deviations. Cases with heavy-tailed history
  (launch-bound cases with 2-6x outlier runs) thereby need a step larger than their outliers.
* :func:`benjamini_hochberg`: false-discovery control across the hundreds of cases of a run.
* :func:`change_points`: binary segmentation of the log-median series at the split that maximises
  the size-weighted mean distance, kept when Welch's t-test supports it (E-divisive-means style,
  as Apache Otava does), reporting each step's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

DEFAULT_MIN_EFFECT = 0.05
DEFAULT_FDR = 0.05


@dataclass(frozen=True)
class Comparison:
    case: str
    ratio: float  # candidate median / baseline median (> 1 is slower)
    p_within: float
    p_history: float
    p: float
    min_effect: float
    history: int

    @property
    def effect(self) -> float:
        return self.ratio - 1.0


def _log_deviations(history: list[float]) -> np.ndarray:
    """|log(m_i / median of its neighbours)| for a series of per-run medians."""
    x = np.log(np.asarray(history, dtype=float))
    devs = []
    for i in range(len(x)):
        lo, hi = max(0, i - 5), min(len(x), i + 6)
        window = np.delete(x[lo:hi], i - lo)
        if len(window):
            devs.append(abs(x[i] - np.median(window)))
    return np.asarray(devs)


def compare_case(case: str, baseline: list[float], candidate: list[float], history: list[float] | None = None,
                 min_effect: float = DEFAULT_MIN_EFFECT) -> Comparison:
    """Evidence that ``candidate`` samples are slower than ``baseline`` samples (milliseconds)."""
    base = np.asarray([v for v in baseline if v > 0], dtype=float)
    cand = np.asarray([v for v in candidate if v > 0], dtype=float)
    if len(base) == 0 or len(cand) == 0:
        raise ValueError(f"{case}: no timing samples to compare")
    ratio = float(np.median(cand) / np.median(base))
    if len(base) >= 3 and len(cand) >= 3 and not (np.all(base == base[0]) and np.all(cand == cand[0])):
        p_within = float(stats.mannwhitneyu(cand, base, alternative="greater").pvalue)
    else:
        p_within = 0.0 if ratio > 1 + min_effect else 1.0
    hist = [h for h in (history or []) if h and h > 0]
    if len(hist) >= 5:
        devs = _log_deviations(hist)
        effect = math.log(ratio) if ratio > 0 else 0.0
        exceed = int(np.sum(devs >= effect))
        if exceed:  # the history itself has excursions this large: only their frequency is evidence
            p_history = float((1 + exceed) / (len(devs) + 1))
        else:  # nothing this large in the history: a normal tail fitted robustly to the history's spread
            sigma = max(1.4826 * float(np.median(devs)), 1e-9)
            p_history = float(stats.norm.sf(effect / sigma))
    else:
        p_history = p_within  # without history, the samples are all the evidence there is
    return Comparison(case, ratio, p_within, p_history, max(p_within, p_history), min_effect, len(hist))


def benjamini_hochberg(pvalues: list[float], q: float = DEFAULT_FDR) -> list[bool]:
    """Which hypotheses to reject so that the expected share of false discoveries is <= q."""
    m = len(pvalues)
    if m == 0:
        return []
    order = sorted(range(m), key=lambda i: pvalues[i])
    cutoff = -1
    for rank, i in enumerate(order, start=1):
        if pvalues[i] <= q * rank / m:
            cutoff = rank
    rejected = [False] * m
    for rank, i in enumerate(order, start=1):
        if rank <= cutoff:
            rejected[i] = True
    return rejected


def regressions(comparisons: list[Comparison], q: float = DEFAULT_FDR) -> list[Comparison]:
    """Comparisons past their minimum effect whose evidence survives FDR control."""
    rejected = benjamini_hochberg([c.p for c in comparisons], q)
    return [c for c, r in zip(comparisons, rejected) if r and c.effect > c.min_effect]


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point after the change
    before: float  # median of the segment before (same unit as the series)
    after: float
    pvalue: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1.0


def _clip_outliers(x: np.ndarray, width: float = 6.0) -> np.ndarray:
    """Pull points further than ``width`` robust sigmas from the median back to that distance, so a
    lone 2-6x outlier run does not decide where a segment splits."""
    center = np.median(x)
    sigma = 1.4826 * np.median(np.abs(x - center)) or 1e-12
    return np.clip(x, center - width * sigma, center + width * sigma)


def change_points(values: list[float], min_effect: float = DEFAULT_MIN_EFFECT, alpha: float = 0.001,
                  min_segment: int = 3) -> list[ChangePoint]:
    """Steps in a series of per-run medians (positive numbers), in order of position."""
    x = np.log(np.asarray(values, dtype=float))
    found: list[ChangePoint] = []

    def split(lo: int, hi: int) -> None:
        n = hi - lo
        if n < 2 * min_segment:
            return
        seg = x[lo:hi]
        k = np.arange(min_segment, n - min_segment + 1)
        c1 = np.cumsum(_clip_outliers(seg))
        n_l, n_r = k, n - k
        mean_l, mean_r = c1[k - 1] / n_l, (c1[-1] - c1[k - 1]) / n_r
        # size-weighted between-segment distance (the divergence E-divisive maximises, in its
        # mean-shift form); the Welch test below then decides whether the split is real
        score = n_l * n_r / n * (mean_l - mean_r) ** 2
        if not len(score):
            return
        best = int(k[int(np.argmax(score))])
        left, right = seg[:best], seg[best:]
        if np.all(left == left[0]) and np.all(right == right[0]):
            p = 0.0 if left[0] != right[0] else 1.0
        else:  # rank-based: one 6x outlier run (launch-bound cases have them) cannot fake or hide a step
            p = float(stats.mannwhitneyu(left, right, alternative="two-sided").pvalue)
        before, after = float(np.exp(np.median(left))), float(np.exp(np.median(right)))
        if p < alpha and abs(after / before - 1) >= min_effect:
            found.append(ChangePoint(lo + best, before, after, p))
            split(lo, lo + best)
            split(lo + best, hi)

    split(0, len(x))
    return sorted(found, key=lambda c: c.index)
