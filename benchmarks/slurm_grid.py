"""Wall time of the reduced toy grid of tests/workflow/test_slurm.py through a real Slurm cluster (on this
host, through profiles/slurm) against the same grid with `--cores 2`, and where the difference goes.

    python -m benchmarks.slurm_grid        (as root, with Debian's slurm-wlm and munge installed)

Per Slurm job it reads submit, start and end times from slurmctld: queue wait is submit->start, the
job's own time is start->end (the jobstep's snakemake start-up plus the rule); the rest of the wall
time is the time snakemake takes to notice a finished job (the plugin polls squeue with a back-off).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from tests.support.slurm_cluster import FAST, Node, SlurmCluster, missing, slurm_config, slurm_jobs
from tests.support.toy import REPO


def _snakemake(env: dict, work: Path, *args: str) -> float:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", "config.yaml", *args]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=work)
    return time.perf_counter() - t0


def _t(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def main() -> None:
    why = missing()
    if why:
        raise SystemExit(f"cannot start a Slurm cluster here: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        for name in ("local", "slurm"):
            (root / name).mkdir()
            (root / name / "config.yaml").write_text(yaml.safe_dump(slurm_config("results")))
        local = _snakemake({**os.environ, **path}, root / "local", "--cores", "2")
        with SlurmCluster(root / "cluster", [Node("n1", os.cpu_count() or 2, 12000)]) as cluster:
            profile = ["--profile", str(REPO / "profiles" / "slurm"), *FAST]
            slurm = _snakemake({**cluster.env, **path}, root / "slurm", *profile)
            jobs = slurm_jobs(cluster)
            noop = root / "noop"
            noop.mkdir()
            (noop / "Snakefile").write_text('rule noop:\n    output: "done"\n    shell: "touch {output}"\n')
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "snakemake", "-s", str(noop / "Snakefile"), "--directory", str(noop),
                            *profile], check=True, capture_output=True, env={**cluster.env, **path}, cwd=noop)
            noop_s = time.perf_counter() - t0
            noop_job = [j for j in slurm_jobs(cluster) if "rule_noop" in j.get("Comment", "")][0]
    queue = sum((_t(j["StartTime"]) - _t(j["SubmitTime"])).total_seconds() for j in jobs)
    run = sum((_t(j["EndTime"]) - _t(j["StartTime"])).total_seconds() for j in jobs)
    first = min(_t(j["SubmitTime"]) for j in jobs)
    last = max(_t(j["EndTime"]) for j in jobs)
    noop_run = (_t(noop_job["EndTime"]) - _t(noop_job["StartTime"])).total_seconds()
    print(f"reduced toy grid, {len(jobs)} Slurm jobs (+ local aggregate and report), {os.cpu_count()} cores")
    print(f"  --cores 2:            {local:7.1f} s")
    print(f"  --profile slurm:      {slurm:7.1f} s   (x{slurm / local:.1f})")
    print(f"  first submit -> last job end: {(last - first).total_seconds():.0f} s")
    print(f"  sum of queue waits (submit -> start): {queue:.0f} s")
    print(f"  sum of job times (start -> end):      {run:.0f} s, {run / len(jobs):.1f} s per job")
    print(f"  one no-op job through the profile: {noop_s:.1f} s wall, {noop_run:.0f} s inside Slurm")


if __name__ == "__main__":
    main()
