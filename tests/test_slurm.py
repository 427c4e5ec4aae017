"""The workflow on a real Slurm cluster (started on this host by tests/slurm_cluster.py), through
`--profile profiles/slurm` as users run it: a reduced toy grid, the resources sbatch received, a
failing job, a preempted training job, and a two-node Ray job."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, mini_config
from tests.slurm_cluster import Node, SlurmCluster, missing

pytestmark = pytest.mark.slurm

# Polling faster than the profile's production values, so the tests spend their time on jobs.
FAST = ["--slurm-init-seconds-before-status-checks", "1"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = missing()
    if why:
        if os.environ.get("SCOUT_REQUIRE_SLURM") == "1":
            raise RuntimeError(f"SCOUT_REQUIRE_SLURM=1 but no Slurm test cluster can start: {why}")
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm")
    nodes = [Node("n1", os.cpu_count() or 2, 12000, gpus=2), Node("n2", os.cpu_count() or 2, 4000, gpus=2)]
    with SlurmCluster(root, nodes) as c:
        yield c


SERVED = importlib.util.find_spec("vllm") is not None  # CI has vLLM's CPU build (SCOUT_REQUIRE_VLLM=1)


def slurm_config(results: str) -> dict:
    """A few jobs of every kind: toy world, training (one of them SCOUT), evaluation, report;
    distinct resources per rule family and method, so that the test can see each reach sbatch."""
    cfg = mini_config(results)
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1]}}
    cfg["claims"] = []  # the config's own claims are about experiments left out here
    cfg["settings"] = {"toy-l-s-math": cfg["settings"]["toy-l-s-math"]}
    cfg["models"].pop("toy-medium-grpo")
    cfg.pop("analysis")
    cfg["report"]["pdf"] = False
    cfg["resources"] = {
        "default": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1, "mem_mb": 1000, "runtime": 30},
        "evaluate": {"cpus_per_node": 2, "mem_mb": 1500, "runtime": 20},
        "train": {"methods": {"scout": {"mem_mb": 2500, "runtime": 45}}},
    }
    if SERVED:  # OPD's teacher served by the workflow, in a Slurm job of its own
        cfg["models"]["toy-large"]["toy"]["hidden_size"] = 64  # head_dim 32, as vLLM's CPU attention needs
        cfg["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
        cfg["teacher_serving"] = {"args": ["--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", "268435456"]}
        cfg["resources"]["teacher_server"] = {"mem_mb": 3000, "runtime": 20}
    return cfg


def snakemake(cluster, workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile") -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(snakefile),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / "profiles" / "slurm"),
        *FAST,
        *args,
    ]
    if (workdir / "config.yaml").exists() and not any(a.startswith("--configfile") for a in args):
        cmd.append("--configfile=config.yaml")  # one value: targets may follow
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir)


def slurm_jobs(cluster) -> list[dict]:
    """Every job slurmctld remembers, as `scontrol show job --oneliner` key=value pairs."""
    out = cluster.run("scontrol", "show", "job", "--oneliner").stdout
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def grid_run(cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm-grid")
    (work / "config.yaml").write_text(yaml.safe_dump(slurm_config("results")))
    t0 = time.perf_counter()
    out = snakemake(cluster, work)
    seconds = time.perf_counter() - t0
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-6000:]}\n{cluster.logs()}"
    print(f"\nreduced toy grid through Slurm: {seconds:.1f}s")
    return {"work": work, "out": out, "jobs": slurm_jobs(cluster)}


def test_grid_runs_through_the_profile(grid_run):
    work = grid_run["work"]
    runs = (work / "results" / "summary" / "runs.csv").read_text()
    assert "toy-l-s-math,scout" in runs.replace('"', "") and "base-teacher" in runs
    assert json.loads((work / "results" / "report" / "manifest.json").read_text())["missing"] == []
    ckpt = work / "results" / "train" / "toy-l-s-math" / "scout" / "s1" / "model" / "final" / "model.safetensors"
    assert ckpt.exists()
    if SERVED:  # OPD scored against the server the workflow started; SCOUT kept its own teacher
        log = (work / "results" / "logs" / "servers" / "toy-large.log").read_text().strip().splitlines()
        record = json.loads(log[-1])
        assert record["stopped"] == "every user has finished" and record["requests"] > 0
        assert record["users"] == ["results/train/toy-l-s-math/opd/s1/train.json"]


def test_sbatch_received_each_rule_family_resources(grid_run):
    jobs = grid_run["jobs"]
    by_rule: dict[str, list[dict]] = {}
    for j in jobs:
        comment = j.get("Comment", "")
        name = re.match(r"rule_([a-z_]+?)(_wildcards|$)", comment)
        by_rule.setdefault(name.group(1) if name else comment, []).append(j)
    # the local rule (grid_report) never went to Slurm; everything else did
    assert set(by_rule) == {"toy_data", "toy_tokenizer", "toy_pretrain", "train", "evaluate_math"} | (
        {"serve_teacher"} if SERVED else set())  # fmt: skip
    if SERVED:
        (server,) = by_rule["serve_teacher"]
        assert (server["MinMemoryNode"], server["TimeLimit"], server["NumNodes"]) == ("3000M", "00:20:00", "1")
    assert all(j["JobState"] == "COMPLETED" for j in jobs)
    evals = by_rule["evaluate_math"]
    assert len(evals) == 4  # opd, scout, base-student, base-teacher
    assert {(j["NumNodes"], j["NumCPUs"], j["MinMemoryNode"], j["TimeLimit"]) for j in evals} == {
        ("1", "2", "1500M", "00:20:00")
    }
    train = {j["Comment"].split("_")[-2]: j for j in by_rule["train"]}  # ..._wildcards_SETTING_VARIANT_SEED
    assert (train["scout"]["MinMemoryNode"], train["scout"]["TimeLimit"]) == ("2500M", "00:45:00")
    assert (train["opd"]["MinMemoryNode"], train["opd"]["TimeLimit"]) == ("1000M", "00:30:00")
    assert all(j["NumCPUs"] == "1" and j["NumNodes"] == "1" for j in by_rule["train"] + by_rule["toy_pretrain"])
    assert all(j.get("Requeue") == "1" for j in jobs)  # the profile's --requeue reached sbatch


def test_a_failing_job_is_reported_failed(cluster, grid_run):
    """A broken checkpoint makes its evaluation fail: snakemake says which rule, Slurm says FAILED."""
    work = grid_run["work"]
    model = work / "results" / "train" / "toy-l-s-math" / "opd" / "s1" / "model" / "final" / "model.safetensors"
    model.write_bytes(b"not a checkpoint")
    target = "results/eval/toy-l-s-math/opd/s1/final/tm-easy.json"
    out = snakemake(cluster, work, "--retries", "0", "--forcerun", target, target)
    assert out.returncode != 0
    assert "Error in rule evaluate_math" in out.stderr
    failed = [j for j in slurm_jobs(cluster) if j["JobState"] == "FAILED" and "evaluate_math" in j["Comment"]]
    assert len(failed) == 1 and "_opd_" in failed[0]["Comment"] and failed[0]["ExitCode"] != "0:0"
    assert (
        "SafetensorError"
        in (work / "results" / "logs" / "eval" / "toy-l-s-math" / "opd" / "s1" / "final.log").read_text()
    )


def test_preempted_training_is_requeued_and_resumes(cluster, grid_run):
    """Requeue a training job after its first checkpoint, as a preemption does: the same Slurm job
    runs again, the trainer resumes from the checkpoint, and snakemake finishes normally. A longer
    cell beside the grid's (its toy world is cached, so this one job runs)."""
    work = grid_run["work"]
    cfg = yaml.safe_load((work / "config.yaml").read_text())
    cfg["settings"]["toy-l-s-math"].pop("teacher_server", None)  # this OPD cell keeps its own teacher
    cfg["experiments"]["long"] = {
        "settings": ["toy-l-s-math"],
        "methods": [{"name": "opd-long", "method": "opd", "epochs": 100}],
        "seeds": [1],
    }
    (work / "long.yaml").write_text(yaml.safe_dump(cfg))
    ckpts = work / "results" / "train" / "toy-l-s-math" / "opd-long" / "s1" / "checkpoints"
    requeued, finished = [], threading.Event()

    def preempt():
        while not finished.is_set() and not list(ckpts.glob("step_*[0-9]")):
            time.sleep(0.2)
        train = [j for j in slurm_jobs(cluster) if "opd-long" in j.get("Comment", "") and j["JobState"] == "RUNNING"]
        if train:
            job = train[0]["JobId"]
            requeued.append(job)
            cluster.run("scontrol", "requeue", job)
            # Slurm holds a requeued job for 120 s (BeginTime); release it, as a scheduler would
            # once the preempting job is done.
            while (
                not finished.is_set() and "JobState=PENDING" not in cluster.run("scontrol", "show", "job", job).stdout
            ):
                time.sleep(0.2)
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)

    watcher = threading.Thread(target=preempt)
    watcher.start()
    target = "results/train/toy-l-s-math/opd-long/s1/train.json"
    out = snakemake(cluster, work, "--configfile=long.yaml", target)
    finished.set()
    watcher.join()
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    assert "1 of 1 steps (100%) done" in out.stderr  # only the training job ran
    assert requeued, "the training job was never seen running with a checkpoint"
    summary = json.loads((ckpts.parent / "train.json").read_text())
    assert summary["resumed_from"] and summary["resumed_from"] % 2 == 0 and summary["steps"] == 400
    log = (work / "results" / "logs" / "train" / "toy-l-s-math" / "opd-long" / "s1.log").read_text()
    assert f"resumed from step {summary['resumed_from']}" in log
    job = next(j for j in slurm_jobs(cluster) if j["JobId"] == requeued[0])
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) == 1


RAY_SNAKEFILE = """
rule ray_probe:
    output: "probe-{status}.json"
    log: "probe-{status}.log"
    resources: nodes=2, tasks=0, gres="gpu:2", cpus_per_task=1, mem_mb=1500, runtime=10
    shell:
        "scout ray-run --cpus-per-node 1 --gpus-per-node 2 --object-store-mb 100 -- "
        "sh -c 'python -m scout.raycluster {output} && exit {wildcards.status}' > {log} 2>&1"
"""


def ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-a", "-f", "raylet|gcs_server"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_two_node_ray_job(cluster, tmp_path):
    """A two-node job with two (fake) GPUs per node: Ray head on one node, a worker on the other,
    one task on each that sees its node's GPU; Ray is gone afterwards, also when the driver fails."""
    (tmp_path / "Snakefile").write_text(RAY_SNAKEFILE)
    out = snakemake(
        cluster, tmp_path, "probe-0.json", "probe-3.json", "--retries", "0", snakefile=tmp_path / "Snakefile"
    )
    log = (tmp_path / "probe-0.log").read_text()
    found = json.loads((tmp_path / "probe-0.json").read_text())
    assert sorted(f["slurm_node"] for f in found) == ["n1", "n2"], log
    assert all(len(f["gpus"]) == 1 for f in found), log
    assert "ray: 2 node(s) up" in log
    # the failing driver: its job fails (after the probe ran), and neither run leaves Ray behind
    assert out.returncode != 0 and "Error in rule ray_probe" in out.stderr
    assert "ray node on n2" in (tmp_path / "probe-3.log").read_text() and not ray_processes()
    states = {
        j["Comment"].rsplit("_", 1)[-1]: j["JobState"]
        for j in slurm_jobs(cluster)
        if "ray_probe" in j.get("Comment", "")
    }
    assert states == {"0": "COMPLETED", "3": "FAILED"}
    assert all(j["NumNodes"] == "2" for j in slurm_jobs(cluster) if "ray_probe" in j.get("Comment", ""))
