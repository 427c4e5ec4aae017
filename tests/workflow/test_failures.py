"""Failures in one screen: a failed job says why on the console (its log's last lines), and a
missing or damaged input is one line naming the file and the command that remakes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from scout import jobs, tuning
from scout.grid import Grid
from tests.support.toy import REPO, mini_config


def scout(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scout.cli", *args], capture_output=True, text=True, cwd=cwd)


def eval_spec(world, tmp_path, **over) -> Path:
    cfg = world["config"]
    spec = jobs.eval_spec(Grid.of(cfg), "toy-l-s-math", "base-student", 0, "final")
    spec["model"] = world["student"]
    spec |= over
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_a_missing_data_file_is_one_line_with_the_remake_command(world, tmp_path):
    spec = eval_spec(world, tmp_path)
    data = json.loads(spec.read_text())["benchmarks"]["tm-hard"]["path"]
    moved = Path(data).rename(tmp_path / "tm-hard.jsonl")
    try:
        done = scout(
            "--log", str(tmp_path / "eval.log"), "evaluate", "--spec", f"@{spec}", "--out", str(tmp_path / "e")
        )
    finally:
        moved.rename(data)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines[0] == f"scout evaluate failed (exit 1); the last lines of {tmp_path / 'eval.log'}:"
    assert lines[-1] == f"  | scout evaluate: {data}: missing; remake it: snakemake --cores 1 --force -- {data}"
    assert "Traceback" not in done.stderr and len(lines) <= 16


def test_a_truncated_checkpoint_is_named_with_the_job_that_remakes_it(world, tmp_path):
    model = tmp_path / "results" / "train" / "toy-l-s-math" / "opd" / "s1" / "model" / "final"
    model.parent.mkdir(parents=True)
    subprocess.run(["cp", "-r", world["student"], str(model)], check=True)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    spec = eval_spec(world, tmp_path, model=str(model.relative_to(tmp_path)))
    done = scout("evaluate", "--spec", f"@{spec}", "--out", "e", cwd=tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"scout evaluate: {weights.relative_to(tmp_path)}: the model cannot be loaded (")
    assert line.endswith("remake it: snakemake --cores 1 --force -- results/train/toy-l-s-math/opd/s1/train.json")


def test_a_failed_job_shows_why_under_snakemake_with_a_short_command(tmp_path):
    """A damaged validation record fails the tuning stage's choice: the console shows the reason and
    the remake command, and the job's command line is one short line (the config travels as a file)."""
    cfg = mini_config("results", tuned=True)
    (tmp_path / "mini.yaml").write_text(yaml.safe_dump(cfg))
    search = [c for c in Grid.of(cfg).search_cells if tuning.param_of(c.variant) == "student_lr"]
    records = [jobs.validation_record(Grid.of(cfg), c) for c in search]
    for path in records:
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"mean": 0.5, "sem": 0.1}))
    bad = records[0]
    (tmp_path / bad).write_text('{"mean": 0.')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(tmp_path / "mini.yaml"), "--cores", "1", "results/tuning/toy-l-s-math/student_lr.json",
           "--allowed-rules", "choose_lr"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    log = "results/logs/tuning/toy-l-s-math/student_lr.log"
    assert f"scout choose-lr failed (exit 1); the last lines of {log}:" in text
    assert f"{bad}: unreadable validation record" in text
    # the narrowest remake: that record as the one target, with the command's Snakefile, folder,
    # config file and cores (not --allowed-rules)
    assert (f"remake it: snakemake --snakefile {REPO / 'Snakefile'} --directory {tmp_path} --configfile "
            f"{tmp_path / 'mini.yaml'} --cores 1 --force -- {bad}") in text  # fmt: skip
    shell = text[text.index("    shell:\n") :].splitlines()[1].strip()
    assert shell.startswith(f"scout --log {log} choose-lr --spec @results/specs/")
    assert "{" not in shell and len(shell) < 200  # its spec inline would be thousands of characters


def test_another_checkouts_code_is_named(tmp_path):
    """The workflow of one checkout and the installed scout of another: both the workflow (at
    once) and every job warn."""
    env = {**os.environ, "SCOUT_WORKFLOW": str(tmp_path)}
    args = [sys.executable, "-m", "scout.cli", "check-config", str(REPO / "config" / "config.yaml")]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and f"the workflow that runs it is {tmp_path}" in done.stderr
    same = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "SCOUT_WORKFLOW": str(REPO)})
    assert "warning" not in same.stderr

    other = tmp_path / "other-checkout"
    other.mkdir()
    for part in ("Snakefile", "workflow", "config"):
        subprocess.run(["cp", "-r", str(REPO / part), str(other / part)], check=True)
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=other, capture_output=True,
                         text=True)  # fmt: skip
    assert f"not this workflow's checkout {other}" in dry.stderr


def test_a_target_outside_the_grid_is_named_with_the_config_that_defines_it(tmp_path):
    """A newcomer's targets: a variant of an overlay the command did not name, a seed the grid does
    not run, a variant in another setting. Each is one line saying why and what to name; no
    Snakemake 'No rule to produce', no traceback. A target in the grid plans as before."""
    from tests.support.toy import dry_run

    base = REPO / "config" / "config.yaml"
    out = dry_run(tmp_path, base, "results/train/toy-mg-s-math/scout-f4/s1/train.json")
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "Traceback" not in text and "No rule to produce" not in text
    assert "toy-mg-s-math/scout-f4 is not in the grid of" in text
    assert "config/toy-extra.yaml (experiment interval) defines it: name that file after yours" in text
    assert "snakemake results/train/toy-mg-s-math/scout-f4/s1/train.json --configfile " in text
    out = dry_run(tmp_path, base, "results/eval/toy-l-s-math/scout/s9/final/tm-easy.json")
    assert "seed 9 is not one of toy-l-s-math/scout's seeds in this grid ([1, 2, 3, 4, 5, 6])" in out.stderr + out.stdout
    out = dry_run(tmp_path, base, "results/train/toy-l-s-math/scout-f4/s1/train.json")
    assert "scout-f4 runs in config/toy-extra.yaml (experiment interval) for toy-mg-s-math, not toy-l-s-math" in out.stderr + out.stdout
    named = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
             "--cores", "1", "--configfile", str(base), str(REPO / "config" / "toy-extra.yaml"), "--",
             "results/train/toy-mg-s-math/scout-f4/s1/train.json"]  # fmt: skip
    out = subprocess.run(named, capture_output=True, text=True)
    assert out.returncode == 0 and "rule train" in out.stdout + out.stderr, out.stdout[-2000:]
    # an evaluation of a run in the grid, but a benchmark (or checkpoint) it is not evaluated on
    out = dry_run(tmp_path, base, "results/eval/toy-l-s-math/scout/s1/final/tc-hard.json")
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "No rule to produce" not in text and "Traceback" not in text
    assert ("results/eval/toy-l-s-math/scout/s1/final/tc-hard.json: not an evaluation of this grid; "
            "results/eval/toy-l-s-math/scout/s1 is evaluated at final on tm-easy, tm-hard, tm-long") in text
