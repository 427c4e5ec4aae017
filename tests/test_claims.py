"""The claims page: its tests against hand-worked values, and verdicts on a cache built to order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from scout import claims, grid, results, tables
from scout.claims import FAILS, HOLDS, UNMEASURED
from tests.conftest import toy_config


def test_trend_test_by_hand():
    # scores 0,1,2; 8/10, 5/10, 2/10: p-bar = 0.5, T = 2 * (2 - 5) = -6,
    # Var = 0.25 * (10 * 5 - 30^2 / 30) = 5, z = -6 / sqrt(5) = -2.6833, p = Phi(z) = 0.003645
    assert claims.trend_decreasing([0, 1, 2], [8, 5, 2], [10, 10, 10]) == pytest.approx(0.003645, abs=2e-6)
    # a rising trend is not a falling one
    assert claims.trend_decreasing([0, 1, 2], [2, 5, 8], [10, 10, 10]) == pytest.approx(1 - 0.003645, abs=2e-6)
    assert math.isnan(claims.trend_decreasing([0.5], [3], [10]))


def test_one_sample_and_z_by_hand():
    # t = 0.2 / (0.1 / sqrt 3) = 3.4641, df 2: p = 1/2 - t / (2 sqrt(2 + t^2)) = 0.037090
    assert claims.one_sample_greater([0.3, 0.4, 0.5], 0.2) == pytest.approx(0.037090, abs=1e-6)
    # z = (0.6 - 0.5) / hypot(0.03, 0.04) = 2: p = 0.022750
    assert claims.z_greater(0.6, 0.03, 0.5, 0.04) == pytest.approx(0.022750, abs=1e-6)
    assert math.isnan(claims.one_sample_greater([0.4], 0.2))


def _record(cfg, setting, variant, seed, bench, mean, ckpt="final"):
    out = Path(grid.eval_dir(cfg, setting, variant, seed, ckpt))
    out.mkdir(parents=True, exist_ok=True)
    rec = {"setting": setting, "variant": variant, "method": variant, "seed": seed, "checkpoint": ckpt,
           "benchmark": bench, "mean": mean, "sem": 0.02, "repeats": 4}  # fmt: skip
    (out / f"{bench}.json").write_text(json.dumps(rec))


@pytest.fixture
def cfg(tmp_path):
    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    return cfg


def _cache(cfg):
    return tables.Cache(cfg, results.load(cfg))


def test_verdicts_follow_the_numbers(cfg):
    s = "toy-l-s-math"
    for b in ("tm-easy", "tm-hard", "tm-long"):
        _record(cfg, s, "base-student", 0, b, 0.30)
        for seed, (opd, scout, p0) in zip(
            (1, 2, 3), ((0.50, 0.60, 0.52), (0.52, 0.61, 0.49), (0.51, 0.62, 0.50)), strict=True
        ):
            _record(cfg, s, "opd", seed, b, opd)
            _record(cfg, s, "scout", seed, b, scout)
            _record(cfg, s, "opd_teacher_grpo", seed, b, p0)
    found = {(c.claim, c.setting): c for c in claims.all_claims(_cache(cfg), Path(cfg["results"]) / "analysis", 0.1)}
    opd = found[("OPD improves the student", s)]
    assert opd.verdict == HOLDS and opd.statistic.startswith("Avg 51.0 vs 30.0 (3 runs, min 50.0)")
    assert found[("SCOUT beats OPD on Avg", s)].verdict == HOLDS
    prefix0 = found[("The prefix-0 control (teacher GRPO from bare prompts) does not beat OPD", s)]
    assert prefix0.verdict == HOLDS and prefix0.p > 0.1
    # no runs of this setting: not measured, with the reason
    code = found[("SCOUT beats OPD on Avg", "toy-l-s-code")]
    assert code.verdict == UNMEASURED and "two or more runs" in code.why
    # the analysis stage has not run
    assert found[("Teacher continuation accuracy falls as the student prefix grows", s)].verdict == UNMEASURED


def test_scout_below_opd_does_not_hold(cfg):
    s = "toy-l-s-math"
    for b in ("tm-easy", "tm-hard", "tm-long"):
        for seed, (opd, scout) in zip((1, 2, 3), ((0.50, 0.45), (0.52, 0.47), (0.51, 0.46)), strict=True):
            _record(cfg, s, "opd", seed, b, opd)
            _record(cfg, s, "scout", seed, b, scout)
    got = [c for c in claims.scout_beats_opd(_cache(cfg), 0.1) if c.setting == s][0]
    assert got.verdict == FAILS and got.p > 0.9


def test_analysis_claims_from_the_csvs(cfg):
    s = "toy-l-s-math"
    d = Path(cfg["results"]) / "analysis" / s
    d.mkdir(parents=True)
    rows = []
    for r, acc in ((0.1, 0.8), (0.5, 0.5), (0.9, 0.2)):
        rows.append(("initial", 0, "initial-student", r, acc))
        rows.append(("initial", 0, "own", r, 0.8))
        for seed, gain in ((1, 0.05), (2, 0.07), (3, 0.06)):
            rows.append(("scout", seed, "initial-student", r, acc + gain))
    cont = pd.DataFrame(rows, columns=["teacher", "seed", "prefixes", "prefix_ratio", "accuracy"])
    cont = cont.assign(setting=s, n=100, prefix_tokens=10, continuation_tokens=5)
    cont.to_csv(d / "continuation.csv", index=False)
    ent = [("initial", 0, "student", i, 1.0 + 0.01 * (i % 5)) for i in range(20)]
    ent += [("initial", 0, "own", i, 0.5 + 0.01 * (i % 5)) for i in range(20)]
    pd.DataFrame(ent, columns=["teacher", "seed", "context", "response", "entropy"]).assign(setting=s).to_csv(
        d / "entropy_responses.csv", index=False
    )
    cache, a = _cache(cfg), Path(cfg["results"]) / "analysis"
    falls = [c for c in claims.continuation_falls(cache, a, 0.1) if c.setting == s][0]
    assert falls.verdict == HOLDS and falls.statistic == "80.0 at 10% to 20.0 at 90%; own prefixes 80.0 to 80.0"
    gap = [c for c in claims.entropy_gap(cache, a, 0.1) if c.setting == s][0]
    assert gap.verdict == HOLDS and gap.statistic == "1.020 vs 0.520 nats per token"
    better = [c for c in claims.scout_improves_teacher(cache, a, 0.1) if c.setting == s][0]
    # per-seed gains 5, 7, 6 points: t = 6 / (1 / sqrt 3) = 10.39, df 2: p = 0.004566
    assert better.verdict == HOLDS and better.p == pytest.approx(0.004566, abs=1e-5)
    records = claims.as_records(claims.all_claims(cache, a, 0.1))
    assert json.dumps(records)  # JSON-ready for the manifest (no NaN)
