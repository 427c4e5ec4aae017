"""How to spend a toy grid's compute on a claim: the smallest effect a comparison detects against
training seeds and evaluation repeats at a fixed budget, from a finished grid's measured spreads
and costs (figures, not timed tests; docs/toy-world.md's allocation study).

From a finished grid (``results/summary/runs.csv`` and the rules' benchmark files):

- the spread between training seeds: each variant's sample SD of its runs' Avg (final checkpoint),
  less the evaluation's share (each run's Avg standard error over its repeats, questions fixed);
- the pairing: runs of two variants with the same seed see the same prompts and draw the same
  random numbers; the correlation of their residuals (a run minus its variant's mean), over every
  pair of variants of a setting and every seed both have;
- what a training cell and an evaluation cost: job-seconds per cell of the claim's arms, and per
  evaluation a fixed part (start-up, loading) and a part per repeat.

For a comparison of two arms with n seeds each and k repeats per evaluation, the difference's
variance is 2 s_b^2 (1 - r) + 2 s_e^2 16 / k paired over seeds (s_b the seed spread, r the pairing,
s_e the evaluation SE at the grid's repeats), and 2 (s_b^2 + s_e^2 16 / k) for Welch; the
detectable effect at a one-sided level L with 80% power is the noncentral t's, as on the claims page
(scout.stats.detectable; n - 1 df paired, Welch-Satterthwaite's 2(n - 1) at equal spreads). Its cost is 2 n (c_train +
c_eval + k c_repeat).

    python -m benchmarks.allocation --results DIR [--setting toy-l-s-math] [--variants scout,opd]
        [--out docs/figures/allocation.png]
"""

from __future__ import annotations

import argparse
import math
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from scout import stats

POWER = 0.8
PAPER = 2.2  # the paper's SCOUT-over-OPD effect on q4b-q1.7b-math, the headline the toy setting mirrors
# The primary family's comparisons (config report.primary) and the paper's effects on the mirrored setting
PRIMARY = (("scout", "opd", 2.2), ("scout", "opd_teacher_grpo", 2.6), ("optr_scout", "optr", 2.5))


def runs_table(results: Path, setting: str) -> pd.DataFrame:
    """Final run-level Avg (points) and its evaluation SE, one row per trained run of the setting."""
    runs = pd.read_csv(results / "summary" / "runs.csv")
    d = runs[(runs.setting == setting) & (runs.checkpoint == "final") & (runs.benchmark == "avg") & (runs.seed > 0)]
    return d.assign(avg=d["mean"] * 100, se=d["sem"] * 100)[["variant", "seed", "avg", "se"]]


def spreads(d: pd.DataFrame) -> dict:
    """The seed spread (median SD over variants with two or more runs, and its part net of the
    evaluation), the evaluation SE (median) and the pairing correlation with its number of pairs."""
    g = d.groupby("variant")
    sd = g.avg.std(ddof=1).dropna()
    se = float(d.se.median())
    resid = d.assign(res=d.avg - g.avg.transform("mean")).pivot(index="seed", columns="variant", values="res")
    xs, ys = [], []
    for a, b in combinations(resid.columns, 2):
        both = resid[[a, b]].dropna()
        if len(both) >= 2:
            xs += list(both[a]) + list(both[b])
            ys += list(both[b]) + list(both[a])
    r = float(np.corrcoef(xs, ys)[0, 1]) if len(xs) > 2 else math.nan
    total = float(sd.median())
    return {"sd": total, "sd_between": math.sqrt(max(total**2 - se**2, 0.0)), "se": se, "r": r,
            "pairs": len(xs) // 2, "variants": len(sd), "per_variant": sd.to_dict()}  # fmt: skip


def costs(results: Path, setting: str, variants: list[str], repeats: int) -> dict:
    """Job-seconds of a training cell of the arms (median), and of an evaluation: the fixed part
    (from the tuning stage's validations, which sample few repeats, when present) and per repeat."""
    bench = results / "benchmarks"

    def seconds(paths) -> list[float]:
        return [float(pd.read_csv(p, sep="\t")["s"].iloc[0]) for p in paths]

    train = [s for v in variants for s in seconds((bench / "train" / setting / v).glob("s*.tsv"))]
    evals = [s for v in variants for s in seconds((bench / "evaluate_math" / setting / v).glob("s*/final.tsv"))]
    ev = float(np.median(evals)) if evals else math.nan
    fixed = 1.5  # start-up and loading of an evaluation job (python, torch, model, data), measured: ~1.2-1.6 s
    return {"train": float(np.median(train)) if train else math.nan, "eval": ev, "eval_fixed": fixed,
            "per_repeat": (ev - fixed) / repeats if evals else math.nan}  # fmt: skip


def claim_rows(d: pd.DataFrame, level: float) -> list[dict]:
    """Per primary comparison: the seeds both arms have, the spread of their paired differences and
    of each arm, the arms' correlation, the detectable effect now (paired, at ``level``) and the
    seeds a side the paired test needs to detect the paper's effect at the measured spread."""
    wide = d.pivot(index="seed", columns="variant", values="avg")
    out = []
    for x, y, paper in PRIMARY:
        if x not in wide or y not in wide:
            continue
        both = wide[[x, y]].dropna()
        n = len(both)
        if n < 3:
            continue
        diff = both[x] - both[y]
        sd_d = float(diff.std(ddof=1))
        now = detectable(n, sd_d**2, level, n - 1)
        need = next((k for k in range(3, 200) if detectable(k, sd_d**2, level, k - 1) <= paper), None)
        out.append({"claim": f"{x} vs {y}", "seeds": n, "effect": float(diff.mean()), "sd_d": sd_d,
                    "sd_x": float(both[x].std(ddof=1)), "sd_y": float(both[y].std(ddof=1)),
                    "r": float(np.corrcoef(both[x], both[y])[0, 1]), "detectable": now, "paper": paper,
                    "seeds_needed": need})  # fmt: skip
    return out


def detectable(n: int, var_d: float, level: float, df: float) -> float:
    """The claims page's own figure (scout.stats.detectable: the noncentral t at df)."""
    return stats.detectable(math.sqrt(var_d / n), df, level, POWER)


def pair_model(d: pd.DataFrame, x: str, y: str) -> dict:
    """The comparison's own spreads, from the seeds both arms have: each arm's SD of a run's Avg,
    their correlation, and the evaluation SE (median over the two arms' runs)."""
    wide = d.pivot(index="seed", columns="variant", values="avg")[[x, y]].dropna()
    se = float(d[d.variant.isin([x, y])].se.median())
    return {"sd_x": float(wide[x].std(ddof=1)), "sd_y": float(wide[y].std(ddof=1)), "se": se,
            "r": float(np.corrcoef(wide[x], wide[y])[0, 1]), "seeds": len(wide)}  # fmt: skip


def _between(m: dict) -> tuple[float, float, float]:
    """The arms' between-seed variances and covariance, the evaluation's share taken out (its
    errors are independent between runs)."""
    vx, vy = max(m["sd_x"] ** 2 - m["se"] ** 2, 0.0), max(m["sd_y"] ** 2 - m["se"] ** 2, 0.0)
    return vx, vy, m["r"] * m["sd_x"] * m["sd_y"]


def paired_detectable(n: int, m: dict, level: float, k: int, k0: int) -> float:
    vx, vy, cov = _between(m)
    return detectable(n, vx + vy - 2 * cov + 2 * m["se"] ** 2 * k0 / k, level, n - 1)


def welch_detectable(n: int, m: dict, level: float, k: int, k0: int) -> float:
    vx, vy, _ = _between(m)
    return detectable(n, vx + vy + 2 * m["se"] ** 2 * k0 / k, level, 2 * (n - 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, required=True, help="a finished toy grid's results folder")
    p.add_argument("--setting", default="toy-l-s-math")
    p.add_argument("--variants", default="scout,opd", help="the arms whose cells' costs a comparison pays")
    p.add_argument("--repeats", type=int, default=16, help="the grid's repeats per question (math)")
    p.add_argument("--tests", type=int, default=29, help="rows of a one-family page (Bonferroni over all)")
    p.add_argument("--primary", type=int, default=3, help="rows of the primary family")
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--seeds", type=int, default=12, help="the seeds a side the design gives the headline arms")
    p.add_argument("--out", type=Path, default=None, help="write the figure here (PNG)")
    args = p.parse_args()
    d = runs_table(args.results, args.setting)
    s = spreads(d)
    x, y = args.variants.split(",")
    m = pair_model(d, x, y)
    c = costs(args.results, args.setting, [x, y], args.repeats)
    k0 = args.repeats
    one, prim = args.alpha / args.tests, args.alpha / args.primary
    print(f"{args.setting}: {s['variants']} variants; seed SD of a run's Avg, median {s['sd']:.2f} points "
          f"(net of evaluation {s['sd_between']:.2f}); evaluation SE median {s['se']:.2f} at {k0} repeats; "
          f"residuals of runs sharing a seed, over every pair of variants: r = {s['r']:+.2f} ({s['pairs']} pairs)")  # fmt: skip
    print("  per variant: " + ", ".join(f"{v} {sd:.2f}" for v, sd in sorted(s["per_variant"].items())))
    rows = claim_rows(d, prim)
    if rows:
        print(f"\nthe primary family's comparisons, paired over the seeds both arms have, at {args.alpha:g}/{args.primary}:")
        print(f"  {'comparison':<28} {'seeds':>5} {'effect':>7} {'SD diff':>8} {'SD arms':>12} {'r':>6} "
              f"{'detectable':>10} {'paper':>6} {'seeds needed':>12}")  # fmt: skip
        for r in rows:
            print(f"  {r['claim']:<28} {r['seeds']:>5} {r['effect']:>+7.2f} {r['sd_d']:>8.2f} "
                  f"{r['sd_x']:>5.2f} / {r['sd_y']:<4.2f} {r['r']:>+6.2f} {r['detectable']:>10.2f} {r['paper']:>6.1f} "
                  f"{r['seeds_needed'] or '-':>12}")  # fmt: skip
    print(f"\n{x} against {y} ({m['seeds']} seeds both have): SDs {m['sd_x']:.2f} and {m['sd_y']:.2f} points, r = "
          f"{m['r']:+.2f}, evaluation SE {m['se']:.2f}; a cell of the two arms costs {c['train']:.1f} job-s (median), "
          f"an evaluation {c['eval']:.1f} = {c['eval_fixed']:.1f} fixed + {k0} x {c['per_repeat']:.2f} per repeat")  # fmt: skip
    seeds = [3, 4, 6, 8, 10, 12, 16, 20, 24]
    print(f"smallest effect detected with {POWER:.0%} power (points), {k0} repeats; the paper's is {PAPER}:")
    print(f"  {'seeds a side':<44}" + "".join(f"{n:>7}" for n in seeds))
    curves = [(f"Welch, each test at {args.alpha:g}/{args.tests}", welch_detectable, one),
              (f"Welch, primary family of {args.primary}", welch_detectable, prim),
              (f"paired over seeds, primary family of {args.primary}", paired_detectable, prim)]  # fmt: skip
    for name, fn, level in curves:
        print(f"  {name:<44}" + "".join(f"{fn(n, m, level, k0, k0):>7.2f}" for n in seeds))
    budget = 2 * args.seeds * (c["train"] + c["eval_fixed"] + k0 * c["per_repeat"])
    print(f"\nat a fixed budget of {budget:.0f} job-seconds a comparison ({args.seeds} seeds a side at {k0} repeats):")
    print(f"  {'repeats':>8} {'seeds a side':>13} {'eval SE':>8} {'paired, primary':>16}")
    alloc = []
    for k in (1, 2, 4, 8, 16, 32, 64):
        n = int(budget // (2 * (c["train"] + c["eval_fixed"] + k * c["per_repeat"])))
        if n < 2:
            continue
        det = paired_detectable(n, m, prim, k, k0)
        alloc.append((k, n, det))
        print(f"  {k:>8} {n:>13} {m['se'] * math.sqrt(k0 / k):>8.2f} {det:>16.2f}")
    if args.out:
        figure(args.out, m, curves, k0, alloc, budget, args, f"{x} against {y}")


def figure(out: Path, m: dict, curves: list, k0: int, alloc: list, budget: float, args, what: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    grid = list(range(3, 25))
    for (name, fn, level), style in zip(curves, ("o:", "s--", "^-"), strict=True):
        a.plot(grid, [fn(n, m, level, k0, k0) for n in grid], style, ms=3, label=name)
    a.axhline(PAPER, color="gray", lw=0.8)
    a.text(grid[-1], PAPER, f"paper {PAPER} ", va="bottom", ha="right", fontsize=8, color="gray")
    a.axvline(args.seeds, color="black", lw=0.6, ls=":")
    a.set(xlabel="training seeds per arm", ylabel="detectable effect (points, 80% power)", ylim=(0, None),
          title=f"{what}, {args.setting}, {k0} repeats")  # fmt: skip
    a.title.set_fontsize(10)
    a.legend(fontsize=7, loc="upper right")
    ks = [x[0] for x in alloc]
    b.plot(ks, [x[2] for x in alloc], "^-", ms=4, color="C2", label="paired over seeds, primary family")
    for k, n, det in alloc:
        b.annotate(f"{n}", (k, det), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    b.axhline(PAPER, color="gray", lw=0.8)
    low = k0 * (m["se"] / 0.5) ** 2  # repeats below which a run's evaluation SE exceeds 0.5 points
    b.axvspan(min(ks) / 1.3, low, color="red", alpha=0.08, label="a run's evaluation SE above 0.5 points")
    b.set_xscale("log", base=2)
    b.set_xticks(ks, [str(k) for k in ks])
    b.set(xlabel="repeats per question (labels: the seeds a side the budget then buys)",
          ylabel="detectable effect (points)", ylim=(0, None),
          title=f"the same {budget:.0f} job-seconds a comparison, spent otherwise")  # fmt: skip
    b.title.set_fontsize(10)
    b.legend(fontsize=7, loc="lower center")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    print(f"figure: {out}")


if __name__ == "__main__":
    main()
