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
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import statsmodels.stats.power as smp
from rliable import metrics as rly_metrics
from scipy import optimize, stats
from statsmodels.stats.multitest import multipletests

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
    """V = tau^2/R + sum(e^2)/R^2 with tau^2 = max(0, s^2 - mean(e^2)); NaN for fewer than two runs
    or a run whose evaluation error is unknown (taken as 0 it would shrink V)."""
    y, e = np.asarray(y, dtype=float), np.asarray(e, dtype=float)
    r = y.size
    if r < 2 or np.isnan(e).any():
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
# The claims page's tests: intervals, power, equivalence, corrections, seeds and questions, and
# the across-settings view
# ------------------------------------------------------------------------------------------------
#
# Libraries where one does the job: scipy for the t and normal quantiles, the tests themselves and
# the bootstrap; statsmodels for the noncentral-t power of one-sided t tests, the seeds a design
# needs and the family's adjusted p-values; rliable for the probability of improvement. Written
# here, and tested against a library and by hand, only what none of them offers for this design:
#
# - the power of a two one-sided tests (TOST) equivalence test at a row's own standard error and
#   df: statsmodels has TOST itself (``ttost_paired``, ``ttost_ind``) but no power for it, so it is
#   assembled from statsmodels' one-sided powers (the usual approximation, a lower bound);
# - a statistic per trained teacher tested over those teachers with the question sampling that they
#   share added (a two-level design no library's t test takes);
# - the stratified bootstrap of the probability of improvement: ``rliable.library`` draws it with
#   ``arch``'s bootstrap, but arch's releases that rliable accepts (< 8) fail to import beside
#   pandas 3, and arch 8 no longer takes the ``random_state`` rliable passes. ``scipy.stats.bootstrap``
#   resamples each (arm, setting) sample on its own, which is rliable's stratified independent
#   bootstrap; the metric itself is rliable's.


def against_one_evaluation(x, value: float, sem: float) -> tuple[float, float, float]:
    """mean(x) - value for runs x against one evaluation (no seeds) with its standard error: a t
    over the runs (n - 1 df) with the evaluation's variance added. NaN when the evaluation's error
    was not measured: a test that left it out would count only the runs' spread."""
    x = np.asarray(x, dtype=float)
    if x.size < 2 or math.isnan(sem):
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - value)
    return diff, math.sqrt(x.var(ddof=1) / x.size + sem**2), float(x.size - 1)


def bounds(effect: float, se: float, df: float, level: float) -> tuple[float, float]:
    """The two-sided (1 - 2 level) interval: effect -/+ the t (or normal) quantile at 1 - level
    times se, so that each end is a one-sided bound at ``level``."""
    if se == 0:
        return effect, effect
    q = float(stats.t.ppf(1 - level, df))
    return effect - q * se, effect + q * se


def one_sided_p(effect: float, se: float, df: float) -> float:
    """One-sided p of an effect above 0."""
    if se == 0:
        return 0.0 if effect > 0 else 1.0
    return float(stats.t.sf(effect / se, df))


def t_power(shift: float, df: float, level: float) -> float:
    """Power of a one-sided t test at ``level`` when the truth lies ``shift`` standard errors above
    the null: the noncentral t's tail (statsmodels), the normal's at infinite df."""
    if math.isinf(df):
        return float(smp.normal_power(shift, 1, level, alternative="larger"))
    return float(smp.ttest_power(shift, 1, level, df=df, alternative="larger"))


def _solve(fn, target: float) -> float:
    """The x >= 0 where the increasing ``fn`` reaches ``target`` (in standard errors)."""
    hi = 1.0
    while fn(hi) < target:
        hi *= 2
    return float(optimize.brentq(lambda x: fn(x) - target, 0.0, hi, xtol=1e-10))


def detectable(se: float, df: float, level: float, power: float = POWER) -> float:
    """The smallest true effect a one-sided t test at ``level`` finds with probability ``power``,
    from the noncentral t at the row's df (the central-t sum t(1 - L) + t(power) understates it at
    few df: by 16% at 2 df and L = 0.1/23)."""
    if math.isnan(se) or math.isnan(df):
        return math.nan
    if se == 0:
        return 0.0
    return _solve(lambda k: t_power(k, df, level), power) * se


def tost_p(effect: float, se: float, df: float, margin: float) -> float:
    """p of the two one-sided tests that the truth lies within (-margin, margin): the larger of
    the two one-sided p-values (scipy's t; equal to statsmodels' ttost_paired and ttost_ind)."""
    if se == 0:
        return 0.0 if abs(effect) < margin else 1.0
    return float(max(stats.t.sf((effect + margin) / se, df), stats.t.cdf((effect - margin) / se, df)))


def equivalence_power(margin: float, se: float, df: float, level: float, truth: float = 0.0) -> float:
    """Power of TOST at ``level`` to show equivalence within ``margin`` when the truth is ``truth``:
    P(both one-sided tests reject) >= P(one) + P(other) - 1, each statsmodels' noncentral-t power."""
    if se == 0:
        return 1.0 if abs(truth) < margin else 0.0
    both = t_power((margin + truth) / se, df, level) + t_power((margin - truth) / se, df, level) - 1
    return max(0.0, float(both))


def equivalence_detectable(se: float, df: float, level: float, power: float = POWER) -> float:
    """The narrowest margin TOST at ``level`` shows with probability ``power`` when the two arms
    are equal: an on-a-par row's counterpart of the detectable effect."""
    if math.isnan(se) or math.isnan(df):
        return math.nan
    if se == 0:
        return 0.0
    return _solve(lambda m: equivalence_power(m, 1.0, df, level), power) * se


def seeds_needed(effect: float, sd: float, level: float, power: float = POWER, paired: bool = True,
                 most: int = 1000, floor: float = 0.0) -> float:  # fmt: skip
    """Seeds (pairs, or runs per arm for two independent arms) that a one-sided t test at ``level``
    needs to find ``effect`` with ``power`` at a spread ``sd`` (of the pairs' differences, or of
    each arm's runs): the fewest for which statsmodels' TTestPower (TTestIndPower) gives that power.
    ``floor``: a standard error that more seeds do not shrink (one evaluation's, against which the
    runs are compared), so that se(n)^2 = sd^2 / n + floor^2. NaN for no effect or no spread, or
    beyond ``most`` (always, where the floor alone leaves too little power)."""
    if not effect or effect <= 0 or not sd or math.isnan(sd) or math.isnan(effect):
        return math.nan
    size = effect / sd
    if floor > 0:
        if t_power(effect / floor, math.inf, level) < power:  # not even infinitely many seeds
            return math.nan

        def power_at(n):
            return t_power(effect / math.sqrt(sd**2 / n + floor**2), n - 1, level)
    elif paired:
        def power_at(n):
            return smp.TTestPower().power(size, nobs=n, alpha=level, alternative="larger")
    else:
        def power_at(n):
            return smp.TTestIndPower().power(size, nobs1=n, alpha=level, ratio=1.0, alternative="larger")
    lo, hi = 2, 2
    while power_at(hi) < power:
        if hi >= most:
            return math.nan
        lo, hi = hi, min(2 * hi, most)
    while lo < hi:  # the fewest seeds with enough power (power grows with them)
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if power_at(mid) < power else (lo, mid)
    return float(hi)


def adjusted(pvalues: Sequence[float], method: str = "bonferroni") -> list[float]:
    """The family's adjusted p-values (statsmodels' multipletests); NaN rows stay NaN and do not
    count among the tests."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return out.tolist()


@dataclass(frozen=True)
class Bootstrapped:
    effect: float
    se: float
    df: float
    failed: int = 0  # draws whose statistic was undefined (left out, and counted)
    draws: int = BOOTSTRAP
    parts: tuple = ()  # over_seeds: ((an arm's variance of its mean over seeds, its seeds), ...)
    shared: float = math.nan  # over_seeds: the variance the seeds share through the questions


def cluster_bootstrap(statistic, clusters: Sequence, seed: int = 0) -> Bootstrapped:
    """``statistic(clusters)`` and its bootstrap standard error, resampling the clusters (the
    questions) with replacement; t with (clusters - 1) df, as for a cluster-robust error."""
    rng = np.random.default_rng(seed)
    clusters = list(clusters)
    point = statistic(clusters)
    draws = [statistic([clusters[i] for i in rng.integers(0, len(clusters), len(clusters))]) for _ in range(BOOTSTRAP)]
    kept = [d for d in draws if not math.isnan(d)]
    se = float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan
    return Bootstrapped(point, se, float(len(clusters) - 1), BOOTSTRAP - len(kept))


def over_seeds(arms: dict, questions: Sequence, sign: dict | None = None, seed: int = 0) -> Bootstrapped:
    """A probe's statistic per trained teacher, tested over the teachers (the seeds): ``arms`` maps
    an arm to ``{seed: statistic(questions)}``, the effect is the signed sum of the arms' means over
    their seeds (``sign``: +1 or -1 per arm, +1 by default).

    Its variance has two parts. Between the seeds, each arm's sample variance over its seeds over
    their number (each seed's own question sampling is inside it). The questions, which every seed
    shares: a bootstrap over questions gives each seed's statistic's draws, and the covariance of
    two different seeds' draws is the variance they share; the mean covariance within each arm,
    and across the arms with their signs, is the shared part's variance (the diagonal would count
    each seed's own sampling a second time). The df are the seeds': n - 1 for one arm, Welch's
    across two. Counting the questions' df in as well (Welch-Satterthwaite over all three parts)
    let a 'holds' be wrong 1.3 to 3 times as often as its level in simulation, because the seeds'
    part is estimated from so few (benchmarks/probe_calibration.py). Fewer than two seeds on an
    arm: NaN."""
    sign = {a: (sign or {}).get(a, 1) for a in arms}
    names = list(arms)
    if any(len(arms[a]) < 2 for a in names):
        return Bootstrapped(math.nan, math.nan, math.nan, 0, 0)
    columns = [(a, s) for a in names for s in sorted(arms[a])]
    values = {a: np.array([arms[a][s](list(questions)) for s in sorted(arms[a])]) for a in names}
    effect = float(sum(sign[a] * values[a].mean() for a in names))
    seed_parts = {a: float(values[a].var(ddof=1)) / len(values[a]) for a in names}
    rng = np.random.default_rng(seed)
    questions = list(questions)
    draws = np.array([[arms[a][s]([questions[i] for i in idx]) for a, s in columns]
                      for idx in (rng.integers(0, len(questions), len(questions)) for _ in range(BOOTSTRAP))])  # fmt: skip
    kept = draws[~np.isnan(draws).any(axis=1)]
    failed = BOOTSTRAP - len(kept)
    if len(kept) < 2:
        return Bootstrapped(effect, math.nan, math.nan, failed)
    cov = np.cov(kept, rowvar=False)
    arm = np.array([names.index(a) for a, _ in columns])

    def mean_cov(i: int, j: int) -> float:
        block = cov[np.ix_(arm == i, arm == j)]
        return float((block.sum() - np.trace(block)) / (block.size - len(block))) if i == j else float(block.mean())

    shared = sum(sign[names[i]] * sign[names[j]] * mean_cov(i, j) for i in range(len(names)) for j in range(len(names)))
    shared = max(0.0, shared)
    seeds_var = sum(seed_parts.values())
    se = math.sqrt(seeds_var + shared)
    denom = sum(v**2 / (len(values[a]) - 1) for a, v in seed_parts.items())
    df = seeds_var**2 / denom if denom > 0 else float(sum(len(v) - 1 for v in values.values()))
    parts = tuple((seed_parts[a], len(values[a])) for a in names)
    return Bootstrapped(effect, se, float(df), failed, BOOTSTRAP, parts, shared)


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


@dataclass(frozen=True)
class Improvement:
    """The probability that a run of one arm beats a run of the other on the same task, averaged
    over tasks, with its stratified-bootstrap interval (Agarwal et al., NeurIPS 2021)."""

    point: float
    low: float
    high: float
    tasks: dict  # task -> its own probability of improvement
    runs: dict  # task -> (runs of x, runs of y)
    level: float = 0.95


def _improvement(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    """rliable's probability of improvement over tasks, vectorised over bootstrap draws: per task
    P(X > Y) + P(X = Y) / 2 (the Mann-Whitney U over n m); the first half of ``samples`` are x's
    tasks, the second half y's."""
    half = len(samples) // 2
    per_task = []
    for x, y in zip(samples[:half], samples[half:], strict=True):
        x, y = np.moveaxis(x, axis, -1)[..., :, None], np.moveaxis(y, axis, -1)[..., None, :]
        per_task.append(((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1)))
    return np.mean(per_task, axis=0)


def probability_of_improvement(x: dict, y: dict, level: float = 0.95, reps: int = BOOTSTRAP,
                               seed: int = 0) -> Improvement:  # fmt: skip
    """P(X > Y) over the tasks (settings) both ``x`` and ``y`` have runs on ({task: scores}), with
    the stratified bootstrap's percentile interval at ``level``: each arm's runs on each task are
    resampled on their own (scipy.stats.bootstrap over the 2 T samples). The point estimate is
    rliable's own ``metrics.probability_of_improvement``, task by task."""
    tasks = [t for t in x if t in y and len(x[t]) and len(y[t])]
    if not tasks:
        return Improvement(math.nan, math.nan, math.nan, {}, {}, level)
    xs = [np.asarray(x[t], dtype=float) for t in tasks]
    ys = [np.asarray(y[t], dtype=float) for t in tasks]
    per_task = {t: float(rly_metrics.probability_of_improvement(a[:, None], b[:, None]))
                for t, a, b in zip(tasks, xs, ys, strict=True)}  # fmt: skip
    point = float(np.mean(list(per_task.values())))
    samples = xs + ys
    varying = [i for i, a in enumerate(samples) if len(a) >= 2]
    if not varying:
        low = high = math.nan
    else:
        # a single run resamples to itself: held fixed, as scipy resamples only samples of two or more
        def statistic(*drawn: np.ndarray, axis: int = -1) -> np.ndarray:
            given = dict(zip(varying, drawn, strict=True))
            return _improvement(*(given.get(i, a) for i, a in enumerate(samples)), axis=axis)

        with warnings.catch_warnings():  # a degenerate distribution (every draw alike) is its own interval
            warnings.simplefilter("ignore")
            r = stats.bootstrap(tuple(samples[i] for i in varying), statistic, n_resamples=reps, vectorized=True,
                                axis=-1, method="percentile", confidence_level=level,
                                rng=np.random.default_rng(seed))  # fmt: skip
        low, high = float(r.confidence_interval.low), float(r.confidence_interval.high)
        if math.isnan(low):  # scipy gives NaN where every draw is the same
            low = high = point
    runs = {t: (a.tolist(), b.tolist()) for t, a, b in zip(tasks, xs, ys, strict=True)}
    return Improvement(point, low, high, per_task, runs, level)
