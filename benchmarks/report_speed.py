"""How long regenerating the report takes from a cache the size of the paper grid.

Builds a cache for every evaluation of config/paper.yaml: final checkpoints through
``scout import-results`` (a long CSV, as a user would import published numbers) and the
compute-matched step checkpoints as evaluation records. Then times ``scout report`` as a user runs
it (a fresh process: imports, statistics, every table and figure, pdflatex).

    python -m benchmarks.report_speed
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from scout import grid, jobs
from scout.paths import Paths

REPO = Path(__file__).resolve().parent.parent


def make_cache(cfg: dict, work: Path) -> tuple[Path, int]:
    rng = random.Random(0)
    rows, steps = ["setting,method,run,benchmark,mean,sem"], 0
    g = grid.Grid.of(cfg)
    runs = g.seeds
    for setting, variant, seed, ckpt in jobs.eval_units(g):
        for b in g.benchmarks_for(g.settings[setting].domain):
            mean, sem = min(1, max(0, rng.gauss(0.5, 0.05))), 0.01
            if ckpt == "final":
                run = runs[(setting, variant)].index(int(seed)) + 1
                rows.append(f"{setting},{variant},{run},{b},{mean:.4f},{sem}")
            else:
                out = Path(Paths.of(cfg).eval_dir(setting, variant, seed, ckpt))
                out.mkdir(parents=True, exist_ok=True)
                rec = {"setting": setting, "variant": variant, "seed": int(seed), "checkpoint": ckpt, "benchmark": b}
                (out / f"{b}.json").write_text(json.dumps({**rec, "mean": mean, "sem": sem}))
                steps += 1
    csv = work / "paper_grid.csv"
    csv.write_text("\n".join(rows) + "\n")
    return csv, steps


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
        cfg["results"] = str(work / "results")
        cfg_file = work / "paper.yaml"
        cfg_file.write_text(yaml.safe_dump(cfg))
        csv, steps = make_cache(cfg, work)
        scout = [sys.executable, "-m", "scout.cli"]
        t_import = timed(scout + ["import-results", str(csv), "--configfile", str(cfg_file)])
        n_rows = len(csv.read_text().splitlines()) - 1
        times = [timed(scout + ["report", "--configfile", str(cfg_file)]) for _ in range(3)]
        manifest = json.loads((work / "results" / "report" / "manifest.json").read_text())
        print(f"cache: {n_rows} imported rows + {steps} step-checkpoint records = {manifest['records']} records")
        print(f"import-results: {t_import:.1f} s")
        print(
            f"scout report (fresh process, {len(manifest['tables'])} tables, {len(manifest['figures'])} figures, PDF): "
            + ", ".join(f"{t:.1f} s" for t in times)
            + f"; inside the process {manifest['seconds']:.1f} s"
        )
        print(f"missing evaluations: {len(manifest['missing'])}; skipped: {len(manifest['skipped'])}")


if __name__ == "__main__":
    main()
