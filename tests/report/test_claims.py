"""The claims page: its statistics against hand-worked values, its verdicts on caches built to
order, the page's family-wise correction, the probe claims recomputed by hand, and the paper's own
per-run numbers."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.stats.multitest as sm_mt
import statsmodels.stats.power as sm_power
import statsmodels.stats.weightstats as sm_ws
import yaml
from rliable import metrics as rly_metrics
from scipy import stats as sps

from scout import claims, results, stats, verdicts
from scout.grid import Grid
from scout.paths import Paths
from scout.verdicts import BELOW, FAILS, HOLDS, INCONCLUSIVE, SMALLER, UNMEASURED
from tests.support.toy import REPO, toy_config


def test_welch_by_hand():
    # x = (3, 4, 5), y = (1, 2, 3): diff 2, var/n 1/3 each, se = sqrt(2/3) = 0.8165, df = 4;
    # t(0.9, 4) = 1.5332: bounds at 0.1 are 2 -/+ 1.2518
    diff, se, df = claims.welch([3, 4, 5], [1, 2, 3])
    assert diff == 2 and se == pytest.approx(0.81650, abs=1e-5) and df == pytest.approx(4)
    low, high = stats.bounds(diff, se, df, 0.1)
    assert low == pytest.approx(0.74818, abs=1e-4) and high == pytest.approx(3.25182, abs=1e-4)
    assert all(math.isnan(v) for v in claims.welch([3], [1, 2]))


def test_against_one_evaluation_by_hand():
    # runs (0.5, 0.6, 0.7) against 0.3 with SEM 0.05: diff 0.3; se = sqrt(0.01 / 3 + 0.0025) = 0.07638,
    # df 2; t(0.9, 2) = 1.8856: bounds at 0.1 are 0.3 -/+ 0.14402
    diff, se, df = stats.against_one_evaluation([0.5, 0.6, 0.7], 0.3, 0.05)
    assert diff == pytest.approx(0.3) and se == pytest.approx(0.07638, abs=1e-5) and df == 2
    low, high = stats.bounds(diff, se, df, 0.1)
    assert low == pytest.approx(0.15598, abs=1e-4) and high == pytest.approx(0.44402, abs=1e-4)


def test_the_detectable_effect_is_the_noncentral_t():
    """The smallest effect found with 80% power: at infinite df by hand, (z(0.9) + z(0.8)) x se =
    (1.2816 + 0.8416) x 1 = 2.1232; at 4 df the effect statsmodels' TTestPower solves for, and at
    2 df and the secondary level (0.1/23) one at which scipy's noncentral t has exactly 80% power,
    where the central-t sum t(1 - L) + t(0.8) left it at 0.70 (16% short)."""
    assert stats.detectable(1.0, math.inf, 0.1) == pytest.approx(2.1232, abs=1e-4)
    # a paired design of 5 pairs spreading sd 1.8: se = 1.8 / sqrt(5), 4 df
    d = sm_power.TTestPower().solve_power(nobs=5, alpha=0.1, power=0.8, alternative="larger")
    assert stats.detectable(1.8 / math.sqrt(5), 4, 0.1) == pytest.approx(d * 1.8, rel=1e-6)
    level = 0.1 / 23
    found = stats.detectable(1.0, 2, level)
    assert float(sps.nct.sf(sps.t.ppf(1 - level, 2), 2, found)) == pytest.approx(0.8, abs=1e-6)
    central = float(sps.t.ppf(1 - level, 2) + sps.t.ppf(0.8, 2))
    assert central / found == pytest.approx(0.862, abs=1e-3)
    assert stats.t_power(central, 2, level) == pytest.approx(0.698, abs=1e-3)
    # an effect of 1.5332 x se on 4 df sits exactly at the 0.1 quantile: p = 0.1
    assert stats.one_sided_p(1.5332 * 0.8165, 0.8165, 4) == pytest.approx(0.1, abs=1e-4)
    assert stats.one_sided_p(1.0, 0.0, 4) == 0.0 and stats.one_sided_p(-1.0, 0.0, 4) == 1.0


def test_tost_matches_statsmodels_and_its_power_the_normal_by_hand():
    """TOST's p (the larger one-sided p) equals statsmodels' ttost_paired on pairs and ttost_ind
    (Welch) on two arms; its power at infinite df is 2 Phi(M / se - z(1 - L)) - 1 by hand, so the
    narrowest margin shown with 80% power at 0.05 is (z(0.95) + z(0.9)) se = 2.9264 se."""
    x, y = [60.1, 62.3, 61.0, 63.4, 60.8], [59.7, 62.9, 60.1, 62.2, 61.5]
    effect, se, df = stats.paired(x, y)
    assert stats.tost_p(effect, se, df, 2.0) == pytest.approx(sm_ws.ttost_paired(np.array(x), np.array(y), -2.0, 2.0)[0])
    a, b = [70.2, 68.1, 73.5], [69.0, 71.8, 70.4, 72.9]
    effect, se, df = stats.welch_se(a, b)
    ref = sm_ws.ttost_ind(np.array(a), np.array(b), -3.0, 3.0, usevar="unequal")[0]
    assert stats.tost_p(effect, se, df, 3.0) == pytest.approx(ref)
    z = sps.norm.ppf(0.95)
    assert stats.equivalence_power(3.0, 1.0, math.inf, 0.05) == pytest.approx(2 * sps.norm.cdf(3.0 - z) - 1)
    assert stats.equivalence_detectable(1.0, math.inf, 0.05) == pytest.approx(1.6449 + 1.2816, abs=1e-4)
    # far from equivalence: no power; a margin the interval cannot reach: the larger p near 1
    assert stats.equivalence_power(0.5, 1.0, 4, 0.05) == 0.0
    assert stats.tost_p(5.0, 1.0, 4, 1.0) > 0.9


def test_adjusted_p_and_seeds_needed_by_hand_and_statsmodels():
    # Bonferroni over the two measured rows: 0.01 x 2, 0.04 x 2; a row not measured stays out
    assert stats.adjusted([0.01, math.nan, 0.04]) == pytest.approx([0.02, math.nan, 0.08], nan_ok=True)
    assert stats.adjusted([0.3, 0.7]) == pytest.approx(list(sm_mt.multipletests([0.3, 0.7], method="bonferroni")[1]))
    # an effect of one SD at 0.05, one-sided: 7 pairs give 0.754 power and 8 give 0.815 (scipy's nct)
    assert stats.seeds_needed(1.0, 1.0, 0.05) == 8
    assert sps.nct.sf(sps.t.ppf(0.95, 6), 6, math.sqrt(7)) < 0.8 < sps.nct.sf(sps.t.ppf(0.95, 7), 7, math.sqrt(8))
    assert stats.seeds_needed(1.0, 1.0, 0.05, paired=False) == 14  # two arms: twice the variance, per arm
    assert math.isnan(stats.seeds_needed(-1.0, 1.0, 0.05)) and math.isnan(stats.seeds_needed(1.0, math.nan, 0.05))


def test_seeds_needed_against_one_evaluation_count_its_fixed_error():
    """Runs against one evaluation: se(n)^2 = sd^2 / n + SEM^2, and more seeds shrink only the first
    part. sd 4, SEM 1, effect 3 at 0.05: scipy's noncentral t gives 0.7984 power at 39 seeds and
    0.8013 at 40. With sd 1, SEM 1, effect 1.5 at 0.1, even infinitely many leave 1.5 SEs, 0.59
    power: none would do, and the row says so rather than a number that never gets there."""

    def power(n, effect, sd, sem, level):
        df = n - 1
        return sps.nct.sf(sps.t.ppf(1 - level, df), df, effect / math.sqrt(sd**2 / n + sem**2))

    assert power(39, 3, 4, 1, 0.05) < 0.8 < power(40, 3, 4, 1, 0.05)
    assert stats.seeds_needed(3.0, 4.0, 0.05, floor=1.0) == 40
    assert math.isnan(stats.seeds_needed(1.5, 1.0, 0.1, floor=1.0))
    row = replace(_raw(1.0, math.sqrt(1 / 3 + 1), df=2, paper=1.5), n=3, design="one_evaluation", floor=1.0)
    (c,) = verdicts.family([row], 0.1)
    assert math.isnan(c.needed) and not c.resolvable
    assert "no number of seeds would detect the paper's 1.5: the one evaluation compared with has an error of 1.0" in c.note


@pytest.mark.parametrize(
    "bounds, paper, kind, margin, direction, expected",
    [
        ((2.0, 0.5, 3.5), 2.2, "beats", None, 1, HOLDS),  # above 0, the paper's effect inside
        ((1.0, 0.3, 1.7), 2.2, "beats", None, 1, SMALLER),  # above 0, and it excludes the paper's 2.2
        ((-1.1, -4.2, 1.9), 2.6, "beats", None, 1, BELOW),  # excludes the paper's +2.6, not a smaller gain
        ((-5.2, -9.1, -1.3), 2.6, "beats", None, 1, FAILS),  # excludes any gain
        ((1.0, -0.5, 2.5), 2.2, "beats", None, 1, INCONCLUSIVE),  # 0 and 2.2 both inside
        ((-1.0, -2.0, -0.5), None, "beats", None, 1, FAILS),  # no paper number: significantly the wrong way
        ((-1.0, -3.0, 0.5), None, "beats", None, 1, INCONCLUSIVE),  # no paper number, 0 inside
        ((-20.0, -25.0, -15.0), -22.8, "beats", None, -1, HOLDS),  # the paper's negative effect, its way round
        ((-5.0, -7.0, -3.0), -22.8, "beats", None, -1, SMALLER),
        ((4.0, 1.0, 7.0), -22.8, "beats", None, -1, FAILS),
        ((0.3, -0.5, 1.0), -0.2, "on_par", 2.6, 1, HOLDS),  # within 2.6 of zero
        ((4.0, 3.0, 5.0), -0.2, "on_par", 2.6, 1, FAILS),  # wholly beyond the margin
        ((-8.0, -14.3, -1.8), None, "on_par", 2.2, 1, INCONCLUSIVE),  # apart from 0, but -1.8 is within the margin
        ((1.0, -1.0, 3.0), -0.2, "on_par", 2.6, 1, INCONCLUSIVE),
        ((0.0, -0.1, 0.1), None, "on_par", None, 1, UNMEASURED),  # no margin to test within
        ((math.nan, math.nan, math.nan), 2.2, "beats", None, 1, UNMEASURED),
    ],
)
def test_the_verdicts(bounds, paper, kind, margin, direction, expected):
    assert verdicts.verdict(*bounds, paper, kind, margin, direction) == expected


def test_an_on_par_row_fails_only_where_its_wider_interval_lies_beyond_the_margin():
    """On a par within 0.4, an effect of 1.5 with se 0.5 on 4 df, the row's level 0.05: its 90%
    interval, 1.5 -/+ t(0.95, 4) = 2.1318 x 0.5 = [0.434, 2.566], lies beyond the margin, but a truth
    inside a margin this narrow is near both of its edges, so either end could cross wrongly: "does
    not hold" needs the 95% interval, 1.5 -/+ 2.7764 x 0.5 = [0.112, 2.888], beyond it, and it is not.
    At 1.8 both are beyond: [0.412, 3.188]."""
    def row(effect):
        return replace(_raw(effect, 0.5), kind="on_par", margin=0.4)

    (near,) = verdicts.family([row(1.5)], 0.05)
    assert near.low == pytest.approx(0.43408, abs=1e-4) and near.low > near.margin
    assert near.verdict == INCONCLUSIVE
    assert verdicts.family([row(1.8)], 0.05)[0].verdict == FAILS
    assert verdicts.verdict(1.5, 0.434, 2.566, None, "on_par", 0.4, outer=(0.112, 2.888)) == INCONCLUSIVE


def test_the_question_bootstrap_counts_what_it_leaves_out():
    # every cluster the same value: no spread; the mean of 20 values of 0 and 1: sqrt(0.25 / 20) = 0.112
    b = stats.cluster_bootstrap(lambda q: float(sum(q)) / len(q), [2.0] * 5)
    assert (b.effect, b.se, b.df, b.failed) == (2.0, 0.0, 4.0, 0)
    b = stats.cluster_bootstrap(lambda q: sum(q) / len(q), [0.0, 1.0] * 10)
    assert b.effect == 0.5 and b.se == pytest.approx(0.112, abs=0.01) and b.df == 19
    assert stats.cluster_bootstrap(lambda q: sum(q) / len(q), [0.0, 1.0] * 10) == b  # the same draws again
    # undefined without the one cluster "a": a draw of 20 misses it with probability 0.95^20 = 0.358
    b = stats.cluster_bootstrap(lambda q: 1.0 if "a" in q else math.nan, ["a"] + ["b"] * 19)
    assert b.failed == pytest.approx(0.358 * stats.BOOTSTRAP, rel=0.1) and b.se == 0.0


def test_trained_teachers_are_tested_over_their_seeds():
    """A per-teacher statistic that every question gives alike has no question variance: the test is
    scipy's t over the seeds (one arm) and Welch's across two arms, to the digit."""
    qs = list(range(30))

    def const(v):
        return lambda q: v

    one = stats.over_seeds({"scout": {1: const(3.1), 2: const(1.2), 3: const(5.0)}}, qs)
    ref = sps.ttest_1samp([3.1, 1.2, 5.0], 0.0)
    assert one.effect / one.se == pytest.approx(ref.statistic) and one.df == pytest.approx(2)
    two = stats.over_seeds({"a": {1: const(80.7), 2: const(79.8), 3: const(87.2)},
                            "b": {1: const(91.1), 2: const(89.1), 3: const(91.6)}}, qs, {"a": 1, "b": -1})  # fmt: skip
    ref = sps.ttest_ind([80.7, 79.8, 87.2], [91.1, 89.1, 91.6], equal_var=False)
    assert two.effect / two.se == pytest.approx(ref.statistic) and two.df == pytest.approx(ref.df)
    # the LoRA row of issue 56 at a level of 0.1/31: the interval is scipy's, [-30.0, +14.0] where the
    # page had put [-14.3, -1.8]
    low, high = stats.bounds(two.effect, two.se, two.df, 0.1 / 31)
    assert (low, high) == pytest.approx(tuple(ref.confidence_interval(1 - 2 * 0.1 / 31)))
    assert (round(low, 1), round(high, 1)) == (-30.0, 14.0)
    assert math.isnan(stats.over_seeds({"a": {1: const(1.0)}}, qs).se)  # one trained teacher: no test


def test_the_questions_the_seeds_share_are_added_once():
    """Three seeds each the mean of the same 20 questions of 0 and 1 plus its own offset: the seeds
    spread var(offsets) / 3 = 1/3, the shared questions add var(a bootstrap mean) = 0.25 / 20 x 19 / 20
    = 0.0119 once (not once per seed, nor the diagonal's own sampling again)."""
    values = [0.0, 1.0] * 10

    def seed(offset):
        return lambda q: sum(values[i] for i in q) / len(q) + offset

    b = stats.over_seeds({"scout": {1: seed(0.0), 2: seed(1.0), 3: seed(2.0)}}, range(20))
    assert b.effect == pytest.approx(1.5) and b.se**2 == pytest.approx(1 / 3 + 0.0119, abs=0.002)
    # two arms over the same questions: the shared part cancels in their difference
    b = stats.over_seeds({"x": {1: seed(0.0), 2: seed(1.0)}, "y": {1: seed(0.5), 2: seed(0.7)}}, range(20),
                         {"x": 1, "y": -1})  # fmt: skip
    assert b.se**2 == pytest.approx(0.25 + 0.01, abs=1e-9)


def test_the_probability_of_improvement_is_rliables():
    """rliable's metric, by hand: x = (1, 2, 3) against y = (0, 2, 2.5) wins 5 of 9 pairs and ties
    one: 5.5 / 9 = 0.611; averaged with a task x wins outright (1.0). Against rliable on a grid of
    equal runs per task, and its vectorised form on a draw of runs."""
    imp = stats.probability_of_improvement({"a": [1, 2, 3], "b": [5, 6]}, {"a": [0, 2, 2.5], "b": [1, 2]})
    assert imp.tasks == pytest.approx({"a": 5.5 / 9, "b": 1.0}) and imp.point == pytest.approx((5.5 / 9 + 1) / 2)
    assert imp.low <= imp.point <= imp.high and imp.high == 1.0
    rng = np.random.default_rng(3)
    x, y = rng.normal(1, 1, (5, 3)), rng.normal(0, 1, (4, 3))
    tasks = {t: list(x[:, t]) for t in range(3)}, {t: list(y[:, t]) for t in range(3)}
    assert stats.probability_of_improvement(*tasks).point == pytest.approx(rly_metrics.probability_of_improvement(x, y))
    vector = stats._improvement(*[x[None, :, t] for t in range(3)], *[y[None, :, t] for t in range(3)])
    assert vector[0] == pytest.approx(rly_metrics.probability_of_improvement(x, y))
    same = stats.probability_of_improvement({"a": [1.0, 2.0]}, {"a": [1.0, 2.0]})
    assert same.point == 0.5 and same.low < 0.5 < same.high


def test_a_single_run_on_one_setting_is_held_fixed_in_the_bootstrap():
    """One arm with one run on a setting (a seed still training or failed) while the others have
    more: that run resamples to itself, so the interval comes from the rest, not an error. Task b's
    lone x = 50 loses to both y runs whatever is drawn: 0 in every draw; task a's draws vary."""
    imp = stats.probability_of_improvement({"a": [60, 63, 61], "b": [50]}, {"a": [58, 60, 60], "b": [52, 51]})
    assert imp.tasks == pytest.approx({"a": 8 / 9, "b": 0.0}) and imp.point == pytest.approx(4 / 9)
    # task a's probability over draws lies in [0, 1], so the average in [0, 0.5]
    assert 0.0 <= imp.low < imp.point <= imp.high <= 0.5
    alone = stats.probability_of_improvement({"a": [1.0], "b": [2.0]}, {"a": [0.0], "b": [3.0]})
    assert alone.point == 0.5 and math.isnan(alone.low)  # nothing to resample


def _raw(effect, se, df=4.0, paper=None, measured=True):
    return verdicts.Claim("c", "s", "", "", effect if measured else math.nan, math.nan, math.nan, paper, "",
                        se=se if measured else math.nan, df=df)  # fmt: skip


def test_the_page_tests_each_row_at_alpha_over_its_number_of_tests():
    rows = [_raw(2.0, 0.8165), _raw(2.0, 0.8165, paper=9.0), _raw(0.3, 0.1), _raw(0.0, 0.0, measured=False),
            _raw(-3.0, 0.5, paper=2.0), _raw(1.0, 0.8165)]  # fmt: skip
    page = verdicts.family(rows, 0.1)
    # five measured rows at 0.1: each at 0.02, t(0.98, 4) = 2.9985, so 2 -/+ 2.4483
    assert all(c.level == pytest.approx(0.02) for c in page if c.measured)
    assert page[0].low == pytest.approx(2.0 - 2.9985 * 0.8165, abs=1e-3) and page[0].verdict == INCONCLUSIVE
    # alone it would hold at 0.1 (2 - 1.5332 x 0.8165 > 0): the page's correction is what stops it
    assert verdicts.family([rows[0]], 0.1)[0].verdict == HOLDS
    assert page[2].verdict == HOLDS and page[3].verdict == UNMEASURED and page[4].verdict == FAILS
    # detectable at 0.02 with 80% power, as for 5 pairs spreading 0.8165 sqrt(5): statsmodels' 3.277
    # (the central-t sum (2.9985 + 0.9410) x 0.8165 = 3.2166 fell short); the paper's 9.0 is above it
    d = sm_power.TTestPower().solve_power(nobs=5, alpha=0.02, power=0.8, alternative="larger") * 0.8165 * math.sqrt(5)
    assert page[1].detectable == pytest.approx(d, rel=1e-6) and page[1].resolvable
    assert not verdicts.family([_raw(2.0, 0.8165, paper=1.0)], 0.1)[0].resolvable
    summary = verdicts.page_summary(page, 0.1)
    assert summary["tests"] == 5 and summary["level"] == pytest.approx(0.02)


def test_the_paired_difference_by_hand():
    # differences 0.02, 0.03, 0.01, 0.04: mean 0.025, sd sqrt(0.0005 / 3) = 0.012910, se 0.006455, 3 df
    effect, se, df = stats.paired([0.60, 0.63, 0.61, 0.66], [0.58, 0.60, 0.60, 0.62])
    assert effect == pytest.approx(0.025) and se == pytest.approx(0.006455, abs=1e-6) and df == 3
    assert stats.paired([0.6, 0.7], [0.5, 0.6])[1:] == (0.0, math.inf)  # every pair 0.1 apart
    assert all(math.isnan(v) for v in stats.paired([0.6], [0.5]))


def test_each_family_is_tested_at_alpha_over_its_own_number_of_tests():
    """Two primary rows and three secondary ones at 0.1: the primary ones each at 0.05, the others
    each at 0.1 / 3; a paired row's Welch bounds at its own level beside it."""
    prim = [replace(_raw(2.0, 0.8165), family=verdicts.PRIMARY, welch_effect=1.5, welch_se=1.2, welch_df=3.5),
            replace(_raw(1.0, 0.8165), family=verdicts.PRIMARY)]  # fmt: skip
    page = verdicts.family(prim + [_raw(2.0, 0.8165), _raw(0.3, 0.1), _raw(-3.0, 0.5)], 0.1)
    assert [round(c.level, 4) for c in page] == [0.05, 0.05, 0.0333, 0.0333, 0.0333]
    # t(0.95, 4) = 2.1318: 2 - 2.1318 x 0.8165 = 0.2594 > 0 holds in the primary family of two ...
    assert page[0].low == pytest.approx(0.2594, abs=1e-3) and page[0].verdict == HOLDS
    # ... and not among three secondary rows: t(1 - 0.1/3, 4) = 2.6110, 2 - 2.1319 < 0
    assert page[2].verdict == INCONCLUSIVE
    # Welch beside, around its own difference of means: t(0.95, 3.5) = 2.2543 (scipy), 1.5 -/+ 2.7052
    q = float(sps.t.ppf(0.95, 3.5))
    assert page[0].welch_low == pytest.approx(1.5 - q * 1.2) and page[0].welch_high == pytest.approx(1.5 + q * 1.2)
    assert page[0].welch_p == pytest.approx(float(sps.t.sf(1.5 / 1.2, 3.5)))
    assert math.isnan(page[1].welch_low)  # a Welch-decided row has nothing beside it
    summary = verdicts.page_summary(page, 0.1)
    assert [(f["name"], f["tests"]) for f in summary["families"]] == [("primary", 2), ("secondary", 3)]
    assert summary["tests"] == 5 and summary["level"] is None


# ------------------------------------------------------------------------------------------------
# Caches built to order
# ------------------------------------------------------------------------------------------------


def _record(cfg, setting, variant, seed, bench, mean, ckpt="final", sem=0.02):
    out = Path(Paths.of(cfg).eval_dir(setting, variant, seed, ckpt))
    out.mkdir(parents=True, exist_ok=True)
    rec = {"setting": setting, "variant": variant, "method": variant, "seed": seed, "checkpoint": ckpt,
           "benchmark": bench, "mean": mean, "sem": sem, "repeats": 4}  # fmt: skip
    (out / f"{bench}.json").write_text(json.dumps(rec))


@pytest.fixture
def cfg(tmp_path):
    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    return cfg


def _cache(cfg):
    return results.Cache(Grid.of(cfg), results.load(Grid.of(cfg)))


def _runs(cfg, setting, variant, means):
    for seed, mean in enumerate(means, start=1):
        for b in Grid.of(cfg).benchmarks_for(cfg["settings"][setting]["domain"]):
            _record(cfg, setting, variant, seed, b, mean)


def _one(found, claim_id, setting):
    (c,) = [c for c in found if c.id == claim_id and c.setting == setting]
    return c


def test_method_claims_follow_the_numbers(cfg):
    s = "toy-l-s-math"
    for b in ("tm-easy", "tm-hard", "tm-long"):
        _record(cfg, s, "base-student", 0, b, 0.30, sem=0.03)
    _runs(cfg, s, "opd", [0.50, 0.52, 0.51])
    _runs(cfg, s, "scout", [0.60, 0.61, 0.62])  # clearly above OPD
    _runs(cfg, s, "opd_teacher_grpo", [0.40, 0.62, 0.55])  # noisy: SCOUT above it, but not clearly
    _runs(cfg, s, "grpo", [0.35])  # one run
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    opd = _one(found, "opd_improves", s)
    assert opd.verdict == HOLDS and opd.unit == verdicts.SEEDS_UNIT and opd.paper == 17.3  # mirrors q4b-q1.7b-math
    # by hand: diff 21.0 points; se = sqrt(0.0001 / 3 + 0.03^2 / 3) in points = 1.8257, 2 df. Three rows
    # are measured: SCOUT against OPD and against the control are the primary family (the toy
    # config's report.primary), each at 0.1 / 2; this one is the only secondary row, at 0.1:
    # t(0.9, 2) = 1.8856
    assert opd.effect == pytest.approx(21.0) and opd.low == pytest.approx(21.0 - 1.8856 * 1.8257, abs=1e-3)
    assert opd.level == pytest.approx(0.1) and opd.family == verdicts.SECONDARY
    assert _one(found, "scout_beats_opd", s).level == pytest.approx(0.05)
    assert sorted(opd.used)[:3] == [f"{s}/base-student/s0", f"{s}/opd/s1", f"{s}/opd/s2"]
    assert _one(found, "scout_beats_opd", s).verdict == HOLDS
    control = _one(found, "scout_beats_control", s)
    assert control.verdict == INCONCLUSIVE and control.low < 0 < control.paper < control.high
    grpo = _one(found, "grpo_improves", s)
    assert grpo.verdict == UNMEASURED and "the seed is the unit" in grpo.why
    assert _one(found, "scout_beats_opd", "toy-mg-s-math").verdict == UNMEASURED


def test_runs_with_the_same_seeds_are_compared_pair_by_pair(cfg):
    """Four seeds a side: SCOUT's runs each a little above OPD's of the same seed, while the seeds
    spread wide: the paired t finds it, the paper's Welch (beside it) does not. The primary family
    (config report.primary) holds it at 0.1 over its own tests."""
    s = "toy-l-s-math"
    cfg["experiments"]["main"]["seeds"] = [1, 2, 3, 4]
    cfg["report"]["primary"] = {"claims": ["scout_beats_opd"], "settings": [s]}
    _runs(cfg, s, "opd", [0.55, 0.60, 0.60, 0.65])
    _runs(cfg, s, "scout", [0.57, 0.63, 0.61, 0.69])  # 2, 3, 1 and 4 points above OPD's run of the same seed
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    c = _one(found, "scout_beats_opd", s)
    assert c.family == verdicts.PRIMARY and c.level == pytest.approx(0.1) and c.test == "paired t over seeds (4 pairs)"
    # by hand (test_the_paired_difference_by_hand): 2.5 points, se 0.6455, 3 df; t(0.9, 3) = 1.6377
    assert c.effect == pytest.approx(2.5) and c.se == pytest.approx(0.6455, abs=1e-4) and c.df == 3
    assert c.low == pytest.approx(2.5 - 1.6377 * 0.6455, abs=1e-3) and c.verdict == HOLDS
    # Welch: se sqrt((var(scout) + var(opd)) / 4) = sqrt((0.0025 + 0.0016667) / 4) = 3.2275 points,
    # its lower bound below 0 at the same level
    assert c.welch_se == pytest.approx(3.2275, abs=1e-3) and c.welch_low < 0
    assert _one(found, "scout_beats_opd", "toy-l-s-code").family == verdicts.SECONDARY


def test_seeds_that_pair_only_partly_are_compared_on_the_pairs_they_have(cfg):
    """SCOUT seeds 1-2 against OPD seeds 1-3: the two pairs decide (differences 2 and 3 points), the
    Welch test over all five runs beside it; where only one seed pairs, Welch decides."""
    s = "toy-l-s-math"
    _runs(cfg, s, "opd", [0.58, 0.60, 0.60])
    _runs(cfg, s, "scout", [0.60, 0.63])
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "scout_beats_opd", s)
    assert c.test.startswith("paired t over seeds (the 2 seeds both arms have") and c.n == 2
    assert c.effect == pytest.approx(2.5) and c.se == pytest.approx(0.5) and c.df == 1
    assert c.welch_se == pytest.approx(stats.welch_se([60, 63], [58, 60, 60])[1]) and "seeds 1, 2" in c.statistic
    # the Welch test beside it is about all five runs: 61.5 - 59.33 = 2.17 points, not the pairs' 2.5
    assert c.welch_effect == pytest.approx(61.5 - 178 / 3)
    assert (c.welch_low + c.welch_high) / 2 == pytest.approx(c.welch_effect)
    assert c.welch_p == pytest.approx(float(sps.t.sf(c.welch_effect / c.welch_se, c.welch_df)))
    cfg["results"] = str(Path(cfg["results"]).parent / "other")
    cfg["experiments"]["main"]["seeds"] = [1, 2, 3, 4]
    _runs(cfg, s, "opd", [0.58, 0.60, 0.60])
    for seed in (3, 4):  # seeds 3 and 4 of SCOUT: only seed 3 pairs
        for b in Grid.of(cfg).benchmarks_for("math"):
            _record(cfg, s, "scout", seed, b, 0.60 + 0.03 * (seed - 3))
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "scout_beats_opd", s)
    assert c.test == verdicts.WELCH and math.isnan(c.welch_se) and c.statistic == "Avg 61.5 (2 seeds) vs 59.3 (OPD, 3 seeds)"


def test_a_sweep_claim_never_compares_the_main_run_with_itself(cfg):
    """A setting whose own SCOUT interval is the sweep's sparsest f (5 beside 1, 3, 4): the sparse
    claim has no sparser f, so it is not measured (and does not count among the tests); the dense
    claim still compares f = 1 with the main run."""
    s = "toy-mg-s-math"
    cfg["settings"][s]["overrides"] = {"scout": {"interval": 5}}
    for variant, means in (("scout", [0.60, 0.62, 0.61]), ("scout-f1", [0.59, 0.62, 0.60]),
                           ("scout-f3", [0.60, 0.61, 0.61]), ("scout-f4", [0.61, 0.60, 0.62])):  # fmt: skip
        _runs(cfg, s, variant, means)
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    sparse, dense = _one(found, "sweep_sparse", s), _one(found, "sweep_dense", s)
    assert sparse.verdict == UNMEASURED and "(f=5) is the sweep's sparsest f: no sparser f" in sparse.why
    assert dense.measured and dense.statistic.startswith("f=1 vs f=5")


def test_an_evaluation_without_its_error_is_not_measured(cfg):
    """Against the untrained student the evaluation's standard error enters the test: a record
    without one makes the row not measured, rather than a test that takes it as 0."""
    s = "toy-l-s-math"
    for b in ("tm-easy", "tm-hard", "tm-long"):
        _record(cfg, s, "base-student", 0, b, 0.30, sem=None if b == "tm-hard" else 0.03)
    _runs(cfg, s, "opd", [0.50, 0.52, 0.51])
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "opd_improves", s)
    assert c.verdict == UNMEASURED and "no standard error" in c.why


def test_a_claim_whose_paper_effect_is_negative_is_tested_its_way_round(cfg):
    """A user's claim that Prune-OPD beats OPD, where the paper found it 1.0 points below: the run
    finds it 2 points below, clearly, so the claim as the paper measured it holds, and the row says
    which way it was tested; the p is one-sided in that direction."""
    cfg["claims"] = [{"id": "mine", "claim": "Prune-OPD beats OPD", "kind": "beats", "variant": "prune_opd",
                      "baseline": "opd", "experiment": "main", "paper": -1.0}]  # fmt: skip
    s = "toy-l-s-math"
    _runs(cfg, s, "opd", [0.52, 0.54, 0.53])
    _runs(cfg, s, "prune_opd", [0.50, 0.51, 0.52])
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "mine", s)
    assert c.direction == -1 and c.effect == pytest.approx(-2.0) and c.verdict == HOLDS and c.p < 0.05
    # the verdict reads against the claim beside it: "holds" is the reverse the paper found
    assert c.claim == "Prune-OPD beats OPD: the paper finds the reverse here, tested so"
    assert "negative" not in c.note  # said once, in the claim


def test_a_claim_without_a_paper_effect_says_what_it_excludes(cfg):
    cfg["claims"] = [{"id": "mine", "claim": "Prune-OPD beats OPD", "kind": "beats", "variant": "prune_opd",
                      "baseline": "opd", "experiment": "main"}]  # fmt: skip
    s = "toy-l-s-math"
    _runs(cfg, s, "opd", [0.52, 0.54, 0.53])
    _runs(cfg, s, "prune_opd", [0.52, 0.55, 0.53])
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "mine", s)
    assert c.verdict == INCONCLUSIVE and c.note == f"a gain above {c.high:+.1f} is excluded"


def test_scout_below_opd_does_not_hold(cfg):
    s = "toy-l-s-code"
    _runs(cfg, s, "opd", [0.70, 0.71, 0.72])
    _runs(cfg, s, "scout", [0.60, 0.62, 0.62])
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    c = _one(found, "scout_beats_opd", s)
    assert c.verdict == FAILS and c.high < 0 < c.paper == 3.1  # q4b-q1.7b-code's +3.1: no gain at all


def test_seeds_that_all_differ_alike_leave_the_row_unmeasured(cfg):
    """Every seed of Prune-OPD exactly 3 points above OPD's: the pairs' spread is 0, which says the
    error is unknown (three seeds can agree by chance, or a seed may not have taken effect), not
    that the gain is certain. The row is not measured, says why, and is not one of the tests."""
    cfg["claims"] = [{"id": "mine", "claim": "Prune-OPD beats OPD", "kind": "beats", "variant": "prune_opd",
                      "baseline": "opd", "experiment": "main", "paper": 1.0}]  # fmt: skip
    s = "toy-l-s-math"
    _runs(cfg, s, "opd", [0.50, 0.52, 0.51])
    _runs(cfg, s, "prune_opd", [0.53, 0.55, 0.54])
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    c = _one(found, "mine", s)
    assert c.effect == pytest.approx(3.0) and c.se == 0 and c.verdict == UNMEASURED
    assert c.why.startswith("no spread: every seed gives the same difference (+3.0)")
    assert verdicts.page_summary(found, 0.1)["tests"] == sum(r.measured for r in found) == 0


def test_a_users_declared_claim_reaches_the_page(cfg):
    cfg["claims"] = [{"id": "mine", "claim": "Prune-OPD beats OPD", "kind": "beats", "variant": "prune_opd",
                      "baseline": "opd", "experiment": "main", "paper": 1.0}]  # fmt: skip
    s = "toy-l-s-math"
    _runs(cfg, s, "opd", [0.50, 0.52, 0.51])
    _runs(cfg, s, "prune_opd", [0.53, 0.56, 0.54])
    c = _one(claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1), "mine", s)
    assert c.claim == "Prune-OPD beats OPD" and c.verdict == HOLDS and c.paper == 1.0


# ------------------------------------------------------------------------------------------------
# Probe claims: the unit is the question
# ------------------------------------------------------------------------------------------------


def _items(cfg, s, rows):
    d = Path(cfg["results"]) / "analysis" / s
    d.mkdir(parents=True, exist_ok=True)
    cols = ["teacher", "seed", "prefixes", "prefix_ratio", "question", "correct"]
    df = pd.DataFrame(rows, columns=cols).assign(setting=s, response=0, k=4, committed=False)
    df.to_csv(d / "continuation_items.csv", index=False)


def test_probe_claims_recomputed_by_hand(cfg):
    s = "toy-l-s-math"
    rows = []
    for i in range(8):
        q = f"q{i}"
        rows += [("initial", 0, "initial-student", 0.1, q, 4), ("initial", 0, "initial-student", 0.9, q, 1 + i % 2)]
        rows += [("initial", 0, "own", 0.1, q, 4), ("initial", 0, "own", 0.9, q, 4)]
        for seed in (1, 2):  # the trained teachers: one more right continuation at 90% on every question,
            # seed 2 one more again on q0
            more = 2 + i % 2 + (seed == 2 and i == 0)
            rows += [("scout", seed, "initial-student", 0.1, q, 4), ("scout", seed, "initial-student", 0.9, q, more)]
        for seed in (1, 2):
            rows += [("control", seed, "initial-student", 0.1, q, 4), ("control", seed, "initial-student", 0.9, q, 1 + i % 2)]
    _items(cfg, s, rows)
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    falls = _one(found, "continuation_falls", s)
    # at 10%: 32/32 right; at 90%: 12/32 (1 or 2 of 4 a question): a fall of 62.5 points
    assert falls.effect == pytest.approx(62.5) and falls.verdict == HOLDS and falls.unit == verdicts.QUESTION_UNIT
    below = _one(found, "below_own", s)
    assert below.effect == pytest.approx(100 * (64 / 64 - 44 / 64)) and below.verdict == HOLDS
    gain = _one(found, "teacher_improves", s)
    assert gain.effect == pytest.approx(100 * 8.5 / 64)  # 8 and 9 more right of 64 continuations a seed
    assert gain.verdict == HOLDS and "scout s1" in " ".join(gain.used)
    assert _one(found, "teacher_beats_control", s).effect == pytest.approx(100 * 8.5 / 64)
    assert _one(found, "entropy_gap", s).verdict == UNMEASURED  # no entropy file written here
    assert "has not run" in _one(found, "continuation_falls", "toy-mg-s-math").why
    # the trained teachers are the unit: their rows are tested over seeds, and one control teacher is
    # not enough (its seed variance is unknown, not zero)
    # (their gains, 12.5 and 14.06 points: a standard error of 1.5625 / 2 = 0.78 over the two seeds;
    # the questions' sampling adds nothing here, every question moving alike)
    assert gain.unit == verdicts.TEACHER_UNIT and gain.se == pytest.approx(100 / 64 / 2) and gain.df == 1
    _items(cfg, s, [r for r in rows if not (r[0] == "control" and r[1] == 2)])
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    control = _one(found, "teacher_beats_control", s)
    assert control.verdict == UNMEASURED and "1 trained teacher of prefix-0 control" in control.why


def test_lora_teacher_claims_on_a_par(cfg):
    """The config's LoRA claims: the student's Avg and the teacher's fixed-prefix continuation, each
    within the setting's SCOUT-over-OPD effect (2.2 points, q4b-q1.7b-math) of SCOUT's full teacher."""
    s = "toy-l-s-math"
    _runs(cfg, s, "scout", [0.600, 0.602, 0.604])
    _runs(cfg, s, "scout-lora", [0.601, 0.604, 0.605])
    rows = []
    for i in range(40):
        q = f"q{i}"
        rows += [("initial", 0, "initial-student", 0.5, q, 2)]
        for seed in (1, 2, 3):  # the LoRA teacher one right continuation fewer on every other question
            rows += [("scout", seed, "initial-student", 0.5, q, 3), ("scout-lora", seed, "initial-student", 0.5, q, 3 - (i % 2 == 0))]
    _items(cfg, s, rows)
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    avg = _one(found, "lora_teacher_student", s)
    assert avg.kind == "on_par" and avg.margin == 2.2 and avg.effect == pytest.approx(0.4 / 3) and avg.verdict == HOLDS
    cont = _one(found, "lora_teacher_continuation", s)
    # LoRA minus full: 20 of 160 continuations fewer a seed = -12.5 points; the teachers agree seed by
    # seed, so the questions' sampling alone spreads it (12.5 / sqrt(40) = 1.98), over the seeds' 4 df:
    # the interval lies wholly beyond the margin
    assert cont.kind == "on_par" and cont.effect == pytest.approx(-100 * 20 / 160) and cont.df == 4
    assert cont.se == pytest.approx(12.5 / math.sqrt(40), rel=0.05)
    assert cont.verdict == FAILS and cont.high < -2.2
    assert "scout-lora s3" in " ".join(cont.used)
    assert not [c for c in found if c.id.startswith("lora_") and c.setting != s]  # the lora experiment's setting only


# ------------------------------------------------------------------------------------------------
# The paper's own numbers
# ------------------------------------------------------------------------------------------------


def test_the_paper_per_run_numbers_give_the_papers_verdict(tmp_path):
    """The 4B math per-run table imported: SCOUT over OPD (+2.2, the paper's one-sided p = 0.06) holds
    at the paper's alpha; OPD and GRPO improve the student; the rest is not measured."""
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["results"] = str(tmp_path / "results")
    g = Grid.of(cfg)
    results.write_imported(g.paths, results.parse_import(g, REPO / "tests" / "data" / "paper_q4b_math_runs.csv", scale="percent"))
    found = claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)
    s = "q4b-q1.7b-math"
    scout = _one(found, "scout_beats_opd", s)
    assert scout.verdict == HOLDS and scout.effect == pytest.approx(2.2, abs=0.05) and scout.paper == 2.2
    assert 0 < scout.low < 2.2 < scout.high
    assert "no results of base student" in _one(found, "opd_improves", s).why  # the table has no base rows
    assert "no results of SCOUT or OPD on q8b-q1.7b-math" in _one(found, "scout_beats_opd", "q8b-q1.7b-math").why
