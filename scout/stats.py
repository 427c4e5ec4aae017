"""The paper's statistics: aggregates over training runs and one-sided tests against the baseline.

Notation as in the paper's appendix: for a method m, benchmark b and run r, ``y`` is the run's mean
accuracy over evaluation repeats and ``e`` its SEM. Aggregates are the mean and sample SD (ddof=1)
over runs. The Avg column is the macro-average over benchmarks *within* each run, aggregated after.

Two per-benchmark tests, both one-sided (H1: method > baseline):
- ``welch``: Welch's t-test on the run-level means, Welch-Satterthwaite df (the Avg test too);
- ``random_effects``: a normal test whose variance separates between-run spread from evaluation
  noise, as written in the appendix.
The paper's printed per-run p-values agree with ``welch``; ``random_effects`` is kept because it is
what the appendix text describes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

TESTS = ("welch", "random_effects")
POWER = 0.8  # the power at which a test's detectable effect is given
BOOTSTRAP = 2000  # resamples of a cluster bootstrap


@dataclass(frozen=True)
class Aggregate:
    mean: float
    sd: float  # sample SD over runs; NaN with fewer than two runs
    n: int  # runs used


def aggregate(values: Sequence[float]) -> Aggregate:
    """Mean and sample SD over the runs that exist (NaNs are missing runs, left out)."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if v.size == 0:
        return Aggregate(math.nan, math.nan, 0)
    sd = float(v.std(ddof=1)) if v.size > 1 else math.nan
    return Aggregate(float(v.mean()), sd, int(v.size))


@dataclass(frozen=True)
class Welch:
    t: float
    df: float
    p: float


def avg_sem(sems: Sequence[float]) -> float:
    """A run's evaluation standard error of its Avg (the macro-average over benchmarks): the
    benchmarks' SEMs in quadrature over their number, as their samples are independent. NaN when
    any benchmark's is (the run's average is then incomplete too)."""
    v = np.asarray(sems, dtype=float)
    return float(np.sqrt(np.sum(v**2)) / v.size) if v.size and not np.isnan(v).any() else math.nan


def welch_se(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """mean(x) - mean(y), its Welch standard error and Welch-Satterthwaite df; NaN when either side
    has fewer than two runs, (difference, 0, inf) when both sides are constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0:
        return diff, 0.0, math.inf
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return diff, math.sqrt(vx + vy), float(df)


def welch_test(x: Sequence[float], y: Sequence[float]) -> Welch:
    """One-sided Welch t-test of mean(x) > mean(y); NaN when either side has fewer than two runs."""
    diff, se, df = welch_se(x, y)
    if math.isnan(diff):
        return Welch(math.nan, math.nan, math.nan)
    if se == 0:  # identical runs on both sides: the test degenerates to the sign of the difference
        p = math.nan if diff == 0 else (0.0 if diff > 0 else 1.0)
        return Welch(math.copysign(math.inf, diff) if diff else math.nan, math.nan, p)
    t = diff / se
    return Welch(float(t), float(df), float(stats.t.sf(t, df)))


def random_effects_variance(y: Sequence[float], e: Sequence[float]) -> float:
    """V = tau^2/R + sum(e^2)/R^2 with tau^2 = max(0, s^2 - mean(e^2)); NaN for fewer than two runs."""
    y, e = np.asarray(y, dtype=float), np.asarray(e, dtype=float)
    r = y.size
    if r < 2:
        return math.nan
    tau2 = max(0.0, float(y.var(ddof=1)) - float(np.mean(e**2)))
    return tau2 / r + float(np.sum(e**2)) / r**2


def random_effects_test(y: Sequence[float], e: Sequence[float], y0: Sequence[float], e0: Sequence[float]) -> float:
    """One-sided p = 1 - Phi(z), z = (mean(y) - mean(y0)) / sqrt(V + V0)."""
    v = random_effects_variance(y, e) + random_effects_variance(y0, e0)
    diff = float(np.mean(y)) - float(np.mean(y0)) if len(y) and len(y0) else math.nan
    if math.isnan(v) or math.isnan(diff):
        return math.nan
    if v == 0:
        return math.nan if diff == 0 else (0.0 if diff > 0 else 1.0)
    return float(stats.norm.sf(diff / math.sqrt(v)))


def p_value(test: str, y: Sequence[float], e: Sequence[float], y0: Sequence[float], e0: Sequence[float]) -> float:
    """The configured per-benchmark test of method runs (y, e) against baseline runs (y0, e0)."""
    if test == "welch":
        return welch_test(y, y0).p
    if test == "random_effects":
        return random_effects_test(y, e, y0, e0)
    raise ValueError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}")


def significant(p: float, mean: float, baseline_mean: float, alpha: float = 0.1) -> bool:
    """The highlight rule: p below alpha *and* a higher mean than the baseline."""
    return not math.isnan(p) and p < alpha and mean > baseline_mean


def best_two(values: dict[str, float], decimals: int) -> tuple[set[str], set[str]]:
    """Keys holding the best and the second-best value as printed (ties share a rank, NaNs skipped).

    Ranking the printed numbers, not the raw ones, is what the paper does: two methods that both
    print 35.8 are both bold."""
    shown = {k: float(f"{v:.{decimals}f}") for k, v in values.items() if v is not None and not math.isnan(v)}
    ranks = sorted(set(shown.values()), reverse=True)
    best = {k for k, v in shown.items() if ranks and v == ranks[0]}
    second = {k for k, v in shown.items() if len(ranks) > 1 and v == ranks[1]}
    return best, second


# ------------------------------------------------------------------------------------------------
# The claims page's tests: bounds, power and the paired, one-evaluation and bootstrap designs
# ------------------------------------------------------------------------------------------------


def against_one_evaluation(x, value: float, sem: float) -> tuple[float, float, float]:
    """mean(x) - value for runs x against one evaluation (no seeds) with its standard error: a t
    over the runs (n - 1 df) with the evaluation's variance added."""
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - value)
    se = math.sqrt(x.var(ddof=1) / x.size + (sem if not math.isnan(sem) else 0.0) ** 2)
    return diff, se, float(x.size - 1)


def bounds(effect: float, se: float, df: float, level: float) -> tuple[float, float]:
    """One-sided (1 - level) lower and upper bounds: effect -/+ the t (or normal) quantile x se."""
    if se == 0:
        return effect, effect
    q = float(stats.t.ppf(1 - level, df))
    return effect - q * se, effect + q * se


def detectable(se: float, df: float, level: float, power: float = POWER) -> float:
    """The smallest effect a one-sided test at ``level`` finds with probability ``power``."""
    return float(stats.t.ppf(1 - level, df) + stats.t.ppf(power, df)) * se


def one_sided_p(effect: float, se: float, df: float) -> float:
    """One-sided p of an effect above 0."""
    if se == 0:
        return 0.0 if effect > 0 else 1.0
    return float(stats.t.sf(effect / se, df))


def cluster_bootstrap(statistic, clusters: list, groups: dict | None = None, seed: int = 0) -> tuple[float, float]:
    """``statistic(questions, seeds)`` and its bootstrap standard error, resampling the questions
    (clusters) and, per group in ``groups`` ({name: seeds}), the seeds with replacement. The
    statistic is a mean over many questions, so its bounds are taken as normal around it."""
    rng = np.random.default_rng(seed)
    clusters = list(clusters)
    groups = groups or {}
    point = statistic(clusters, {g: list(s) for g, s in groups.items()})
    draws = []
    for _ in range(BOOTSTRAP):
        q = [clusters[i] for i in rng.integers(0, len(clusters), len(clusters))]
        s = {g: [seeds[i] for i in rng.integers(0, len(seeds), len(seeds))] for g, seeds in groups.items()}
        value = statistic(q, s)
        if not math.isnan(value):
            draws.append(value)
    if len(draws) < 2:
        return point, math.nan
    return point, float(np.std(draws, ddof=1))


def paired(x, y) -> tuple[float, float, float]:
    """mean(x - y) over pairs, its standard error sd(x - y) / sqrt(n) and n - 1 df; NaN below two
    pairs, (difference, 0, inf) when every pair differs by the same amount."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if d.size < 2:
        return math.nan, math.nan, math.nan
    sd = float(d.std(ddof=1))
    if sd == 0:
        return float(d.mean()), 0.0, math.inf
    return float(d.mean()), sd / math.sqrt(d.size), float(d.size - 1)
