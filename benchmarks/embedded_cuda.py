"""The embedded backend on a GPU beside the CPU grid it mirrors (figures, not a test).

Cells of a finished CPU toy grid are trained again on this machine, all at once, from the specs
that grid recorded (``results/specs/``), as the workflow's jobs run them (``scout train``, then
``scout evaluate`` of the final checkpoint), with the spec's ``device`` set to ``--device`` (auto:
CUDA where torch finds it), as ``--config device=auto`` would set it.
Printed per cell: each job's seconds here and on the CPU, the first logged step at which the
training reward parts from the CPU run's (a rounding difference flips a sampled token, and the runs
become two draws of the same experiment), and the final Avg here and there.

    python -m benchmarks.embedded_cuda --cpu-grid DIR [--cells toy-l-s-math/opd,toy-l-s-math/scout]
                                       [--seed 2] [--work DIR] [--timeout 600]

DIR holds the CPU grid's ``results/`` (its toy models, specs, runs and evaluations, e.g. a fresh
clone after ``make toy``); the GPU's runs go to ``--work``'s ``results/``. Seed 2 is the default
because seed 1 of a tuned setting is a tuning run (its spec is under ``results/specs/tuning``).
Without a GPU the cells run on this CPU and must reproduce the grid's digits exactly: a self-check.
Avg is the mean over the benchmarks, ± the largest benchmark's standard error.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scout.io import read_jsonl

CELLS = (
    "toy-l-s-math/grpo,toy-l-s-math/opd,toy-l-s-math/esr,toy-l-s-math/prune_opd,toy-l-s-math/relay_opd,"
    "toy-l-s-math/scout,toy-l-s-math/opd_teacher_grpo,toy-l-s-math/optr,toy-l-s-math/optr_scout,"
    "toy-l-s-code/opd,toy-l-s-code/scout"
)


def recorded_spec(folder: Path, stem: str, device: str) -> str:
    """The newest spec the CPU grid recorded for a job (``{stem}.{digest}.json``), on ``device``."""
    found = sorted(folder.glob(f"{stem}.*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no recorded spec {folder}/{stem}.*.json: is the CPU grid finished?")
    return json.dumps({**json.loads(found[-1].read_text()), "device": device})


def run_all(jobs: dict[str, list[str]], work: Path, timeout: float) -> dict[str, tuple[int, float]]:
    """Start every job at once; (return code, seconds) each, -9 for one killed at the timeout."""
    started = {}
    for name, cmd in jobs.items():
        log = open(work / "logs" / f"{name.replace('/', '_')}.log", "w")  # noqa: SIM115 - closed with the process
        started[name] = (subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT), time.perf_counter())
    done = {}
    deadline = time.perf_counter() + timeout
    for name, (proc, t0) in started.items():
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = -9
        done[name] = (rc, time.perf_counter() - t0)
        print(f"  {name}: rc {rc}, {done[name][1]:.0f} s", flush=True)
    return done


def rewards(run: Path) -> dict[int, float]:
    path = run / "metrics.jsonl"
    return {m["step"]: m["reward"] for m in read_jsonl(path) if "reward" in m} if path.exists() else {}


def seconds_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def avg_text(a: tuple[float, float] | None) -> str:
    return "-" if a is None else f"{a[0]:.1f} ± {a[1]:.2f}"


def final_avg(folder: Path) -> tuple[float, float] | None:
    """Mean over the benchmarks of the final checkpoint's accuracy, and the largest standard error."""
    found = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not found:
        return None
    return 100 * sum(d["mean"] for d in found) / len(found), 100 * max(d["sem"] for d in found)


def cpu_seconds(grid: Path, rule: str, cell: str, seed: int, ckpt: str | None = None) -> float | None:
    name = f"s{seed}.tsv" if ckpt is None else f"s{seed}/{ckpt}.tsv"
    path = grid / "results" / "benchmarks" / rule / cell / name
    if not path.exists():
        return None
    return float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-grid", type=Path, required=True, help="the folder holding the CPU grid's results/")
    p.add_argument("--cells", default=CELLS, help="setting/variant, comma-separated")
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--timeout", type=float, default=600, help="seconds for each stage")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"], help="where the jobs run")
    args = p.parse_args()
    import torch

    grid = args.cpu_grid.resolve()
    work = (args.work or Path(tempfile.mkdtemp(prefix="scout-cuda-"))).resolve()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "results").mkdir(exist_ok=True)
    if not (work / "results" / "toy").exists():  # the CPU grid's data and pretrained models, as the specs name them
        (work / "results" / "toy").symlink_to(grid / "results" / "toy")
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU: the CPU"
    print(f"{len(cells)} cells, seed {args.seed}, on {device} (torch {torch.__version__}); runs in {work}", flush=True)
    scout = [sys.executable, "-m", "scout.cli"]
    specs = grid / "results" / "specs"
    trains = {
        c: [*scout, "train", "--spec", recorded_spec(specs / "train" / c, f"s{args.seed}", args.device),
            "--out", f"results/train/{c}/s{args.seed}"]
        for c in cells
    }  # fmt: skip
    print("trainings, all at once:", flush=True)
    trained = run_all(trains, work, args.timeout)
    eval_specs = {c: recorded_spec(specs / "eval" / c / f"s{args.seed}", "final", args.device) for c in cells}
    evals = {
        c: [*scout, "evaluate", "--spec", eval_specs[c], "--out", f"results/eval/{c}/s{args.seed}/final"]
        for c in cells
        if (work / "results" / "train" / c / f"s{args.seed}" / "model" / "final" / "model.safetensors").exists()
    }
    print("final evaluations, all at once:", flush=True)
    evaluated = run_all({f"{c}:eval": cmd for c, cmd in evals.items()}, work, args.timeout)

    print("| cell | train s (CPU / here) | evaluate s (CPU / here) | reward parts at step | Avg CPU | Avg here |")
    print("|---|---|---|---|---|---|")
    for c in cells:
        run = f"train/{c}/s{args.seed}"
        mine, theirs = rewards(work / "results" / run), rewards(grid / "results" / run)
        parts = next((s for s in sorted(mine) if abs(mine[s] - theirs.get(s, -1.0)) > 1e-12), None)
        parts_text = "-" if not mine else str(parts) if parts else f"never (to {max(mine)})"
        ev = evaluated.get(f"{c}:eval")
        a_cpu = final_avg(grid / "results" / "eval" / c / f"s{args.seed}" / "final")
        a_here = final_avg(work / "results" / "eval" / c / f"s{args.seed}" / "final")
        eval_rule = "evaluate_" + json.loads(eval_specs[c])["domain"]
        print(f"| {c} | {seconds_text(cpu_seconds(grid, 'train', c, args.seed))} / {seconds_text(trained[c][1])} "
              f"| {seconds_text(cpu_seconds(grid, eval_rule, c, args.seed, 'final'))} / "
              f"{seconds_text(ev[1] if ev else None)} | {parts_text} | {avg_text(a_cpu)} | {avg_text(a_here)} |")  # fmt: skip


if __name__ == "__main__":
    main()
