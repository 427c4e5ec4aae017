"""Stale results: a changed hyperparameter or a retrained run shows in scout status, scout plan and
the report, each result with why, built to order."""

from __future__ import annotations

import copy
import json

import pytest

from scout import jobs, plan, report, status
from scout.freshness import Freshness
from scout.grid import Grid
from scout.paths import Paths
from scout.workflow import spec_digest
from tests.support.files import safetensors
from tests.support.toy import toy_config

S = "toy-l-s-math"


def _train(work, cfg, variant, seed=1):
    cell = Grid.of(cfg).find(S, variant, seed)
    d = work / Paths.of(cfg).train_dir(S, variant, seed)
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.json").write_text(json.dumps({"spec": jobs.train_job_spec(Grid.of(cfg), cell), "seconds": 1.0}))
    safetensors(d / "model" / "final" / "model.safetensors")  # a whole model: status would call it damaged
    return cell


def _evaluate(work, cfg, variant, seed=1):
    spec = jobs.eval_spec(Grid.of(cfg), S, variant, seed, "final")
    trained = json.loads((work / Paths.of(cfg).train_dir(S, variant, seed) / "train.json").read_text())["spec"]
    d = work / Paths.of(cfg).eval_dir(S, variant, seed, "final")
    d.mkdir(parents=True, exist_ok=True)
    for b in Grid.of(cfg).benchmarks_for("math"):
        rec = {"setting": S, "variant": variant, "method": variant, "seed": seed, "checkpoint": "final",
               "benchmark": b, "mean": 0.5, "sem": 0.01, "spec_digest": spec_digest(spec),
               "trained": spec_digest(trained)}  # fmt: skip
        (d / f"{b}.json").write_text(json.dumps(rec))


@pytest.fixture
def finished(tmp_path):
    cfg = toy_config()
    for v in ("opd", "scout"):
        _train(tmp_path, cfg, v)
        _evaluate(tmp_path, cfg, v)
    d = tmp_path / jobs.analysis_dir(Grid.of(cfg), S)
    d.mkdir(parents=True)
    run = Paths.of(cfg).train_dir(S, "scout", 1)
    trained = json.loads((tmp_path / run / "train.json").read_text())["spec"]
    (d / "analysis.json").write_text(json.dumps({"spec_digest": spec_digest(jobs.analysis_spec(Grid.of(cfg), S)),
                                                 "trained": {run: spec_digest(trained)}}))  # fmt: skip
    return tmp_path, cfg


def test_nothing_is_stale_under_the_config_that_made_it(finished):
    work, cfg = finished
    assert Freshness(Grid.of(cfg), work).stale() == []


def test_a_changed_hyperparameter_makes_its_runs_their_records_and_the_probes_stale(finished, monkeypatch):
    work, cfg = finished
    new = copy.deepcopy(cfg)
    new["methods"]["scout"]["k"] = 4
    stale = {(x.kind, x.key): x for x in Freshness(Grid.of(new), work).stale()}
    assert set(stale) == {("training", f"{S}/scout/s1"), ("evaluation", f"{S}/scout/1/final"), ("analysis", S)}
    assert "method_cfg.scout.k: 8 -> 4" in stale["training", f"{S}/scout/s1"].why[0]
    assert stale["evaluation", f"{S}/scout/1/final"].why == (f"its run {S}/scout/s1 is stale",)
    # scout status: the cell counts as stale, not done, and says why
    st = status.status(Grid.of(new), work)
    assert st["experiments"]["main"]["stale"] == 1 and st["experiments"]["main"]["done"] == 1
    assert st["evaluations"][0] == 1 and st["evaluations_stale"] == 1
    assert "method_cfg.scout.k: 8 -> 4" in status.render(st)
    # scout plan: the stale training and its evaluation are to run again
    jobs = plan.grid_jobs(Grid.of(new), exists=lambda t: (work / t).exists(), stale=frozenset(x.target for x in stale.values()))
    again = jobs[jobs["stale"]]
    assert set(again["rule"]) == {"train", "evaluate", "analysis"} and not again["done"].any()
    assert "rerun because their outputs are stale" in plan.render(jobs)
    # the report refuses to label the old K = 8 results with K = 4, naming them
    monkeypatch.chdir(work)
    with pytest.raises(report.ReportError, match=r"toy-l-s-math/scout/s1: its spec changed: .*scout.k: 8 -> 4"):
        report.refuse_stale(Grid.of(new))
    report.refuse_stale(Grid.of(cfg))  # under the config that made them: nothing to refuse


def test_a_run_trained_again_leaves_its_old_records_stale(finished):
    work, cfg = finished
    new = copy.deepcopy(cfg)
    new["methods"]["scout"]["k"] = 4
    _train(work, new, "scout")  # retrained under the new spec; its records are the old weights'
    stale = {(x.kind, x.key): x for x in Freshness(Grid.of(new), work).stale()}
    assert ("training", f"{S}/scout/s1") not in stale
    assert stale["evaluation", f"{S}/scout/1/final"].why == ("its run was trained again after it was evaluated",)
    assert f"{Paths.of(cfg).train_dir(S, 'scout', 1)} was trained again after it was probed" in stale["analysis", S].why


def test_a_changed_sampling_makes_every_record_and_the_probes_stale_but_no_run(finished):
    work, cfg = finished
    new = copy.deepcopy(cfg)
    new["evaluation"]["temperature"] = 0.7  # the probes sample at the evaluation's temperature too
    stale = Freshness(Grid.of(new), work).stale()
    assert sorted(x.kind for x in stale) == ["analysis", "evaluation", "evaluation"]
    assert all("spec changed" in x.why[0] for x in stale)
