"""The page's verdicts: how a claim's interval becomes its verdict, the families of tests and their
levels, and a claim's record (``scout.claims`` measures the rows).

The page counts its own tests, in two families. The *primary* family holds the paper's headline
comparisons on the settings that can test them (config ``report.primary``: claim ids and settings);
every other row is *secondary*. Within each family, so that the chance of *any* wrong verdict in it
is at most the report's alpha (Bonferroni), every row is tested at L = alpha / m (m measured rows of
its family): its interval is two-sided at 1 - 2L, each end a one-sided bound at L, and its p is shown
adjusted for the family (statsmodels' Bonferroni). With both families the page as a whole holds at
most the sum of their alphas. A row's verdict can then be wrong only on the side where the truth
lies. For ``beats`` rows, in the paper's direction (a claim whose paper effect is negative is tested
that way round, and its claim says so):

- *holds*: the lower bound is above 0, and the interval reaches the paper's effect (holds it or lies
  above it; or there is none);
- *holds, smaller than the paper's*: the lower bound is above 0 and the upper one below the paper's
  effect: a gain, but not one as large as the paper's;
- *below the paper's effect*: 0 < upper bound < the paper's effect, lower bound <= 0: the run
  excludes an effect as large as the paper's, not a smaller gain;
- *does not hold*: the upper bound is below 0: the run excludes any gain;
- *inconclusive*: the bounds hold both 0 and the paper's effect;
- *not measured*, with why (among the reasons: no spread at all between the seeds, or questions,
  which leaves the test's error unknown rather than zero).

``on_par`` rows are an equivalence test (TOST) at a margin, the setting's SCOUT-over-OPD effect in the
paper unless the claim gives its own: *holds* when both bounds lie within the margin, *does not hold*
only when the wider (1 - L) interval lies wholly outside it, otherwise *inconclusive*. The wider one
because a truth inside a narrow margin sits near both of its edges, so either end of the interval
could cross wrongly: at L / 2 each, the verdict is wrong with chance at most L.

Each row gives the smallest effect its test detects with 80% power at its level and the measured
spread (the noncentral t; for ``on_par`` rows the narrowest margin TOST shows when the arms are
equal); where the paper's effect (or the margin) is smaller, this grid cannot resolve it, and the row
says how many seeds would, at the measured spread.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from scout import stats
from scout.stats import (
    POWER,
    bounds,
    detectable,
    equivalence_detectable,
    equivalence_power,
    one_sided_p,
    t_power,
    tost_p,
)

HOLDS, SMALLER, BELOW, FAILS = "holds", "holds, smaller than the paper's", "below the paper's effect", "does not hold"
INCONCLUSIVE, UNMEASURED = "inconclusive", "not measured"
VERDICTS = (HOLDS, SMALLER, BELOW, FAILS, INCONCLUSIVE, UNMEASURED)
SEEDS_UNIT = "training seed"
PRIMARY, SECONDARY = "primary", "secondary"
PAIRED, WELCH = "paired t over seeds", "Welch t on run-level Avg"
QUESTION_UNIT = "question (responses, continuations nested)"
TEACHER_UNIT = "trained teacher (its seed), questions nested"


@dataclass(frozen=True)
class Claim:
    claim: str
    setting: str
    statistic: str
    test: str
    effect: float  # points (or nats), as measured: the claim's variant minus its baseline
    low: float  # the two-sided (1 - 2 level) interval: each end a one-sided bound at the row's level
    high: float
    paper: float | None  # the paper's own effect for this claim and setting, where it gives one
    verdict: str
    unit: str = ""
    why: str = ""
    used: list = field(default_factory=list)  # the runs or probe rows behind the numbers
    id: str = ""
    se: float = math.nan  # standard error of the effect
    df: float = math.inf  # its degrees of freedom (inf: a normal approximation)
    kind: str = "beats"  # beats | on_par
    margin: float | None = None  # on_par: the difference within which the two count as on a par
    level: float = math.nan  # the one-sided level each bound is at: the family's alpha over its tests
    p: float = math.nan  # one-sided p in the paper's direction (on_par: TOST's), before the correction
    p_adj: float = math.nan  # p adjusted for the row's family (Bonferroni)
    detectable: float = math.nan  # smallest effect found with POWER at the level (on_par: margin shown)
    power: float = math.nan  # the test's power at the paper's effect (on_par: TOST's at the margin)
    needed: float = math.nan  # seeds (pairs, or runs per arm) that would detect the paper's effect
    n: int = 0  # pairs, or seeds per arm (the smaller), behind a seed-level test
    design: str = ""  # paired | welch | one_evaluation | seeds | questions
    direction: int = 1  # -1 where the paper's effect is negative: the claim is tested that way
    note: str = ""  # what the page adds under the verdict (what the bounds exclude, seeds needed)
    failed: int = 0  # bootstrap draws whose statistic was undefined (left out)
    family: str = SECONDARY  # primary: the paper's headline comparisons (config report.primary)
    floor: float = math.nan  # one_evaluation: the evaluation's standard error, which more seeds do not shrink
    welch_effect: float = math.nan  # a paired row's Welch test over every run, shown beside it
    welch_se: float = math.nan
    welch_df: float = math.nan
    welch_low: float = math.nan
    welch_high: float = math.nan
    welch_p: float = math.nan
    where: str = ""  # the paper's table or figure the claim is read from
    arms: tuple = ()  # run-level rows: ((label, [Avg of each run, points]), (baseline label, [...]))

    @property
    def measured(self) -> bool:
        """An effect with a spread to test it against: a standard error of exactly 0 (every seed, or
        question, giving the same difference) leaves the error unknown, not zero."""
        return not math.isnan(self.effect) and self.se > 0

    @property
    def target(self) -> float | None:
        """What the row must resolve: the margin of an on-a-par row, the paper's effect otherwise."""
        return self.margin if self.kind == "on_par" else (None if self.paper is None else abs(self.paper))

    @property
    def resolvable(self) -> bool:
        """Whether the paper's effect (an on-a-par row's margin) is at least what the test detects."""
        return self.target is None or math.isnan(self.detectable) or self.target >= self.detectable


def verdict(effect: float, low: float, high: float, paper: float | None, kind: str = "beats",
            margin: float | None = None, direction: int = 1, outer: tuple[float, float] | None = None) -> str:  # fmt: skip
    """The verdict from the interval (see the module docstring). ``direction`` -1 tests a claim
    whose paper effect is negative in that direction; ``outer``, an on-a-par row's (1 - L) interval,
    decides "does not hold" (the interval itself where not given)."""
    if any(math.isnan(v) for v in (effect, low, high)):
        return UNMEASURED
    if kind == "on_par":
        if margin is None:
            return UNMEASURED
        if -margin < low and high < margin:
            return HOLDS
        out_low, out_high = outer or (low, high)
        return FAILS if (out_low >= margin or out_high <= -margin) else INCONCLUSIVE
    if direction < 0:
        low, high = -high, -low
        paper = None if paper is None else -paper
    if low > 0:
        return SMALLER if paper is not None and paper > 0 and high < paper else HOLDS
    if high < 0:
        return FAILS
    if paper is not None and paper > 0 and high < paper:
        return BELOW
    return INCONCLUSIVE


def _note(c: Claim) -> str:
    """What the row adds under its verdict: what an inconclusive row without a paper effect
    excludes, and the seeds that would resolve the paper's effect (an on-a-par row: the margin it can
    show at best) where this grid cannot. (A row tested in the paper's negative direction says so in
    its claim.)"""
    parts = []
    if c.verdict == INCONCLUSIVE and c.kind == "beats" and c.paper is None and c.high > 0:
        parts.append(f"a gain above {_num(c.high, c)} is excluded")
    if not c.resolvable and c.verdict not in (HOLDS, SMALLER) and c.n:
        unit = {"paired": "pairs", "welch": "seeds a side"}.get(c.design, "seeds")
        if c.kind == "on_par":
            parts.append(f"{c.n} {unit} can show the two on a par within \u00b1{c.detectable:.1f} at best (80% power), "
                         f"not within the claim's \u00b1{c.margin:.1f}")  # fmt: skip
        else:
            more = (f"; about {c.needed:.0f} would detect the paper's {c.target:.1f} at the measured spread"
                    if c.needed == c.needed else "")  # fmt: skip
            if _floor(c) and t_power(c.target / _floor(c), math.inf, c.level) < POWER:
                more = (f"; no number of seeds would detect the paper's {c.target:.1f}: the one evaluation "
                        f"compared with has an error of {_floor(c):.1f} itself")  # fmt: skip
            parts.append(f"{c.n} {unit} detect {c.detectable:.1f}{more}")
    return "; ".join(parts)


def _no_spread(c: Claim) -> str:
    """Why a row with an effect but a standard error of 0 is not tested."""
    if c.se != 0 or math.isnan(c.effect):
        return ""
    unit = {SEEDS_UNIT: "seed", QUESTION_UNIT: "question", TEACHER_UNIT: "trained teacher"}.get(c.unit, "unit")
    return (f"no spread: every {unit} gives the same difference ({_num(c.effect, c)}), so the test's error is "
            "unknown, not zero (identical runs may also mean the seeds did not take effect)")  # fmt: skip


def _num(x: float, c: Claim) -> str:
    """A number as the row's effect is shown: three decimals for a small probe effect (nats)."""
    return f"{x:+.1f}" if abs(c.effect) >= 0.1 or c.unit == SEEDS_UNIT else f"{x:+.3f}"


def _sd(c: Claim) -> float:
    """The measured spread behind a seed-level row: of the pairs' differences, of each arm's runs
    (Welch, at equal seeds), or of the runs against one evaluation (its own error taken out)."""
    if not c.n or math.isnan(c.se):
        return math.nan
    if c.design == "one_evaluation":
        return math.sqrt(c.n * max(c.se**2 - _floor(c) ** 2, 0.0))
    return c.se * math.sqrt(c.n / 2 if c.design == "welch" else c.n)


def _floor(c: Claim) -> float:
    return 0.0 if math.isnan(c.floor) else c.floor


def family(found: list[Claim], alpha: float) -> list[Claim]:
    """The page's verdicts: within each family, every measured row tested at alpha / m (m measured
    rows of the family), with its interval, p (adjusted for the family), detectable effect and
    power at that level (and a paired row's Welch interval and p at the same level)."""
    m = {f: sum(c.measured and c.family == f for c in found) for f in (PRIMARY, SECONDARY)}
    out = []
    for c in found:
        if not c.measured:
            out.append(replace(c, verdict=UNMEASURED, why=c.why or _no_spread(c)))
            continue
        level = alpha / m[c.family]
        low, high = bounds(c.effect, c.se, c.df, level)
        d = c.direction
        extra, outer = {}, None
        if not math.isnan(c.welch_se):
            # centred on the difference of all runs' means, which differs from the paired effect
            # where only some seeds pair
            w_low, w_high = bounds(c.welch_effect, c.welch_se, c.welch_df, level)
            w_p = one_sided_p(d * c.welch_effect, c.welch_se, c.welch_df)
            extra = dict(welch_low=w_low, welch_high=w_high, welch_p=w_p)
        if c.kind == "on_par":
            margin = c.margin if c.margin is not None else math.nan
            p = tost_p(c.effect, c.se, c.df, margin) if c.margin is not None else math.nan
            found_at = equivalence_detectable(c.se, c.df, level)
            power = equivalence_power(margin, c.se, c.df, level) if c.margin is not None else math.nan
            needed = math.nan
            outer = bounds(c.effect, c.se, c.df, level / 2)
        else:
            p = one_sided_p(d * c.effect, c.se, c.df)
            found_at = detectable(c.se, c.df, level)
            power = t_power(abs(c.paper) / c.se, c.df, level) if c.paper and c.se > 0 else math.nan
            needed = (stats.seeds_needed(abs(c.paper), _sd(c), level, paired=c.design != "welch", floor=_floor(c))
                      if c.paper and c.design in ("paired", "welch", "one_evaluation") else math.nan)  # fmt: skip
        row = replace(c, low=low, high=high, level=level, p=p, detectable=found_at, power=power, needed=needed,
                      verdict=verdict(c.effect, low, high, c.paper, c.kind, c.margin, d, outer), **extra)  # fmt: skip
        out.append(replace(row, note=_note(row)))
    for name in (PRIMARY, SECONDARY):  # each family's p-values adjusted together
        idx = [i for i, c in enumerate(out) if c.family == name and c.measured]
        for i, p in zip(idx, stats.adjusted([out[i].p for i in idx]), strict=True):
            out[i] = replace(out[i], p_adj=p)
    return out


def page_summary(found: list[Claim], alpha: float) -> dict:
    """What the page says about itself: how many tests, per family at which per-test level, the
    page-wide chance of a wrong verdict, and how many rows cannot resolve the paper's effect."""
    measured = [c for c in found if c.measured]
    families = []
    for name in (PRIMARY, SECONDARY):
        rows = [c for c in measured if c.family == name]
        if rows:
            families.append({"name": name, "tests": len(rows), "level": alpha / len(rows),
                             "unresolvable": sum(not c.resolvable for c in rows)})  # fmt: skip
    return {"tests": len(measured), "alpha": alpha, "families": families,
            "level": alpha / len(measured) if measured and len(families) == 1 else None,
            "page_alpha": alpha * len(families),
            "unresolvable": sum(not c.resolvable for c in measured), "power": POWER}  # fmt: skip


_FLOATS = ("effect", "low", "high", "se", "df", "level", "p", "p_adj", "detectable", "power", "needed", "floor",
           "welch_effect", "welch_se", "welch_df", "welch_low", "welch_high", "welch_p")  # fmt: skip


def as_records(claims: list[Claim]) -> list[dict]:
    """JSON-ready rows for the manifest (NaN and infinity as null)."""

    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return [{k: clean(v) for k, v in asdict(c).items()} for c in claims]


def from_records(rows: list[dict]) -> list[Claim]:
    """The claims back from the manifest's rows (null as NaN; a null df as the normal's infinity)."""
    out = []
    for r in rows:
        floats = {k: (math.inf if k == "df" else math.nan) for k in _FLOATS if k in r and r[k] is None}
        out.append(Claim(**{**r, **floats}))
    return out


def summary(claims: list[Claim]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
