"""The paper's claims, each tested on this run's numbers with the unit that was randomised: the
report's first page.

Claims are data (``paper_claims.yaml``, plus a config's own ``claims:``): each names its comparison
and its kind; the kind fixes the unit and the test.

- Method comparisons (``beats``, ``on_par``, the f-sweep): the unit is the training seed. The effect
  is the difference of run-level Avg means, with Welch's t bounds (Welch-Satterthwaite df). Against
  the untrained student or teacher (one evaluation, no training seed) it is a t over the method's
  seeds with the evaluation's standard error added. One run on a trained side is *not measured*:
  a test on evaluation noise alone would ignore the spread between seeds.
- Probe claims (continuation, entropy, the trained teachers): the unit is the question, with its
  responses and their continuations nested in it; the bounds come from a bootstrap over questions
  (and over seeds where several trained teachers are compared), so both teachers' sampling errors
  count.

Each row gives the effect with its one-sided 90% bounds (the paper's alpha of 0.1 on each side,
an 80% two-sided interval) beside the paper's own number, and one of four verdicts:

- *holds*: the lower bound is above 0 (significant in the paper's direction);
- *does not hold*: the bounds exclude the paper's effect (below it, or below 0 where the paper
  gives no number);
- *inconclusive*: they hold both 0 and the paper's effect: this run is too small to tell;
- *not measured*, with why.

``on_par`` claims hold when both bounds lie within the setting's SCOUT-over-OPD effect of zero.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats as sps

from scout import grid
from scout.tables import Cache, interval_variants

HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive", "not measured"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, UNMEASURED)
PAPER_CLAIMS = Path(__file__).with_name("paper_claims.yaml")
SEEDS_UNIT = "training seed"
QUESTION_UNIT = "question (responses, continuations nested)"
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Claim:
    claim: str
    setting: str
    statistic: str
    test: str
    effect: float  # points (or nats), in the paper's direction
    low: float  # one-sided lower and upper bounds at the report's alpha
    high: float
    paper: float | None  # the paper's own effect for this claim and setting, where it gives one
    verdict: str
    unit: str = ""
    why: str = ""
    used: list = field(default_factory=list)  # the runs or probe rows behind the numbers
    id: str = ""


def specs(config: dict) -> list[dict]:
    """The paper's claims, then the config's own (``claims:``)."""
    return yaml.safe_load(PAPER_CLAIMS.read_text()) + list(config.get("claims", []))


# ------------------------------------------------------------------------------------------------
# Statistics (pure functions)
# ------------------------------------------------------------------------------------------------


def welch_bounds(x, y, alpha: float) -> tuple[float, float, float]:
    """mean(x) - mean(y) with its one-sided (1 - alpha) bounds by Welch's t (NaN below two runs)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0:
        return diff, diff, diff
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = float(sps.t.ppf(1 - alpha, df)) * math.sqrt(vx + vy)
    return diff, diff - half, diff + half


def against_one_evaluation(x, value: float, sem: float, alpha: float) -> tuple[float, float, float]:
    """mean(x) - value for runs x against one evaluation (no seeds) with its standard error: a t
    over the runs with the evaluation's variance added."""
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - value)
    se = math.sqrt(x.var(ddof=1) / x.size + (sem if not math.isnan(sem) else 0.0) ** 2)
    half = float(sps.t.ppf(1 - alpha, x.size - 1)) * se
    return diff, diff - half, diff + half


def cluster_bootstrap(statistic, clusters: list, alpha: float, groups: dict | None = None, seed: int = 0):
    """``statistic(questions, seeds)`` with one-sided (1 - alpha) percentile bounds, resampling the
    questions (clusters) and, per group in ``groups`` ({name: seeds}), the seeds with replacement."""
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
    if not draws:
        return point, math.nan, math.nan
    return point, float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))


def verdict(effect: float, low: float, high: float, paper: float | None, kind: str = "beats",
            margin: float | None = None) -> str:  # fmt: skip
    """The four verdicts from the bounds (see the module docstring)."""
    if any(math.isnan(v) for v in (effect, low, high)):
        return UNMEASURED
    if kind == "on_par":
        if margin is not None and -margin < low and high < margin:
            return HOLDS
        target = 0.0 if paper is None else paper
        return FAILS if (low > target or high < target) else INCONCLUSIVE
    if low > 0:
        return HOLDS
    if high < (0.0 if paper is None else paper):
        return FAILS
    return INCONCLUSIVE


# ------------------------------------------------------------------------------------------------
# Claims over training runs
# ------------------------------------------------------------------------------------------------


def _paper_effect(config: dict, spec: dict, setting: str) -> float | None:
    paper = spec.get("paper") or {}
    if not isinstance(paper, dict):
        return float(paper)
    key = setting if setting in paper else config["settings"][setting].get("mirrors")
    return paper.get(key) if key in paper else None


def _settings(config: dict, spec: dict) -> list[str]:
    if "experiment" in spec:
        return list(config["experiments"].get(spec["experiment"], {}).get("settings", []))
    return list(spec.get("settings") or config["settings"])


def _runs(cache: Cache, setting: str, variant: str) -> tuple[list[float], list[str]]:
    row = cache.row(setting, variant)
    avg = row.run_avg.dropna()
    return list(avg), [f"{setting}/{variant}/s{s}" for s in avg.index]


def _compare(cache: Cache, spec: dict, setting: str, variant: str, baseline: str, alpha: float) -> Claim:
    """Run-level Avg of ``variant`` against ``baseline`` on one setting: unit the training seed."""
    paper = _paper_effect(cache.config, spec, setting)
    kind = "on_par" if spec["kind"] in ("on_par", "sweep_dense") else "beats"
    base = dict(claim=spec["claim"], setting=setting, paper=paper, unit=SEEDS_UNIT, id=spec["id"])
    if not cache.has_variant(setting, variant) or not cache.has_variant(setting, baseline):
        return Claim(**base, statistic="", test="", effect=math.nan, low=math.nan, high=math.nan,
                     verdict=UNMEASURED, why=f"{variant} or {baseline} is not in this grid on {setting}")  # fmt: skip
    x, used_x = _runs(cache, setting, variant)
    y, used_y = _runs(cache, setting, baseline)
    label = cache.label(baseline) if baseline not in grid.BASE_VARIANTS else baseline.replace("-", " ")
    absent = [name for name, runs in ((cache.label(variant), x), (label, y)) if not runs]
    if absent:
        return Claim(**base, statistic="", test="", effect=math.nan, low=math.nan, high=math.nan, verdict=UNMEASURED,
                     why=f"no results of {' or '.join(absent)} on {setting} yet")  # fmt: skip
    margin = None
    if kind == "on_par":  # on a par: within the setting's SCOUT-over-OPD effect (points) of each other
        gain = _paper_effect(cache.config, {"paper": _scout_gain()}, setting)
        margin = abs(gain) if gain else None
    if baseline in grid.BASE_VARIANTS:
        test = "t over seeds against one evaluation (its error added)"
        sem = _evaluation_sem(cache, setting, baseline)
        if len(x) < 2 or not y:
            why = f"{len(x)} run(s) of {cache.label(variant)}: the seed is the unit, two or more are needed"
            return Claim(**base, statistic="", test=test, effect=math.nan, low=math.nan, high=math.nan,
                         verdict=UNMEASURED, why=why, used=used_x + used_y)  # fmt: skip
        effect, low, high = against_one_evaluation(x, y[0], sem, alpha)
    else:
        test = "Welch t on run-level Avg"
        if len(x) < 2 or len(y) < 2:
            why = (f"{len(x)} run(s) of {cache.label(variant)} and {len(y)} of {label}: the seed is the unit, "
                   "two or more a side are needed")  # fmt: skip
            return Claim(**base, statistic="", test=test, effect=math.nan, low=math.nan, high=math.nan,
                         verdict=UNMEASURED, why=why, used=used_x + used_y)  # fmt: skip
        effect, low, high = welch_bounds(x, y, alpha)
    stat = f"Avg {100 * np.mean(x):.1f} vs {100 * np.mean(y):.1f} ({label}); {len(x)} and {len(y)} runs"
    v = verdict(effect * 100, low * 100, high * 100, paper, kind, margin)
    return Claim(**base, statistic=stat, test=test, effect=effect * 100, low=low * 100, high=high * 100,
                 verdict=v, used=used_x + used_y)  # fmt: skip


def _scout_gain() -> dict:
    return next(s["paper"] for s in yaml.safe_load(PAPER_CLAIMS.read_text()) if s["id"] == "scout_beats_opd")


def _evaluation_sem(cache: Cache, setting: str, variant: str) -> float:
    """Standard error of one evaluation's Avg (the mean of its benchmarks' SEMs in quadrature)."""
    e = cache.row(setting, variant).e.dropna(axis=0, how="all")
    if not len(e):
        return math.nan
    row = e.iloc[0].dropna()
    return float(np.sqrt((row**2).sum()) / len(row)) if len(row) else math.nan


def _sweep(cache: Cache, spec: dict, setting: str, alpha: float) -> Claim:
    sweep = interval_variants(cache, setting)
    main = next((v for f, v in sweep if v == "scout"), None)
    if main is None or len(sweep) < 2:
        return Claim(spec["claim"], setting, "", "", math.nan, math.nan, math.nan, None, UNMEASURED, SEEDS_UNIT,
                     "no f-sweep around the main SCOUT run", id=spec["id"])  # fmt: skip
    if spec["kind"] == "sweep_sparse":
        variant, baseline = main, sweep[-1][1]
    else:
        variant, baseline = sweep[0][1], main
    claim = _compare(cache, spec, setting, variant, baseline, alpha)
    fs = {v: f for f, v in sweep}
    curve = "; ".join(f"f={f}: {100 * np.mean(_runs(cache, setting, v)[0]):.1f}" for f, v in sweep if _runs(cache, setting, v)[0])
    stat = f"f={fs[variant]} vs f={fs[baseline]} ({curve})"
    return Claim(**{**asdict(claim), "statistic": stat if claim.statistic else ""})


# ------------------------------------------------------------------------------------------------
# Claims over the teacher probes (unit: the question)
# ------------------------------------------------------------------------------------------------


def _items(analysis_dir: Path, setting: str) -> pd.DataFrame | None:
    path = analysis_dir / setting / "continuation_items.csv"
    return pd.read_csv(path) if path.exists() else None


class _Totals:
    """Per-question sums of correct continuations and of continuations of one probe, so that the
    accuracy over a resample of questions is two array sums (the bootstrap draws thousands)."""

    def __init__(self, d: pd.DataFrame, universe: list):
        by_q = d.groupby("question")[["correct", "k"]].sum().reindex(universe)
        self.pos = {q: i for i, q in enumerate(universe)}
        self.correct, self.k = by_q.correct.to_numpy(float), by_q.k.to_numpy(float)

    def acc(self, questions: list) -> float:
        """Accuracy of continuations over the (resampled) questions: every continuation of every
        prefix of each drawn question counts, a question drawn twice twice; questions this probe
        did not visit are left out."""
        idx = np.fromiter((self.pos[q] for q in questions), dtype=int, count=len(questions))
        k = self.k[idx]
        seen = ~np.isnan(k)
        total = k[seen].sum()
        return float(self.correct[idx][seen].sum() / total) if total else math.nan


def _probe(cache: Cache, spec: dict, setting: str, analysis_dir: Path, alpha: float) -> Claim:
    kind = spec["kind"]
    base = dict(claim=spec["claim"], setting=setting, paper=_paper_effect(cache.config, spec, setting),
                unit=QUESTION_UNIT, id=spec["id"])  # fmt: skip
    items = _items(analysis_dir, setting) if kind != "entropy_gap" else None
    path = analysis_dir / setting / ("entropy_responses.csv" if kind == "entropy_gap" else "continuation_items.csv")

    def unmeasured(why: str, test: str = "") -> Claim:
        return Claim(**base, statistic="", test=test, effect=math.nan, low=math.nan, high=math.nan,
                     verdict=UNMEASURED, why=why)  # fmt: skip

    if not path.exists():
        return unmeasured("the analysis stage has not run on this setting (or predates per-question records)")
    test = "bootstrap over questions"

    def bootstrapped(diff, qs, stat: str, used: list[str], seeds: dict | None = None) -> Claim:
        """The claim from a per-question difference, resampled over questions (and seeds, if any)."""
        effect, low, high = cluster_bootstrap(diff, qs, alpha, seeds)
        suffix = " and seeds" if seeds else " (paired)"
        return Claim(**base, statistic=stat, test=test + suffix, effect=effect, low=low, high=high,
                     verdict=verdict(effect, low, high, base["paper"]), used=used)  # fmt: skip
    if kind == "entropy_gap":
        d = pd.read_csv(path)
        d = d[d.teacher == "initial"]
        s, o = d[d.context == "student"], d[d.context == "own"]
        qs = sorted(set(s.question) & set(o.question))
        if len(qs) < 2:
            return unmeasured("too few questions with both the student's and the teacher's responses", test)
        sm, om = s.groupby("question").entropy.mean(), o.groupby("question").entropy.mean()

        def gap(q, _):
            return float(sm.reindex(q).mean() - om.reindex(q).mean())

        stat = f"{s.entropy.mean():.3f} vs {o.entropy.mean():.3f} nats per token ({len(qs)} questions)"
        return bootstrapped(gap, qs, stat, [f"{path}: initial teacher"])
    d = items
    universe = sorted(d.question.unique())

    def totals(rows: pd.DataFrame) -> _Totals:
        return _Totals(rows, universe)

    initial = d[(d.teacher == "initial") & (d.prefixes == "initial-student")]
    qs = sorted(initial.question.unique())
    if len(qs) < 2:
        return unmeasured("too few probed questions", test)
    ratios = sorted(initial.prefix_ratio.unique())
    if kind == "continuation_falls":
        lo_r, hi_r = ratios[0], ratios[-1]
        first, last = totals(initial[initial.prefix_ratio == lo_r]), totals(initial[initial.prefix_ratio == hi_r])

        def fall(q, _):
            return (first.acc(q) - last.acc(q)) * 100

        stat = f"{100 * first.acc(qs):.1f} at {lo_r:.0%} to {100 * last.acc(qs):.1f} at {hi_r:.0%}"
        return bootstrapped(fall, qs, stat, [f"{path}: initial teacher, initial-student prefixes, {len(qs)} questions"])
    t_initial = totals(initial)
    if kind == "below_own":
        own = d[(d.teacher == "initial") & (d.prefixes == "own")]
        qs = sorted(set(qs) & set(own.question))
        if len(qs) < 2:
            return unmeasured("the teacher's own prefixes were not probed", test)
        t_own = totals(own)

        def gap(q, _):
            return (t_own.acc(q) - t_initial.acc(q)) * 100

        stat = f"own {100 * t_own.acc(qs):.1f} vs student {100 * t_initial.acc(qs):.1f}, all ratios"
        return bootstrapped(gap, qs, stat, [f"{path}: initial teacher, own and initial-student prefixes, {len(qs)} questions"])
    trained = d[(d.teacher == "scout") & (d.prefixes == "initial-student")]
    seeds = sorted(trained.seed.unique())
    if not seeds:
        return unmeasured("no SCOUT-trained teacher was probed", test)
    t_trained = totals(trained)
    per_scout = {seed: totals(trained[trained.seed == seed]) for seed in seeds}
    if kind == "teacher_improves":

        def gain(q, s):
            per_seed = [per_scout[seed].acc(q) for seed in s["scout"]]
            return (float(np.mean(per_seed)) - t_initial.acc(q)) * 100

        stat = f"{100 * t_trained.acc(qs):.1f} vs initial {100 * t_initial.acc(qs):.1f} ({len(seeds)} seeds)"
        used = [f"{path}: scout s{s}" for s in seeds] + [f"{path}: initial teacher"]
        return bootstrapped(gain, qs, stat, used, {"scout": seeds})
    control = d[(d.teacher == "control") & (d.prefixes == "initial-student")]
    c_seeds = sorted(control.seed.unique())
    if not c_seeds:
        return unmeasured("no prefix-0 control teacher was probed on this setting", test)

    per_control = {seed: totals(control[control.seed == seed]) for seed in c_seeds}

    def over_control(q, s):
        a = [per_scout[seed].acc(q) for seed in s["scout"]]
        b = [per_control[seed].acc(q) for seed in s["control"]]
        return (float(np.mean(a)) - float(np.mean(b))) * 100

    stat = f"{100 * t_trained.acc(qs):.1f} vs control {100 * totals(control).acc(qs):.1f} ({len(seeds)} and {len(c_seeds)} seeds)"
    used = [f"{path}: scout s{s}" for s in seeds] + [f"{path}: control s{s}" for s in c_seeds]
    return bootstrapped(over_control, qs, stat, used, {"scout": seeds, "control": c_seeds})


PROBES = ("continuation_falls", "below_own", "entropy_gap", "teacher_improves", "teacher_beats_control")


def all_claims(cache: Cache, analysis_dir: str | Path, alpha: float) -> list[Claim]:
    """Every claim (the paper's, then the config's), per setting where it is made."""
    a = Path(analysis_dir)
    out = []
    for spec in specs(cache.config):
        kind = spec["kind"]
        if kind in PROBES:
            for setting in cache.config.get("analysis", {}).get("settings", []):
                out.append(_probe(cache, spec, setting, a, alpha))
        elif kind in ("sweep_sparse", "sweep_dense"):
            out += [_sweep(cache, spec, s, alpha) for s in _settings(cache.config, spec)]
        else:
            out += [_compare(cache, spec, s, spec["variant"], spec["baseline"], alpha) for s in _settings(cache.config, spec)]
    return out


def as_records(claims: list[Claim]) -> list[dict]:
    """JSON-ready rows for the manifest (NaN as null)."""

    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    return [{k: clean(v) for k, v in asdict(c).items()} for c in claims]


def summary(claims: list[Claim]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
