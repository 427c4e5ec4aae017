"""docs/extending.md's "Add a backend", followed literally on a copy of the repository: each of its
code blocks is put where the guide says, the config that names the new backend validates, and a
cell runs on it through Snakemake, from training to its evaluation, with the run's files where
every later stage reads them."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support import guide
from tests.support.toy import mini_config

pytestmark = pytest.mark.e2e

CELL = "results/train/toy-l-s-math/opd/s1"


def test_the_guides_steps_add_a_backend_that_runs_a_cell_through_snakemake(tmp_path):
    copy = guide.repo_copy(tmp_path / "repo")
    steps = guide.steps("backend", "Add a backend", "Add a benchmark")
    assert [s["file"] for s in steps] == ["scout/copy_backend.py", "scout/backends.py", "config/copy.yaml"]
    for step in steps:
        guide.apply(copy, step)
    checked = guide.run(copy, "-m", "scout.cli", "check-config", "config/config.yaml", "config/copy.yaml")
    assert "valid (toy world)" in checked.stdout

    work = tmp_path / "work"
    work.mkdir()
    (work / "mini.yaml").write_text(yaml.safe_dump({**mini_config("results"), "backend": "copy"}))
    smk = ["-m", "snakemake", "-s", str(copy / "Snakefile"), "--directory", str(work), "--configfile",
           str(work / "mini.yaml"), "--cores", "2"]  # fmt: skip
    evals = [f"results/eval/toy-l-s-math/opd/s1/final/{b}.json" for b in ("tm-easy", "tm-hard", "tm-long")]
    guide.run(copy, *smk, f"{CELL}/train.json", *evals, cwd=work)

    record = json.loads((work / CELL / "train.json").read_text())
    assert record["spec"]["backend"] == "copy" and record["steps"] == record["spec"]["total_steps"]
    student = work / record["spec"]["student"]  # (relative to the workflow's directory)
    for name in ("model.safetensors", "config.json"):
        assert (work / CELL / "model" / "final" / name).read_bytes() == (student / name).read_bytes()
    log = (work / "results" / "logs" / "train" / "toy-l-s-math" / "opd" / "s1.log").read_text()
    assert "final: the student, copied" in log
    for path in evals:
        scores = json.loads((work / path).read_text())
        assert scores["variant"] == "opd" and len(scores["accuracies"]) == scores["repeats"]
    again = guide.run(copy, *smk, "-n", f"{CELL}/train.json", *evals, cwd=work)
    assert "Nothing to be done" in again.stdout + again.stderr
