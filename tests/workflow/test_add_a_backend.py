"""docs/extending.md's "Add a backend", followed literally on a copy of the repository: each of its
code blocks is put where the guide says, the config that names the new backend validates, and a
cell runs on it through Snakemake, from training to its evaluation, with the run's files where
every later stage reads them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.toy import REPO, mini_config

pytestmark = pytest.mark.e2e

STEP = re.compile(r"<!-- add-a-backend: (?P<file>\S+), (?P<where>[^>]+?) -->\n```\w+\n(?P<code>.*?)```", re.S)
CELL = "results/train/toy-l-s-math/opd/s1"


def apply(copy: Path, step: re.Match) -> None:
    path, where, code = copy / step["file"], step["where"], step["code"]
    if where == "a new file":
        assert not path.exists(), f"{step['file']} exists already"
        path.write_text(code)
    elif where == "into BACKENDS":
        text = path.read_text()
        start = text.index("BACKENDS = {")
        end = text.index("\n}", start)
        path.write_text(text[:end] + "\n" + code.rstrip("\n") + text[end:])
    else:
        raise AssertionError(f"docs/extending.md: a step says {where!r}, which this test does not know how to follow")


def run(copy: Path, *cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SCOUT_WORKFLOW", None)
    done = subprocess.run([sys.executable, *cmd], cwd=cwd or copy, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_guides_steps_add_a_backend_that_runs_a_cell_through_snakemake(tmp_path):
    copy = tmp_path / "repo"
    skip = shutil.ignore_patterns(".venv", ".git", "results", ".snakemake", "__pycache__", ".*_cache")
    shutil.copytree(REPO, copy, ignore=skip)
    text = (REPO / "docs" / "extending.md").read_text()
    steps = list(STEP.finditer(text[text.index("## Add a backend") : text.index("## Add a benchmark")]))
    assert [s["file"] for s in steps] == ["scout/copy_backend.py", "scout/backends.py", "config/copy.yaml"]
    for step in steps:
        apply(copy, step)
    assert "valid (toy world)" in run(copy, "-m", "scout.cli", "check-config", "config/config.yaml",
                                      "config/copy.yaml").stdout  # fmt: skip

    work = tmp_path / "work"
    work.mkdir()
    (work / "mini.yaml").write_text(yaml.safe_dump({**mini_config("results"), "backend": "copy"}))
    smk = ["-m", "snakemake", "-s", str(copy / "Snakefile"), "--directory", str(work), "--configfile",
           str(work / "mini.yaml"), "--cores", "2"]  # fmt: skip
    evals = [f"results/eval/toy-l-s-math/opd/s1/final/{b}.json" for b in ("tm-easy", "tm-hard", "tm-long")]
    run(copy, *smk, f"{CELL}/train.json", *evals, cwd=work)

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
    again = run(copy, *smk, "-n", f"{CELL}/train.json", *evals, cwd=work)
    assert "Nothing to be done" in again.stdout + again.stderr
