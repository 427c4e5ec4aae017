"""``scout status``: where a running or finished grid stands, from the results folder and
Snakemake's own state (``.snakemake/incomplete`` marks the outputs of jobs under way, ``locks`` that
a Snakemake is running). The same for local runs and ``--profile profiles/slurm``.

Per experiment: training cells done, running, failed, interrupted and pending; the last step of
every running training; evaluations done; the wall time so far and an estimate of what is left.
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

from scout import grid

STEP = re.compile(r"step[ :=]+(\d+)(?:/(\d+))?")


def _incomplete(workdir: Path) -> set[str]:
    folder = workdir / ".snakemake" / "incomplete"
    out = set()
    for marker in folder.glob("*") if folder.is_dir() else []:
        try:
            out.add(base64.urlsafe_b64decode(marker.name.encode()).decode())
        except ValueError:
            continue
    return out


def _running(workdir: Path) -> bool:
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def _failed(log: Path) -> bool:
    if not log.exists():
        return False
    tail = log.read_text(errors="replace")[-4000:]
    return "Traceback (most recent call last)" in tail or "Error:" in tail


def last_step(run_dir: Path, log: Path) -> str:
    """The last step a training reached: its metrics.jsonl (embedded) or its log (verl)."""
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        lines = metrics.read_text().strip().splitlines()
        if lines:
            return str(json.loads(lines[-1])["step"])
    if log.exists():
        found = STEP.findall(log.read_text(errors="replace")[-20000:])
        if found:
            return found[-1][0]
    return "0"


def _started(log: Path) -> float | None:
    from datetime import datetime

    try:
        return datetime.strptime(log.name.split(".")[0], "%Y-%m-%dT%H%M%S").timestamp()
    except ValueError:
        return log.stat().st_mtime


def status(config: dict, workdir: str | Path = ".") -> dict:
    work = Path(workdir)
    incomplete, running = _incomplete(work), _running(work)
    res = config.get("results", "results")
    per_exp: dict[str, dict[str, int]] = {}
    active, durations = [], []
    for cell in grid.cells(config):
        run = grid.train_dir(config, cell.setting, cell.variant, cell.seed)
        out, log = (
            f"{run}/train.json",
            work / res / "logs" / "train" / cell.setting / cell.variant / f"s{cell.seed}.log",
        )
        if (work / out).exists():
            state = "done"
            durations.append(json.loads((work / out).read_text()).get("seconds", 0.0))
        elif out in incomplete:
            state = "running" if running else "interrupted"
            if running:
                spec = grid.cell_spec(config, cell)
                active.append((cell.key, last_step(work / run, log), spec["total_steps"]))
        elif _failed(log):
            state = "failed"
        else:
            state = "pending"
        for exp in cell.experiments:
            per_exp.setdefault(exp, dict.fromkeys(("done", "running", "failed", "interrupted", "pending"), 0))
            per_exp[exp][state] += 1
    units = grid.eval_units(config)
    evals_done = sum(
        all((work / grid.eval_dir(config, s, v, seed, ck) / f"{b}.json").exists()
            for b in grid.benchmarks_for(config, config["settings"][s]["domain"]))
        for s, v, seed, ck in units
    )  # fmt: skip
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"))
    started = _started(logs[-1]) if logs else None  # the latest invocation (its log is named by its start)
    elapsed = (time.time() - started) if started else 0.0
    left = sum(c["pending"] + c["running"] + c["interrupted"] + c["failed"] for c in per_exp.values())
    mean = sum(durations) / len(durations) if durations else None
    remainder = mean * left / max(1, len(active)) if (mean and running) else None
    return {
        "experiments": per_exp,
        "running_trainings": active,
        "evaluations": (evals_done, len(units)),
        "snakemake_running": running,
        "elapsed_s": elapsed,
        "remaining_s": remainder,
    }


def render(st: dict) -> str:
    from scout.embedded.trainer import eta

    lines = [f"{'experiment':<18}{'done':>6}{'running':>9}{'failed':>8}{'interrupted':>13}{'pending':>9}"]
    for exp, c in st["experiments"].items():
        lines.append(f"{exp:<18}{c['done']:>6}{c['running']:>9}{c['failed']:>8}{c['interrupted']:>13}{c['pending']:>9}")
    done, total = st["evaluations"]
    lines.append(f"evaluations: {done} of {total} done")
    for key, step, total_steps in st["running_trainings"]:
        lines.append(f"running: {key} at step {step}/{total_steps}")
    state = "snakemake is running" if st["snakemake_running"] else "no snakemake running"
    wall = f"{state}; wall time so far {eta(st['elapsed_s'])}"
    if st["remaining_s"] is not None:
        wall += f", about {eta(st['remaining_s'])} of training left (mean finished job x jobs left / jobs running)"
    lines.append(wall)
    return "\n".join(lines)
