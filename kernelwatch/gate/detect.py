"""Regression detection: a candidate against its baseline, and change points in a case's history.

Pure Python + NumPy/SciPy (no torch, no database), so the gate, the dashboard and the evaluation
benchmark share it.

* :func:`compare_case`: is one candidate run of a case slower than its baseline run? See its docstring
  for the model: a slowdown must be past the minimum effect and supported twice, by the two runs'
  timing samples (one-sided Mann-Whitney U) and against the case's between-run noise on this
  hardware (its history, or a conservative floor when the history is short).
* :func:`benjamini_hochberg`: false-discovery control across the hundreds of cases of a run
  (SciPy's ``false_discovery_control``).
* :func:`change_points`: binary segmentation of the log-median series; see its docstring.
* :func:`contamination`: samples that absorbed host-side delay (the median moved, the lower quantiles
  did not); such a case is unmeasured, not slower. See its docstring for the rule.
* :func:`between_machine_sigma` / :func:`machine_sigma`: the between-machine component of a case's noise
  when candidate and baseline ran on different physical GPUs.
* :func:`run_shift`: when most compared cases moved the same way, the run-wide shift.
* :func:`machine_bound` / :func:`run_ratio`: how far a machine of the model may be slower than another, past which
  a shift the references share is no machine's (the model's figures: :mod:`kernelwatch.gate.machines`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from kernelwatch.gate.machines import DEFAULT, Machine
from kernelwatch.kernels.names import NOISE_LABELS, calls_per_sample

DEFAULT_MIN_EFFECT = 0.05
DEFAULT_FDR = 0.05

# The between-run noise floor (jitter, relative noise) and the between-machine figures are data per hardware model:
# kernelwatch.gate.machines (the H200's measured, a named default elsewhere).
# Without MIN_HISTORY runs of history the floor is all there is, so it is doubled: each of the 12
# standard deviations behind the H200's jitter comes from 4 runs (3 degrees of freedom), and the true value can be
# about twice such an estimate (chi-square, 3 dof: P(s < sigma / 2) = 0.14).
MIN_HISTORY = 5
# A history is cut at its steps before its noise is measured (_log_deviations): looser than a reported change
# point's alpha, since a missed step inflates the noise (and hides regressions) while a spurious cut only drops
# a few deviations.
SEGMENT_ALPHA = 0.01
PRIOR_FACTOR = 2.0
# Change points (``change_points``, ``kernelwatch bisect``, the dashboard's step markers) need this many runs.
MIN_SERIES = 6
# Launch-bound cases (kernelwatch.kernels.names.launch_bound, declared with each case's facts) are heavy-tailed
# (docs/design.md): most runs agree within +-5%, but 1-3 runs in 30 come out 2-6x slower: one run is treated as
# possibly such an outlier run.
OUTLIER_RATE = 3 / 30
OUTLIER_FACTORS = (2.0, 6.0)
MIN_MACHINES = 3

# Contamination: a lower quantile "stays" when it moved by less than this share of the minimum effect.
STAY_SHARE = 0.5
# Run-wide shift: judged when at least RUN_SHIFT_SHARE of at least RUN_SHIFT_MIN_CASES compared cases are
# slower past their minimum effect.
RUN_SHIFT_SHARE = 0.75
RUN_SHIFT_MIN_CASES = 4


@dataclass(frozen=True)
class Contamination:
    """The quantiles behind a :func:`contamination` finding (milliseconds)."""

    median_ratio: float
    p20_ms: float
    baseline_p20_ms: float
    min_ms: float
    baseline_min_ms: float

    def describe(self) -> str:
        return (
            f"median {self.median_ratio - 1:+.1%} but p20 and min unchanged ({self.p20_ms * 1e3:.4g} vs "
            f"{self.baseline_p20_ms * 1e3:.4g} us, min {self.min_ms * 1e3:.4g} vs {self.baseline_min_ms * 1e3:.4g}"
            " us): samples absorbed host delay; re-measure"
        )


def quantile(values: np.ndarray, q: float) -> float:
    """Linear-interpolated quantile (the collector's p20 / p80 rule)."""
    return float(np.quantile(values, q))


def contamination(
    baseline: list[float], candidate: list[float], min_effect: float = DEFAULT_MIN_EFFECT
) -> Contamination | None:
    """Did the candidate's samples absorb host-side delay?

    Host-induced delay only adds time to a GPU-time sample (the device idles while the host catches up;
    it never runs the kernel faster), so contamination moves the upper part of the sample and leaves the
    lower quantiles where the kernel's own time is. A real slowdown of the kernel moves every quantile.
    With m = log(1 + min_effect), the candidate is contaminated when

        log(median_c / median_b) > m   and   log(p20_c / p20_b) < STAY_SHARE * m   and
        log(min_c / min_b) < STAY_SHARE * m

    (the median is slower past the minimum effect while the 20th percentile and the minimum moved by less
    than half of it). Both runs need at least 5 samples (a p20 of fewer is the minimum itself). Example
    (a fresh H200, RMSNorm+MatMul with its 1/rms pre-pass, bf16 16x8192): baseline median 52.2 us (p20 51.1), candidate
    samples 49.7-167.7 us, p20 51.3, median 70.8: +35.6% at the median, +0.4% at p20 -> contaminated.
    """
    base = np.asarray([v for v in baseline if v > 0], dtype=float)
    cand = np.asarray([v for v in candidate if v > 0], dtype=float)
    if len(base) < 5 or len(cand) < 5:
        return None
    m = math.log1p(min_effect)
    med = float(np.median(cand)) / float(np.median(base))
    p20_c, p20_b = quantile(cand, 0.2), quantile(base, 0.2)
    min_c, min_b = float(cand.min()), float(base.min())
    if math.log(med) > m and math.log(p20_c / p20_b) < STAY_SHARE * m and math.log(min_c / min_b) < STAY_SHARE * m:
        return Contamination(med, p20_c, p20_b, min_c, min_b)
    return None


def between_machine_sigma(groups: dict[str, list[float]]) -> float | None:
    """Random-effect standard deviation between GPUs of log(per-run median): one-way variance components.

    ``groups``: per-run medians per GPU. With group means mean_i of n_i logs, the pooled within-GPU
    variance s_w^2 (groups of two or more runs; 0 when none has two: the estimate is then an upper bound)
    and the variance of the group means v_b: sigma_m^2 = max(0, v_b - s_w^2 mean(1 / n_i)). None with fewer
    than two GPUs.
    """
    logs = [np.log(np.asarray([v for v in values if v and v > 0], dtype=float)) for values in groups.values()]
    logs = [g for g in logs if len(g)]
    if len(logs) < 2:
        return None
    means = np.array([g.mean() for g in logs])
    ns = np.array([len(g) for g in logs], dtype=float)
    multi = [g for g in logs if len(g) >= 2]
    sw2 = sum(float(((g - g.mean()) ** 2).sum()) for g in multi) / sum(len(g) - 1 for g in multi) if multi else 0.0
    return math.sqrt(max(0.0, float(means.var(ddof=1)) - sw2 * float(np.mean(1 / ns))))


def machine_sigma(groups: dict[str, list[float]], klass: str, model: Machine = DEFAULT) -> tuple[float, str]:
    """(sigma_m, its source) for a comparison across GPUs: the estimate from history on MIN_MACHINES or more
    GPUs, else the larger of the model's figure for the noise class ``klass`` (``model.sigma``) and whatever fewer
    GPUs estimate."""
    estimate = between_machine_sigma(groups)
    default = model.sigma[klass]
    if estimate is not None and len(groups) >= MIN_MACHINES:
        return estimate, f"estimated from {len(groups)} GPUs"
    if estimate is not None and estimate > default:
        return estimate, f"estimated from {len(groups)} GPUs"
    return default, f"default for {NOISE_LABELS[klass]} cases"


def between_machine_ratio(groups: dict[str, list[float]]) -> float | None:
    """The largest ratio between two GPUs' medians of one case's per-run times (``groups``: per GPU); None with
    fewer than two GPUs."""
    medians = [float(np.median(v)) for v in ([x for x in values if x and x > 0] for values in groups.values()) if v]
    return max(medians) / min(medians) if len(medians) >= 2 else None


def run_ratio(cases: list[dict[str, list[float]]], min_cases: int = RUN_SHIFT_MIN_CASES) -> float | None:
    """The largest whole-run difference between two GPUs: for every pair of GPUs sharing at least ``min_cases``
    of ``cases`` (each: per GPU, per-run times), exp |median over the shared cases of log(ratio of medians)|."""
    logs: dict[tuple[str, str], list[float]] = {}
    for groups in cases:
        medians = {g: float(np.median(v)) for g, v in groups.items() if len(v)}
        names = sorted(medians)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if medians[a] > 0 and medians[b] > 0:
                    logs.setdefault((a, b), []).append(math.log(medians[a] / medians[b]))
    shifts = [math.exp(abs(float(np.median(v)))) for v in logs.values() if len(v) >= min_cases]
    return max(shifts) if shifts else None


def machine_bound(estimate: float | None, klass: str, model: Machine = DEFAULT) -> tuple[float, str]:
    """(the bound on one case's machine shift, its source): the model's figure for the bound class ``klass``
    (``model.bound``), or the history's own larger ``estimate`` (:func:`between_machine_ratio` over its cases of
    that class)."""
    default = model.bound[klass]
    if estimate is not None and estimate > default:
        return estimate, f"the largest between-GPU ratio of a {NOISE_LABELS[klass]} case in the history"
    if model.measured:
        return (
            default,
            f"the largest measured between {model.short}s for {NOISE_LABELS[klass]} cases",
        )
    return default, f"the default for {NOISE_LABELS[klass]} cases ({model.source})"


@dataclass(frozen=True)
class Comparison:
    """One case, candidate against baseline. Plain numbers, for the gate, its reports and the dashboard.

    ``ratio`` = candidate median / baseline median (> 1 is slower); ``p_within``: one-sided Mann-Whitney U
    on the two runs' samples; ``p_between``: the same slowdown under the case's between-run noise
    (``sigma``, on the log scale, from ``basis`` = "history" or "floor"); ``p`` = max of the two;
    ``history``: runs of history used; ``launch_bound``: the outlier-run term applied, ``p_outlier`` its value;
    ``machine_sigma``: the between-machine term added to ``sigma`` (0 on one GPU); ``contaminated``: the
    samples' signature of absorbed host delay (:func:`contamination`), None when they show none.
    """

    case: str
    ratio: float
    p_within: float
    p_between: float
    p: float
    min_effect: float
    history: int
    sigma: float = 0.0
    basis: str = "floor"
    launch_bound: bool = False
    baseline_ms: float = 0.0
    candidate_ms: float = 0.0
    p_outlier: float = 0.0
    machine_sigma: float = 0.0
    contaminated: Contamination | None = None
    exceeded: int = 0  # runs of history deviating at least as much as this slowdown (the empirical p's k)

    @property
    def effect(self) -> float:
        return self.ratio - 1.0


def _log_deviations(history: list[float]) -> np.ndarray:
    """|log(m_i / median of its neighbours)| for a series of per-run medians, neighbours taken within the run's
    segment: a step the history already holds (:func:`change_points` at ``SEGMENT_ALPHA``) is a change, not
    noise. Measured across it, a real 33% speed-up of a softmax case three runs back made a real 21% slowdown
    of the same cases "within noise" (p = 0.18: the runs at the step deviated 40% from their neighbours)."""
    x = np.log(np.asarray(history, dtype=float))
    cuts = [0, *(c.index for c in change_points(history, alpha=SEGMENT_ALPHA)), len(x)]
    devs = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        seg = x[start:end]
        for i in range(len(seg)):
            lo, hi = max(0, i - 5), min(len(seg), i + 6)
            window = np.delete(seg[lo:hi], i - lo)
            if len(window):
                devs.append(abs(seg[i] - np.median(window)))
    return np.asarray(devs)


def segment_start(history: list[float]) -> int:
    """Where the history's last segment starts: the index of its last step (:func:`change_points` at
    ``SEGMENT_ALPHA``), 0 without one. Runs before it measured other code: GPUs compared across it differ by
    the step, not by the machine (that softmax case's 33% speed-up read as 21.9% between-GPU noise)."""
    found = change_points(history, alpha=SEGMENT_ALPHA) if len(history) >= 2 else []
    return found[-1].index if found else 0


def noise_floor(median_ms: float, factor: float = 1.0, model: Machine = DEFAULT) -> float:
    """Smallest believable between-run standard deviation of log(per-run median) for a case of this time:
    sqrt((J / t)^2 + r^2) with J = ``model.jitter_ms``, r = ``model.rel_noise``, both times ``factor``."""
    return factor * math.hypot(model.jitter_ms / median_ms, model.rel_noise)


def outlier_p(ratio: float) -> float:
    """P(one run of a launch-bound case is at least ``ratio`` times slower by being an outlier run):
    OUTLIER_RATE x P(F >= ratio), F log-uniform on OUTLIER_FACTORS."""
    lo, hi = (math.log(f) for f in OUTLIER_FACTORS)
    r = math.log(ratio) if ratio > 0 else -math.inf
    return OUTLIER_RATE * min(1.0, max(0.0, (hi - r) / (hi - lo)))


def compare_case(
    case: str,
    baseline: list[float],
    candidate: list[float],
    history: list[float] | None = None,
    min_effect: float = DEFAULT_MIN_EFFECT,
    heavy_tailed: bool = False,
    machine: float = 0.0,
    launch_bound: bool = False,
    model: Machine = DEFAULT,
) -> Comparison:
    """Evidence that ``candidate`` samples are slower than ``baseline`` samples (milliseconds).

    Within-run samples understate the difference between two runs: each run is one process with its
    own clocks, placement and launch overheads, and its samples share them. A run's samples can be
    tight (p_within = 1e-27) while whole runs of the same commit differ by 10% (launch-bound MSELoss on
    the H200). So the slowdown d = log(ratio) is also tested against the between-run noise:

    * with ``history`` (per-run medians of this case on this hardware, >= MIN_HISTORY runs): each run's
      deviation from the median of its neighbours; when deviations as large as d occurred, their
      frequency (1 + k) / (n + 1) is the p-value (heavy tails are taken as they were measured), else a
      normal tail with sigma = max(1.4826 MAD of the deviations, noise_floor(t));
    * with less history: a normal tail with sigma = noise_floor(t, PRIOR_FACTOR), the measured floor
      doubled; the within-run p-value is never used alone;
    * ``launch_bound`` cases (the case's facts: kernelwatch.kernels.names.launch_bound) also get ``outlier_p``:
      one run cannot be told from the 2-6x outlier runs these cases have, so whatever the samples say, p >= 0.1 up to 2x
      and falls to 0 at 6x. A sustained smaller step on such a case shows as a change point in its
      history (``change_points``, ``kernelwatch bisect``), where many runs give the evidence one cannot.
      ``heavy_tailed`` applies the same to any case: host wall time per call has such runs at every size
      (one of 14 repeated H200 runs of one commit paid 1.6-2x more per call on six cases, its GPU times
      unchanged: ``ci/history/*73812d88*repeat14*``).

    * ``machine`` (sigma_m > 0: candidate and baseline ran on different physical GPUs, see
      :func:`machine_sigma`): the history above is one machine's, so p_between is also at least the normal
      tail of d under sqrt(sigma^2 + sigma_m^2).

    p = max(p_within, p_between): both must hold. The gate then applies FDR control across cases and
    the minimum effect on ``ratio``. ``contaminated`` is :func:`contamination` of the two sample sets
    (unless ``heavy_tailed``: wall time per call includes the host by definition).
    """
    base = np.asarray([v for v in baseline if v > 0], dtype=float)
    cand = np.asarray([v for v in candidate if v > 0], dtype=float)
    if len(base) == 0 or len(cand) == 0:
        raise ValueError(f"{case}: no timing samples to compare")
    t_base, t_cand = float(np.median(base)), float(np.median(cand))
    ratio = t_cand / t_base
    if len(base) >= 3 and len(cand) >= 3 and not (np.all(base == base[0]) and np.all(cand == cand[0])):
        p_within = float(stats.mannwhitneyu(cand, base, alternative="greater").pvalue)
    else:
        p_within = 0.0 if ratio > 1 + min_effect else 1.0
    d = math.log(ratio)
    hist = [h for h in (history or []) if h and h > 0]
    if len(hist) >= MIN_HISTORY:
        devs = _log_deviations(hist)
        sigma = max(1.4826 * float(np.median(devs)), noise_floor(t_base, model=model))
        exceed = int(np.sum(devs >= d))
        p_between = (1 + exceed) / (len(devs) + 1) if exceed else float(stats.norm.sf(d / sigma))
        basis = "history"
    else:
        exceed = 0
        sigma = noise_floor(t_base, PRIOR_FACTOR, model)
        p_between = float(stats.norm.sf(d / sigma))
        basis = "floor"
    if machine > 0:
        p_between = max(p_between, float(stats.norm.sf(d / math.hypot(sigma, machine))))
    launch_bound = heavy_tailed or launch_bound
    p_out = outlier_p(ratio) if launch_bound else 0.0
    p_between = max(p_between, p_out)
    dirty = None if heavy_tailed else contamination(list(base), list(cand), min_effect)
    return Comparison(
        case,
        ratio,
        p_within,
        p_between,
        max(p_within, p_between),
        min_effect,
        len(hist),
        sigma,
        basis,
        launch_bound,
        t_base,
        t_cand,
        p_out,
        machine,
        dirty,
        exceed,
    )


def benjamini_hochberg(pvalues: list[float], q: float = DEFAULT_FDR) -> list[bool]:
    """Which hypotheses to reject so that the expected share of false discoveries is <= q
    (Benjamini-Hochberg step-up: adjusted p_(i) = min_{j>=i} p_(j) m / j <= q)."""
    if not len(pvalues):
        return []
    adjusted = stats.false_discovery_control(np.asarray(pvalues, dtype=float), method="bh")
    return [bool(a <= q) for a in adjusted]


def regressions(comparisons: list[Comparison], q: float = DEFAULT_FDR, tested: int | None = None) -> list[Comparison]:
    """Comparisons past their minimum effect whose evidence survives FDR control over ``tested`` hypotheses
    (default: these comparisons; more when others were tested and not compared here: each counts as p = 1)."""
    extra = max(0, (tested or 0) - len(comparisons))
    rejected = benjamini_hochberg([c.p for c in comparisons] + [1.0] * extra, q)
    return [c for c, r in zip(comparisons, rejected) if r and c.effect > c.min_effect]


@dataclass(frozen=True)
class Shift:
    """A run-wide shift: ``slower`` of ``n`` compared cases past their minimum effect, the median ratio, and
    a one-sided sign test's p-value (P(at least ``slower`` of ``n`` under no shift, each side 1/2))."""

    n: int
    slower: int
    ratio: float
    p: float


def run_shift(comparisons: list[Comparison]) -> Shift | None:
    """The run-wide shift when at least RUN_SHIFT_SHARE of (at least RUN_SHIFT_MIN_CASES) compared cases are
    slower past their minimum effect, else None.

    One case's between-run noise can explain one case's slowdown; it cannot explain every case moving the
    same way at once: runs of one commit scatter each case independently around its median. So a uniform
    slowdown is judged as one: the gate then asks whether the same-run references moved with it (the
    machine) or not (the kernels).
    """
    n = len(comparisons)
    slower = sum(c.effect > c.min_effect for c in comparisons)
    if n < RUN_SHIFT_MIN_CASES or slower < RUN_SHIFT_SHARE * n:
        return None
    ratio = float(np.exp(np.median([math.log(c.ratio) for c in comparisons])))
    return Shift(n, slower, ratio, float(stats.binom.sf(slower - 1, n, 0.5)))


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point after the change
    before: float  # median of the segment before (same unit as the series)
    after: float
    pvalue: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1.0


def _clip_outliers(x: np.ndarray, width: float = 4.0, half: int = 3) -> np.ndarray:
    """Pull each point back to within ``width`` robust sigmas of the median of its neighbours (a window
    of 2 * half + 1 points), sigma = 1.4826 MAD of those deviations. Measured against its neighbours, a
    2-6x outlier run stands out even next to a step (a global median and MAD, as first used, are
    pulled by the step itself and left 4-6x runs large enough to decide where a segment split)."""
    n = len(x)
    local = np.array([np.median(x[max(0, i - half) : i + half + 1]) for i in range(n)])
    sigma = 1.4826 * float(np.median(np.abs(x - local))) or 1e-12
    return np.clip(x, local - width * sigma, local + width * sigma)


def change_points(
    values: list[float], min_effect: float = DEFAULT_MIN_EFFECT, alpha: float = 0.001, min_segment: int = 3
) -> list[ChangePoint]:
    """Steps in a series of per-run medians (positive numbers), in order of position.

    Binary segmentation on log(median): in a segment, outliers are clipped against their neighbours
    (:func:`_clip_outliers`), the split k maximising the size-weighted squared difference of the two
    sides' means, k (n - k) / n (mean_left - mean_right)^2 (the mean-shift form of the divergence
    E-divisive maximises, as Apache Otava does), is tested with a two-sided Mann-Whitney U on the
    unclipped values; a split with p < ``alpha`` and a step of at least ``min_effect`` is kept and both
    sides are searched again. Evaluated on real H200 run-to-run noise by benchmarks/detector_eval.py.
    """
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


def method_starts(timings: Sequence[str | None]) -> list[int]:
    """The index of the first run of each stretch of a history timed one way (the same
    :func:`kernelwatch.kernels.names.calls_per_sample`), 0 first: where a number's meaning changed."""
    method = [calls_per_sample(t) for t in timings]
    return [0] + [i for i in range(1, len(method)) if method[i] != method[i - 1]]


def change_points_within(
    values: list[float], timings: Sequence[str | None], min_effect: float = DEFAULT_MIN_EFFECT
) -> list[ChangePoint]:
    """:func:`change_points` of each stretch timed one way (:func:`method_starts`), indexes into ``values``: a
    change of timing method is never reported as a step."""
    starts = method_starts(timings)
    found = []
    for lo, hi in zip(starts, [*starts[1:], len(values)]):
        found += [replace(p, index=lo + p.index) for p in change_points(values[lo:hi], min_effect=min_effect)]
    return found


def effect_interval(
    baseline: list[float], candidate: list[float], sigma: float = 0.0, level: float = 0.95, most: int = 400
) -> tuple[float, float] | None:
    """A ``level`` confidence interval of the effect (candidate / baseline time - 1) of one case.

    Within the runs, the Hodges-Lehmann interval of the shift of log(time): the order statistics of the
    pairwise differences log(c_i) - log(b_j) at the Mann-Whitney ranks n m / 2 -+ z sqrt(n m (n + m + 1) / 12)
    (Hollander & Wolfe, Nonparametric Statistical Methods, 4.3). Between the runs, ``sigma`` (the case's
    between-run noise on the log scale, ``Comparison.sigma`` and its machine term, the sd behind ``p_between``)
    widens each side: half-width sqrt(within^2 + (z sigma)^2), centred on the log ratio of the medians (the
    gate's effect). Samples over ``most`` per side are thinned to ``most`` evenly spaced order statistics.
    None without three positive samples a side.
    """
    b = np.sort(np.log(np.asarray([v for v in baseline if v > 0], dtype=float)))
    c = np.sort(np.log(np.asarray([v for v in candidate if v > 0], dtype=float)))
    if len(b) < 3 or len(c) < 3:
        return None
    b, c = (x[np.linspace(0, len(x) - 1, most).round().astype(int)] if len(x) > most else x for x in (b, c))
    n, m = len(c), len(b)
    diffs = np.sort((c[:, None] - b[None, :]).ravel())
    z = float(stats.norm.ppf(0.5 + level / 2))
    k = max(0, int(math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))))
    lo, hi = float(diffs[k]), float(diffs[len(diffs) - 1 - k])
    d = float(np.median(c) - np.median(b))
    down, up = max(d - lo, 0.0), max(hi - d, 0.0)
    return (math.expm1(d - math.hypot(down, z * sigma)), math.expm1(d + math.hypot(up, z * sigma)))
