"""Figures for the toy world (printed, not asserted):

1. wall time of the full toy grid with ``snakemake --cores 2`` in a fresh directory;
2. per-step time of SCOUT (f=10) over OPD in the embedded backend, side by side in one process;
3. what the toy results show: SCOUT vs OPD per setting, and the teacher's continuation accuracy on
   final-student prefixes before and after SCOUT training.

    python -m benchmarks.toy_grid [--workdir DIR] [--skip-grid]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_grid(workdir: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--configfile",
            str(REPO / "config" / "config.yaml"),
            "--cores",
            "2",
            "--quiet",
            "progress",
        ],
        check=True,
    )
    return time.perf_counter() - t0


def step_overhead(workdir: Path, steps: int = 40) -> dict:
    """Train OPD and SCOUT (f=10) for the same steps in this process; compare mean step time."""
    import copy
    import os

    from scout import config as C
    from scout import grid
    from scout.embedded.trainer import Trainer

    os.chdir(workdir)
    cfg = C.load(REPO / "config" / "config.yaml")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("opd", "scout", "opd", "scout"):  # interleaved, twice, to even out noise
            spec = grid.cell_spec(cfg, grid.find_cell(cfg, "toy-l-s-math", method, 1))
            spec = copy.deepcopy(spec)
            spec.update(total_steps=steps, steps_per_epoch=steps, save_every=10_000)
            tr = Trainer(spec, Path(tmp) / f"{method}-{len(out)}", device="cpu")
            tr.run(log=lambda _: None)
            lines = [json.loads(x) for x in (tr.out / "metrics.jsonl").read_text().splitlines()]
            out.setdefault(method, []).extend(m["step_seconds"] for m in lines)
    opd, scout = statistics.mean(out["opd"]), statistics.mean(out["scout"])
    return {"opd_step_s": opd, "scout_step_s": scout, "ratio": scout / opd}


def toy_findings(workdir: Path) -> dict:
    import os

    import pandas as pd

    from scout.analysis import continuation_accuracy
    from scout.io import read_jsonl

    os.chdir(workdir)
    m = pd.read_csv("results/summary/methods.csv")
    m = m[(m.checkpoint == "final") & (m.benchmark == "avg")]
    table = m.pivot_table(index="setting", columns="variant", values="mean")
    cols = [
        c
        for c in ("base-student", "grpo", "opd", "esr", "prune_opd", "relay_opd", "scout", "base-teacher")
        if c in table
    ]
    findings = {"avg_by_setting": table[cols].round(4).to_dict(orient="index")}
    probe = {}
    for setting, teacher in (
        ("toy-l-s-math", "results/toy/models/toy-large"),
        ("toy-mg-s-math", "results/teachers/toy-medium-grpo/model/final"),
    ):
        rows = {r["id"]: r for r in read_jsonl("results/toy/data/tm-hard.jsonl")}
        res = {}
        for seed in (1, 2, 3):
            run = Path(f"results/train/{setting}/scout/s{seed}")
            gens = read_jsonl(f"results/eval/{setting}/scout/s{seed}/final/tm-hard.generations.jsonl")
            gens = [g for g in gens if g["repeat"] == 0]
            use_rows = [rows[g["id"]] for g in gens]
            resp = [g["response"] for g in gens]
            for ratio in (0.25, 0.5, 0.75):
                for name, path in (("initial", teacher), ("scout", str(run / "model" / "final-teacher"))):
                    acc = continuation_accuracy(path, use_rows, resp, ratio, k=4, seed=seed)
                    res.setdefault(f"{name}@{ratio}", []).append(acc)
        probe[setting] = {k: round(statistics.mean(v), 4) for k, v in res.items()}
    findings["teacher_continuation_on_final_student_prefixes"] = probe
    return findings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--skip-grid", action="store_true", help="reuse a finished grid in --workdir")
    args = p.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="scout-toy-grid-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if not args.skip_grid:
        print(f"full toy grid, --cores 2: {run_grid(workdir):.0f} s  ({workdir})", flush=True)
    print("per-step time, embedded backend:", json.dumps(step_overhead(workdir)), flush=True)
    print(json.dumps(toy_findings(workdir), indent=1))


if __name__ == "__main__":
    main()
