"""The paper's claims, each tested on this run's numbers with the unit that was randomised: the
report's first page.

Claims are data (``paper_claims.yaml``, plus a config's own ``claims:``): each names its comparison
and its kind; the kind fixes the unit and the test; ``scout.verdicts`` makes a verdict of its interval.

- Method comparisons (``beats``, ``on_par``, the f-sweep): the unit is the training seed. Runs of
  two variants with the same seed number see the same prompts in the same order and draw the same
  random numbers, so the design pairs them: the effect is the mean of the per-seed differences of
  run-level Avg over the seeds both arms have, with a paired t (n - 1 df); the paper's Welch test
  over every run is computed beside it, and decides where fewer than two seeds pair. Against the
  untrained student or teacher (one evaluation, no training seed) it is a t over the method's seeds
  with the evaluation's standard error added; an evaluation without one is *not measured*. One run
  on a trained side is *not measured*: a test on evaluation noise alone would ignore the spread
  between seeds.
- Probe claims over the initial teacher alone (continuation, entropy): the unit is the question,
  its responses and continuations nested in it; a bootstrap over questions, t with their df.
- Probe claims over trained teachers (SCOUT's, the control's, a LoRA teacher's): the statistic is
  computed per trained teacher and tested over them (a t with the seeds' df, Welch across two arms),
  with the variance of the questions they share added (``stats.over_seeds``). Fewer than two trained
  teachers on a side is *not measured*, as for method rows.

Beyond the per-setting rows, ``scout.across`` gives a descriptive view across settings (rliable).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from scout import grid, stats
from scout.config import PAPER_CLAIMS
from scout.grid import Grid
from scout.results import Cache
from scout.stats import against_one_evaluation, cluster_bootstrap, over_seeds, paired
from scout.verdicts import (
    PAIRED,
    PRIMARY,
    QUESTION_UNIT,
    SECONDARY,
    SEEDS_UNIT,
    TEACHER_UNIT,
    UNMEASURED,
    WELCH,
    Claim,
    family,
)


def specs(g: Grid) -> list[dict]:
    """The paper's claims, then the config's own (``claims:``)."""
    return yaml.safe_load(PAPER_CLAIMS.read_text()) + list(g.config.get("claims", []))


welch = stats.welch_se  # mean(x) - mean(y), its standard error and df (NaN below two runs a side)


# ------------------------------------------------------------------------------------------------
# Claims over training runs
# ------------------------------------------------------------------------------------------------


def _paper_effect(g: Grid, spec: dict, setting: str) -> float | None:
    paper = spec.get("paper") or {}
    if not isinstance(paper, dict):
        return float(paper)
    key = setting if setting in paper else g.settings[setting].mirrors
    return paper.get(key) if key in paper else None


def _settings(g: Grid, spec: dict) -> list[str]:
    """The claim's settings that the grid trains (a reduced experiment claims nothing of the rest)."""
    if "experiment" in spec:
        e = g.experiments.get(spec["experiment"])
        return list(e.settings) if e else []
    in_grid = {s for e in g.experiments.values() for s in e.settings}
    return [s for s in spec.get("settings") or g.settings if s in in_grid]


def _runs(cache: Cache, setting: str, variant: str) -> tuple[list[float], list[str]]:
    avg = _avg(cache, setting, variant)
    return list(avg), [f"{setting}/{variant}/s{s}" for s in avg.index]


def _trained_here(cache: Cache, setting: str, variants: tuple[str, ...]) -> bool:
    """Whether every final record of these variants comes from this pipeline's own runs, whose
    seeds pair runs by design (imported numbers say nothing of how their runs were seeded)."""
    d = cache.final
    if not len(d) or "source" not in d.columns:
        return False
    rows = d.reset_index()
    rows = rows[(rows.setting == setting) & rows.variant.isin(variants)]
    return bool(len(rows)) and not (rows.source == "imported").any()


def _avg(cache: Cache, setting: str, variant: str) -> pd.Series:
    """Run-level Avg by seed (runs missing a benchmark left out)."""
    return cache.row(setting, variant).run_avg.dropna()


def _unmeasured(base: dict, why: str, test: str = "", used: list | None = None) -> Claim:
    return Claim(**base, statistic="", test=test, effect=math.nan, low=math.nan, high=math.nan, verdict=UNMEASURED,
                 why=why, used=used or [])  # fmt: skip


def _compare(cache: Cache, spec: dict, setting: str, variant: str, baseline: str) -> Claim:
    """Run-level Avg of ``variant`` against ``baseline`` on one setting: unit the training seed."""
    paper = _paper_effect(cache.grid, spec, setting)
    kind = "on_par" if spec["kind"] in ("on_par", "sweep_dense") else "beats"
    margin = _margin(cache.grid, spec, setting) if kind == "on_par" else None
    direction = -1 if kind == "beats" and paper is not None and paper < 0 else 1
    # a verdict reads against the claim beside it: where the paper's effect is negative, the row tests
    # the reverse, and its claim says so
    text = spec["claim"] + (": the paper finds the reverse here, tested so" if direction < 0 else "")
    base = dict(claim=text, setting=setting, paper=paper, unit=SEEDS_UNIT, id=spec["id"], kind=kind,
                margin=margin, direction=direction, where=spec.get("where", ""),
                family=PRIMARY if cache.grid.report.is_primary(spec["id"], setting) else SECONDARY)  # fmt: skip
    if not cache.has_variant(setting, variant) or not cache.has_variant(setting, baseline):
        return _unmeasured(base, f"{variant} or {baseline} is not in this grid on {setting}")
    x, used_x = _runs(cache, setting, variant)
    y, used_y = _runs(cache, setting, baseline)
    label = cache.label(baseline) if baseline not in grid.BASE_VARIANTS else baseline.replace("-", " ")
    absent = [name for name, runs in ((cache.label(variant), x), (label, y)) if not runs]
    if absent:
        return _unmeasured(base, f"no results of {' or '.join(absent)} on {setting} yet")
    if kind == "on_par" and margin is None:
        return _unmeasured(base, "no margin to test on a par within: the paper gives no SCOUT-over-OPD effect for "
                                 f"{setting}; give the claim a margin (points)", used=used_x + used_y)  # fmt: skip
    stat = ""
    if baseline in grid.BASE_VARIANTS:
        test = "t over seeds against one evaluation (its error added)"
        sem = _evaluation_sem(cache, setting, baseline)
        if len(x) < 2 or not y:
            why = f"{len(x)} run(s) of {cache.label(variant)}: the seed is the unit, two or more are needed"
            return _unmeasured(base, why, test, used_x + used_y)
        if math.isnan(sem):
            why = f"the {label}'s evaluation has no standard error in its records: the test needs it"
            return _unmeasured(base, why, test, used_x + used_y)
        effect, se, df = against_one_evaluation(x, y[0], sem)
        base.update(n=len(x), design="one_evaluation", floor=sem * 100)
    else:
        if len(x) < 2 or len(y) < 2:
            why = (f"{len(x)} run(s) of {cache.label(variant)} and {len(y)} of {label}: the seed is the unit, "
                   "two or more a side are needed")  # fmt: skip
            return _unmeasured(base, why, WELCH, used_x + used_y)
        effect, se, df = welch(x, y)
        base.update(n=min(len(x), len(y)), design="welch")
        ax, ay = _avg(cache, setting, variant), _avg(cache, setting, baseline)
        both = [s for s in ax.index if s in set(ay.index)]
        if len(both) >= 2 and _trained_here(cache, setting, (variant, baseline)):
            base.update(welch_effect=effect * 100, welch_se=se * 100, welch_df=df, n=len(both), design="paired")
            effect, se, df = paired(ax[both].to_numpy(), ay[both].to_numpy())
            if len(both) == len(ax) == len(ay):
                test = f"{PAIRED} ({len(both)} pairs)"
                stat = (f"Avg {100 * np.mean(x):.1f} vs {100 * np.mean(y):.1f} ({label}); {len(x)} seeds each, "
                        "paired by seed")  # fmt: skip
            else:
                test = f"{PAIRED} (the {len(both)} seeds both arms have; Welch beside it over all runs)"
                stat = (f"Avg {100 * ax[both].mean():.1f} vs {100 * ay[both].mean():.1f} ({label}) on seeds "
                        f"{', '.join(map(str, both))}; {len(x)} and {len(y)} seeds in all")  # fmt: skip
        else:
            test = WELCH
    if not stat:
        other = "one evaluation" if baseline in grid.BASE_VARIANTS else _seeds(len(y))
        stat = f"Avg {100 * np.mean(x):.1f} ({_seeds(len(x))}) vs {100 * np.mean(y):.1f} ({label}, {other})"
    arms = ((cache.label(variant), [100 * v for v in x]), (label, [100 * v for v in y]))
    return Claim(**base, statistic=stat, test=test, effect=effect * 100, low=math.nan, high=math.nan, se=se * 100,
                 df=df, verdict="", used=used_x + used_y, arms=arms)  # fmt: skip


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def _margin(g: Grid, spec: dict, setting: str) -> float | None:
    """On a par: within the claim's own margin, or else the setting's SCOUT-over-OPD effect in the
    paper (points), of each other."""
    if spec.get("margin") is not None:
        return float(spec["margin"])
    gain = _paper_effect(g, {"paper": _scout_gain()}, setting)
    return abs(gain) if gain else None


def _scout_gain() -> dict:
    return next(s["paper"] for s in yaml.safe_load(PAPER_CLAIMS.read_text()) if s["id"] == "scout_beats_opd")


def _evaluation_sem(cache: Cache, setting: str, variant: str) -> float:
    """Standard error of one evaluation's Avg (the mean of its benchmarks' SEMs in quadrature); NaN
    where any benchmark's was not measured."""
    e = cache.row(setting, variant).e.dropna(axis=0, how="all")
    if not len(e):
        return math.nan
    return stats.avg_sem(e.iloc[0].to_numpy(float))


def _sweep(cache: Cache, spec: dict, setting: str) -> Claim:
    sweep = cache.interval_variants(setting)
    main = next((v for f, v in sweep if v == "scout"), None)
    base = dict(claim=spec["claim"], setting=setting, paper=None, unit=SEEDS_UNIT, id=spec["id"],
                where=spec.get("where", ""))  # fmt: skip
    if main is None or len(sweep) < 2:
        return _unmeasured(base, "no f-sweep around the main SCOUT run")
    if spec["kind"] == "sweep_sparse":
        variant, baseline = main, sweep[-1][1]
    else:
        variant, baseline = sweep[0][1], main
    fs = {v: f for f, v in sweep}
    if variant == baseline:  # the main run is the sweep's sparsest (or densest) point: nothing to compare
        end, other = ("sparsest", "sparser") if spec["kind"] == "sweep_sparse" else ("densest", "denser")
        return _unmeasured(base, f"the main SCOUT run (f={fs[main]}) is the sweep's {end} f: no {other} f to compare")
    claim = _compare(cache, spec, setting, variant, baseline)
    curve = "; ".join(f"f={f}: {100 * np.mean(_runs(cache, setting, v)[0]):.1f}" for f, v in sweep if _runs(cache, setting, v)[0])
    stat = f"f={fs[variant]} vs f={fs[baseline]} ({curve})"
    return Claim(**{**asdict(claim), "statistic": stat if claim.statistic else ""})


# ------------------------------------------------------------------------------------------------
# Claims over the teacher probes (unit: the question)
# ------------------------------------------------------------------------------------------------


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


def _probe(cache: Cache, spec: dict, setting: str, analysis_dir: Path) -> Claim:
    kind = spec["kind"]
    base = dict(claim=spec["claim"], setting=setting, paper=_paper_effect(cache.grid, spec, setting),
                unit=QUESTION_UNIT, id=spec["id"], where=spec.get("where", ""),
                family=PRIMARY if cache.grid.report.is_primary(spec["id"], setting) else SECONDARY)  # fmt: skip
    path = analysis_dir / setting / _PROBE_FILES.get(kind, "continuation_items.csv")
    unmeasured = partial(_unmeasured, base)  # base as updated below
    if not path.exists():
        return unmeasured("the analysis stage has not run on this setting (or predates per-question records)")
    if kind == "reflection_selective":
        return _reflection(base, path)
    if kind == "entropy_gap":
        return _entropy_gap(base, path)
    d = pd.read_csv(path)
    totals = partial(_Totals, universe=sorted(d.question.unique()))
    initial = d[(d.teacher == "initial") & (d.prefixes == "initial-student")]
    qs = sorted(initial.question.unique())
    if len(qs) < 2:
        return unmeasured("too few probed questions", QUESTION_TEST)
    ratios = sorted(initial.prefix_ratio.unique())
    if kind == "continuation_falls":
        lo_r, hi_r = ratios[0], ratios[-1]
        first, last = totals(initial[initial.prefix_ratio == lo_r]), totals(initial[initial.prefix_ratio == hi_r])

        def fall(q):
            return (first.acc(q) - last.acc(q)) * 100

        stat = f"{100 * first.acc(qs):.1f} at {lo_r:.0%} to {100 * last.acc(qs):.1f} at {hi_r:.0%}"
        return _over_questions(base, fall, qs, stat, [f"{path}: initial teacher, initial-student prefixes, {len(qs)} questions"])
    t_initial = totals(initial)
    if kind == "below_own":
        own = d[(d.teacher == "initial") & (d.prefixes == "own")]
        qs = sorted(set(qs) & set(own.question))
        if len(qs) < 2:
            return unmeasured("the teacher's own prefixes were not probed", QUESTION_TEST)
        t_own = totals(own)

        def gap(q):
            return (t_own.acc(q) - t_initial.acc(q)) * 100

        stat = f"own {100 * t_own.acc(qs):.1f} vs student {100 * t_initial.acc(qs):.1f}, all ratios"
        return _over_questions(base, gap, qs, stat, [f"{path}: initial teacher, own and initial-student prefixes, {len(qs)} questions"])
    base.update(unit=TEACHER_UNIT)
    trained = d[(d.teacher == "scout") & (d.prefixes == "initial-student")]
    seeds = sorted(trained.seed.unique())
    if not seeds:
        return unmeasured("no SCOUT-trained teacher was probed", SEEDS_TEST)
    t_trained = totals(trained)
    per_scout = {seed: totals(trained[trained.seed == seed]) for seed in seeds}
    if kind == "teacher_improves":
        arms = {"SCOUT": {seed: _minus(per_scout[seed].acc, t_initial.acc) for seed in seeds}}
        stat = f"{100 * t_trained.acc(qs):.1f} vs initial {100 * t_initial.acc(qs):.1f} ({_seeds(len(seeds))})"
        used = [f"{path}: scout s{s}" for s in seeds] + [f"{path}: initial teacher"]
        return _over_teachers(base, arms, {}, qs, stat, used)
    # teacher_beats_control: SCOUT's teacher over the control's; teacher_on_par: another trained
    # teacher (``variant``, its probe label: a LoRA teacher's variant) beside SCOUT's
    other = "control" if kind == "teacher_beats_control" else spec["variant"]
    control = d[(d.teacher == other) & (d.prefixes == "initial-student")]
    c_seeds = sorted(control.seed.unique())
    what = "prefix-0 control" if other == "control" else other
    if not c_seeds:
        return unmeasured(f"no {what} teacher was probed on this setting", SEEDS_TEST)
    per_control = {seed: totals(control[control.seed == seed]) for seed in c_seeds}
    arms = {"SCOUT": {s: _scaled(per_scout[s].acc) for s in seeds}, what: {s: _scaled(per_control[s].acc) for s in c_seeds}}
    if other == "control":
        sign = {"SCOUT": 1, what: -1}
        stat = f"{100 * t_trained.acc(qs):.1f} vs control {100 * totals(control).acc(qs):.1f} ({len(seeds)} and {len(c_seeds)} seeds)"
    else:  # the claim's direction: the other teacher minus SCOUT's
        sign = {"SCOUT": -1, what: 1}
        margin = _margin(cache.grid, spec, setting)
        base.update(kind="on_par", margin=margin)
        stat = f"{100 * totals(control).acc(qs):.1f} vs SCOUT's {100 * t_trained.acc(qs):.1f} ({len(c_seeds)} and {len(seeds)} seeds)"
        if margin is None:
            return unmeasured("no margin to test on a par within: the paper gives no SCOUT-over-OPD effect for "
                              f"{setting}; give the claim a margin (points)", SEEDS_TEST)  # fmt: skip
    used = [f"{path}: scout s{s}" for s in seeds] + [f"{path}: {other} s{s}" for s in c_seeds]
    return _over_teachers(base, arms, sign, qs, stat, used)


def _entropy_gap(base: dict, path: Path) -> Claim:
    """The initial teacher's entropy on the student's responses minus on its own, per question."""
    d = pd.read_csv(path)
    d = d[d.teacher == "initial"]
    s, o = d[d.context == "student"], d[d.context == "own"]
    qs = sorted(set(s.question) & set(o.question))
    if len(qs) < 2:
        return _unmeasured(base, "too few questions with both the student's and the teacher's responses", QUESTION_TEST)
    sm, om = s.groupby("question").entropy.mean(), o.groupby("question").entropy.mean()

    def gap(q):
        return float(sm.reindex(q).mean() - om.reindex(q).mean())

    stat = f"{s.entropy.mean():.3f} vs {o.entropy.mean():.3f} nats per token ({len(qs)} questions)"
    return _over_questions(base, gap, qs, stat, [f"{path}: initial teacher"])


QUESTION_TEST = "bootstrap over questions"
SEEDS_TEST = "t over trained teachers"


def _scaled(acc):
    return lambda q: acc(q) * 100


def _minus(acc, reference):
    return lambda q: (acc(q) - reference(q)) * 100


def _over_questions(base: dict, statistic, qs: list, stat: str, used: list[str]) -> Claim:
    """A claim of the initial teacher alone: a per-question statistic, resampled over questions."""
    b = cluster_bootstrap(statistic, qs)
    test = f"{QUESTION_TEST} ({len(qs)} questions, t with {len(qs) - 1} df)" + _failed(b)
    return Claim(**base, statistic=stat, test=test, effect=b.effect, low=math.nan, high=math.nan, se=b.se, df=b.df,
                 verdict="", used=used, failed=b.failed, design="questions")  # fmt: skip


def _over_teachers(base: dict, arms: dict, sign: dict, qs: list, stat: str, used: list[str]) -> Claim:
    """A claim of trained teachers: the statistic per teacher, tested over the teachers with the
    questions they share (``stats.over_seeds``); fewer than two on a side is not measured."""
    few = [f"{len(s)} trained teacher{'' if len(s) == 1 else 's'} of {a}" for a, s in arms.items() if len(s) < 2]
    if few:
        return _unmeasured(base, f"{' and '.join(few)}: the trained teacher (its seed) is the unit, two or more "
                                 "are needed", SEEDS_TEST, used)  # fmt: skip
    b = over_seeds(arms, qs, sign)
    sizes = " and ".join(str(len(s)) for s in arms.values())
    how = "Welch across the two arms" if len(arms) == 2 else "their seeds' df"
    test = (f"{SEEDS_TEST} ({sizes} seeds, {how}; the {len(qs)} questions' shared sampling added, "
            f"{b.df:.1f} df)" + _failed(b))  # fmt: skip
    return Claim(**base, statistic=stat, test=test, effect=b.effect, low=math.nan, high=math.nan, se=b.se, df=b.df,
                 verdict="", used=used, failed=b.failed, n=min(len(s) for s in arms.values()), design="seeds")  # fmt: skip


def _failed(b: stats.Bootstrapped) -> str:
    return f"; {b.failed} of {b.draws} draws undefined, left out" if b.failed else ""


class _Selectivity:
    """Per-question sums of one teacher's reflection probability after right and after wrong steps,
    so that its selectivity over a resample of questions is four array sums."""

    def __init__(self, d: pd.DataFrame, universe: list):
        g = d.groupby(["question", "after"]).p_reflect.agg(["sum", "count"]).unstack("after").reindex(universe)
        g = g.fillna(0.0)
        self.pos = {q: i for i, q in enumerate(universe)}

        def col(stat: str, after: str) -> np.ndarray:
            return g[(stat, after)].to_numpy(float) if (stat, after) in g.columns else np.zeros(len(g))

        self.s_right, self.n_right = col("sum", "right"), col("count", "right")
        self.s_wrong, self.n_wrong = col("sum", "wrong"), col("count", "wrong")

    def after(self, questions: list) -> tuple[float, float]:
        """Mean reflection probability after right and after wrong steps over the questions."""
        idx = np.fromiter((self.pos[q] for q in questions), dtype=int, count=len(questions))
        nr, nw = self.n_right[idx].sum(), self.n_wrong[idx].sum()
        right = self.s_right[idx].sum() / nr if nr else math.nan
        wrong = self.s_wrong[idx].sum() / nw if nw else math.nan
        return right, wrong

    def selectivity(self, questions: list) -> float:
        right, wrong = self.after(questions)
        return wrong - right


def _reflection(base: dict, path: Path) -> Claim:
    """How much more the SCOUT-trained teacher than the initial one reflects after the student's
    wrong steps than after its right ones (probability points; per trained teacher, over them)."""
    d = pd.read_csv(path)
    judged = "step" if (d.judged == "step").any() else "response"
    d = d[d.judged == judged]
    universe = sorted(d.question.unique())
    initial = d[d.teacher == "initial"]
    trained = d[d.teacher == "scout"]
    seeds = sorted(trained.seed.unique())
    if initial.empty or not seeds:
        return _unmeasured(base, "no initial and SCOUT-trained teachers' reflection probabilities on this setting")
    if not ((d.after == "wrong").any() and (d.after == "right").any()):
        return _unmeasured(base, "the initial student's responses hold no wrong (or no right) step to compare")
    t0 = _Selectivity(initial, universe)
    per_seed = {seed: _Selectivity(trained[trained.seed == seed], universe) for seed in seeds}
    r0, w0 = t0.after(universe)
    after = [per_seed[seed].after(universe) for seed in seeds]
    r1, w1 = float(np.mean([a[0] for a in after])), float(np.mean([a[1] for a in after]))
    what = "steps" if judged == "step" else "paragraphs of right / wrong responses"
    stat = (f"P(reflection) after right / wrong {what}: initial {100 * r0:.1f} / {100 * w0:.1f}, "
            f"SCOUT {100 * r1:.1f} / {100 * w1:.1f} ({len(seeds)} seeds, {len(universe)} questions)")  # fmt: skip
    used = [f"{path}: initial teacher"] + [f"{path}: scout s{s}" for s in seeds]
    arms = {"SCOUT": {seed: _minus(per_seed[seed].selectivity, t0.selectivity) for seed in seeds}}
    return _over_teachers({**base, "unit": TEACHER_UNIT}, arms, {}, universe, stat, used)


_PROBE_FILES = {"entropy_gap": "entropy_responses.csv", "reflection_selective": "reflection.csv"}
PROBES = ("continuation_falls", "below_own", "entropy_gap", "teacher_improves", "teacher_beats_control",
          "teacher_on_par", "reflection_selective")  # fmt: skip


def all_claims(cache: Cache, analysis_dir: str | Path, alpha: float) -> list[Claim]:
    """Every claim (the paper's, then the config's), per setting where it is made, with the page's
    verdicts at family-wise level ``alpha`` (:func:`family`)."""
    a = Path(analysis_dir)
    out = []
    g = cache.grid
    for spec in specs(g):
        kind = spec["kind"]
        if kind in PROBES:
            probed = g.analysis.settings
            if "experiment" in spec or "settings" in spec:  # a claim of one experiment's probes
                probed = [s for s in probed if s in _settings(g, spec)]
            out += [_probe(cache, spec, setting, a) for setting in probed]
        elif kind in ("sweep_sparse", "sweep_dense"):
            out += [_sweep(cache, spec, s) for s in _settings(g, spec)]
        else:
            out += [_compare(cache, spec, s, spec["variant"], spec["baseline"]) for s in _settings(g, spec)]
    out.sort(key=lambda c: c.family != PRIMARY)  # the headline comparisons lead the page
    return family(out, alpha)
