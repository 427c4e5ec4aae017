"""How often a trained-teacher probe row's bound is wrong: the claims page's test over trained
teachers (``scout.stats.over_seeds``, t with the seeds' df) against the question-and-seed bootstrap
it replaced (the normal quantile) and against the same standard error with Welch-Satterthwaite's
df over the seeds' and the questions' parts, on simulated probes whose truth is known (figures,
not a timed test; docs/report.md).

A probe like ``teacher_improves``: q questions, each with its own difficulty; the initial teacher
and n trained teachers (seeds) each continue every question's prefixes ``trials`` times. A trained
teacher's accuracy on a question is the initial one's plus the true gain, plus its seed's own shift
(SD ``seed_sd`` points: how differently seeds train) and a small question-by-seed wobble. With the
true gain 0, the share of draws whose lower bound at level L lies above 0 is the real error of a
"holds" at a nominal L. Two regimes: the seeds agree (the questions' sampling dominates) and they
spread (the seeds' dominates, where three trained teachers are few).

    python -m benchmarks.probe_calibration [--reps 2000] [--draws 200]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats as sps

from scout import stats

LEVELS = (0.1 / 3, 0.1 / 23)


def simulate(rng, questions: int, seeds: int, trials: int, seed_sd: float, wobble: float = 0.02):
    """Right continuations per question: the initial teacher's, and each trained seed's."""
    p0 = rng.beta(4, 2, questions)
    initial = rng.binomial(trials, p0)
    shift = rng.normal(0, seed_sd / 100, seeds)
    p = np.clip(p0[None, :] + shift[:, None] + rng.normal(0, wobble, (seeds, questions)), 0, 1)
    return initial, rng.binomial(trials, p)


def new_tests(initial, trained, trials: int):
    """The page's test (the seeds' df), and the same standard error with Welch-Satterthwaite's df
    over the seeds' and the questions' parts (the alternative it was chosen over)."""

    def per_seed(s):
        return lambda q: 100 * (trained[s][q].sum() - initial[q].sum()) / (trials * len(q))

    q = np.arange(len(initial))
    b = stats.over_seeds({"scout": {s: per_seed(s) for s in range(len(trained))}}, q)
    total = sum(v for v, _ in b.parts) + b.shared
    denom = sum(v**2 / (n - 1) for v, n in b.parts) + b.shared**2 / (len(q) - 1)
    return {"seeds' df": (b.effect, b.se, b.df), "Satterthwaite": (b.effect, b.se, total**2 / denom)}


def old_test(initial, trained, trials: int, draws: int, rng):
    """The replaced test: questions and seeds resampled together, the normal quantile."""
    q, n = len(initial), len(trained)
    point = 100 * (trained.mean(axis=0).sum() - initial.sum()) / (trials * q)
    out = []
    for _ in range(draws):
        qi, si = rng.integers(0, q, q), rng.integers(0, n, n)
        out.append(100 * (trained[si][:, qi].mean(axis=0).sum() - initial[qi].sum()) / (trials * q))
    return point, float(np.std(out, ddof=1)), math.inf


def error_rates(reps: int, draws: int, seed_sd: float, questions: int = 128, seeds: int = 3, trials: int = 20):
    rng = np.random.default_rng(0)
    stats.BOOTSTRAP = draws
    wrong = {(name, L): 0 for name in TESTS for L in LEVELS}
    dfs = {name: [] for name in TESTS}
    for _ in range(reps):
        initial, trained = simulate(rng, questions, seeds, trials, seed_sd)
        found = new_tests(initial, trained, trials) | {"old": old_test(initial, trained, trials, draws, rng)}
        for name, (effect, se, df) in found.items():
            for L in LEVELS:
                wrong[(name, L)] += effect - float(sps.t.ppf(1 - L, df)) * se > 0
            dfs[name].append(df)
    return {k: v / reps for k, v in wrong.items()}, {k: float(np.median(v)) for k, v in dfs.items()}


TESTS = ("old", "Satterthwaite", "seeds' df")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--draws", type=int, default=200, help="bootstrap draws per test (the page uses 2000)")
    args = ap.parse_args()
    print(f"real error of a 'holds' at a true gain of 0, {args.reps} simulated probes (128 questions, 3 seeds):")
    print(f"{'seeds spread (SD)':>18}  {'test':>13}  " + "  ".join(f"nominal {L:.4f}" for L in LEVELS) + "  median df")
    for sd in (0.0, 3.0):
        t0 = time.perf_counter()
        rates, dfs = error_rates(args.reps, args.draws, sd)
        for name in TESTS:
            cells = "  ".join(f"{rates[(name, L)]:>14.4f}" for L in LEVELS)
            print(f"{sd:>15.1f} pt  {name:>13}  {cells}  {dfs[name]:>9.1f}")
        print(f"{'':>18}  ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
