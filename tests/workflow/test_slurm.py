"""The workflow on a real Slurm cluster (started on this host by tests/support/slurm_cluster.py), through
`--profile profiles/slurm` as users run it: a reduced toy grid, the resources sbatch received, a
failing job, a preempted training job, and a two-node Ray job."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from scout.resources import slurm_resources
from tests.support.slurm_cluster import FAST, Node, SlurmCluster, missing, slurm_config, slurm_jobs
from tests.support.toy import REPO

pytestmark = pytest.mark.slurm

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


def _server_record(work: Path, wait_s: float = 60) -> dict:
    """The record a server of this folder logs when it stops (the last line of its log), once it has."""
    logs = work / "results" / "servers" / "toy-large"
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        for log in sorted(logs.glob("server-*.log"), key=lambda p: p.stat().st_mtime, reverse=True):
            last = log.read_text().strip().splitlines()[-1:]
            if last and last[0].startswith("{"):
                return json.loads(last[0])
        time.sleep(0.5)
    raise AssertionError(f"no server of {work} logged its stop in {wait_s} s")


def server_jobs(cluster, work: Path, settled: float = 60) -> list[dict]:
    """The teacher servers the workflow launched for this folder (sbatch from its await jobs), once
    none is queued or running any more (they stop within seconds of their run's end)."""
    t0 = time.monotonic()
    while True:
        jobs = sorted((j for j in slurm_jobs(cluster) if j.get("JobName") == "scout-teacher-toy-large"
                       and j.get("WorkDir") == str(work)), key=lambda j: int(j["JobId"]))  # fmt: skip
        if all(j["JobState"] not in ("PENDING", "RUNNING", "COMPLETING") for j in jobs) or time.monotonic() - t0 > settled:
            return jobs
        time.sleep(1)


def test_sbatch_received_each_rule_family_resources(grid_run):
    jobs = grid_run["jobs"]
    by_rule: dict[str, list[dict]] = {}
    for j in jobs:
        comment = j.get("Comment", "")
        name = re.match(r"rule_([a-z_]+?)(_wildcards|$)", comment)
        by_rule.setdefault(name.group(1) if name else comment, []).append(j)
    # the local rule (grid_report) never went to Slurm; everything else did
    assert set(by_rule) == {"toy_data", "toy_tokenizer", "toy_pretrain", "train", "evaluate_math"}
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


# the resources of a two-node job of 2 GPUs a node as the workflow writes them for the plugin
RAY_RESOURCES = ", ".join(
    f"{k}={v!r}"
    for k, v in slurm_resources({"nodes": 2, "gpus_per_node": 2, "cpus_per_node": 1, "mem_mb": 1500, "runtime": 10}).items()
)
RAY_SNAKEFILE = """
rule ray_probe:
    output: "probe-{status}.json"
    log: "probe-{status}.log"
    resources: RESOURCES
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
    (tmp_path / "Snakefile").write_text(RAY_SNAKEFILE.replace("RESOURCES", RAY_RESOURCES))
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



# -- a teacher server the workflow launches, where it breaks ------------------------------------------

SERVED_TARGETS = [f"results/train/toy-l-s-math/{m}/s1/train.json" for m in ("opd", "prune_opd")]


def served_folder(grid_run, tmp_path: Path, **serving) -> Path:
    """A folder whose OPD and Prune-OPD cells score against a server the workflow launches (the
    embedded engine: seconds to start), its toy world copied from the grid's (the same specs)."""
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    shutil.copytree(grid_run["work"] / "results" / "toy", work / "results" / "toy")
    cfg = yaml.safe_load((grid_run["work"] / "config.yaml").read_text())
    cfg["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
    cfg["teacher_serving"] = {"engine": "embedded", "wait_minutes": 3, **serving}
    cfg["resources"]["teacher_server"] = {"mem_mb": 1500, "runtime": 20}
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "prune_opd"], "seeds": [1]}}
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    return work


def _ok(out) -> str:
    return f"{out.stdout[-3000:]}\n{out.stderr[-5000:]}"


def test_served_cells_are_submitted_once_their_server_answers_and_wait_for_it_again(cluster, grid_run, tmp_path):
    """Leftovers of a run that is gone (a killed server's address, its record, an await flag) are
    not trusted; the server is held in Slurm's queue for 8 s, and no cell is submitted before it
    runs; once a cell holds it, it is killed (scancel), and the cells wait for it again: one of them
    launches another, and both train. No cell failed, so no retry was spent."""
    work = served_folder(grid_run, tmp_path, sbatch=["--begin=now+8"])
    where = work / "results" / "servers" / "toy-large"
    flag = where / "await" / "toy-l-s-math" / "opd" / "s1.json"
    flag.parent.mkdir(parents=True)
    flag.write_text(json.dumps({"run": "gone"}))
    (where / "address.json").write_text(json.dumps({"id": "old", "url": "http://127.0.0.1:9", "model": "toy-large"}))
    (where / "served.json").write_text("{}")
    killed, finished = [], threading.Event()

    def kill_once_held():
        while not finished.is_set() and not killed:
            address = json.loads((where / "address.json").read_text()) if (where / "address.json").exists() else {}
            if list((where / "leases").glob("*.lease")) and address.get("job"):
                killed.append(address["job"])
                cluster.run("scancel", address["job"])
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_once_held)
    watcher.start()
    out = snakemake(cluster, work, "--retries", "0", *SERVED_TARGETS)
    finished.set()
    watcher.join()
    assert out.returncode == 0, _ok(out)
    assert all((work / t).exists() for t in SERVED_TARGETS)
    servers = server_jobs(cluster, work, settled=0)  # (the second stops 15 s after the run: the next test checks that)
    assert len(servers) == 2 and killed == [servers[0]["JobId"]], servers
    assert servers[0]["JobState"] == "CANCELLED" and servers[1]["JobState"] in ("RUNNING", "COMPLETING", "COMPLETED")
    # each with the config's resources.teacher_server, launched by the workflow (no profile involved)
    assert {(j["MinMemoryNode"], j["TimeLimit"], j["NumNodes"], j["NumCPUs"]) for j in servers} == {("1500M", "00:20:00", "1", "1")}
    cells = [j for j in slurm_jobs(cluster) if "rule_train" in j.get("Comment", "") and j.get("WorkDir") == str(work)]
    assert len(cells) == 2 and all(j["JobState"] == "COMPLETED" for j in cells)
    # Slurm's times (ISO, to the second): the server waited in the queue, and each cell was
    # submitted only after it had started
    assert servers[0]["StartTime"] > servers[0]["SubmitTime"]
    assert all(j["SubmitTime"] >= servers[0]["StartTime"] for j in cells)
    logs = " ".join((work / "results" / "logs" / "train" / "toy-l-s-math" / m / "s1.log").read_text() for m in ("opd", "prune_opd"))
    assert "teacher server of toy-large: launched as Slurm job" in logs  # a cell launched the second one
    assert not flag.exists() or json.loads(flag.read_text())["run"] != "gone"


def test_a_restart_a_failed_cell_and_a_rerun_by_target_each_get_their_server(cluster, grid_run, tmp_path):
    """Snakemake is killed (SIGKILL) as soon as it has launched its server; restarted, it finds that
    job and waits for it (or uses it) instead of launching a second server. In that run (--keep-going) Prune-OPD
    cannot be placed (its memory is above every node's) while OPD trains through the server; the
    run ends with the failure. The next run plans Prune-OPD's await job again (its flag cleared) with
    OPD forced by target, and both train against a server (the same one, within its grace, or a new
    one). Once no run is alive, no server is left queued or running."""
    work = served_folder(grid_run, tmp_path)
    where = work / "results" / "servers" / "toy-large"
    cfg = yaml.safe_load((work / "config.yaml").read_text())
    cfg["resources"]["train"]["methods"]["prune_opd"] = {"mem_mb": 64000}
    (work / "bad.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work), "--profile",
           str(REPO / "profiles" / "slurm"), *FAST, "--configfile=bad.yaml", *SERVED_TARGETS]  # fmt: skip
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    first = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    t0 = time.monotonic()
    while not (where / "launch.json").exists() and time.monotonic() - t0 < 120:
        time.sleep(0.2)
    assert (where / "launch.json").exists(), "the first run never launched its server"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    (killed_run,) = [p.name for p in (work / "results" / "servers" / "runs").iterdir()]
    assert snakemake(cluster, work, "--unlock").returncode == 0
    out = snakemake(cluster, work, "--configfile=bad.yaml", "--retries", "0", "--keep-going", *SERVED_TARGETS)
    assert out.returncode != 0 and (work / SERVED_TARGETS[0]).exists() and not (work / SERVED_TARGETS[1]).exists()
    assert len(server_jobs(cluster, work, settled=0)) == 1  # the killed run's server served the restart
    trained = (work / SERVED_TARGETS[0]).stat().st_mtime
    out = snakemake(cluster, work, "--force", *SERVED_TARGETS)
    assert out.returncode == 0, _ok(out)
    assert out.stderr.count("rule await_teacher") + out.stdout.count("rule await_teacher") == 2
    assert (work / SERVED_TARGETS[1]).exists() and (work / SERVED_TARGETS[0]).stat().st_mtime > trained
    old = time.time() - 600  # the killed run's heartbeat, as it is 10 minutes later
    os.utime(work / "results" / "servers" / "runs" / killed_run, (old, old))
    servers = server_jobs(cluster, work)
    assert 1 <= len(servers) <= 2 and all(j["JobState"] == "COMPLETED" for j in servers), servers
    assert _server_record(work)["stopped"] == "no run needs it"


def test_a_failing_squeue_is_not_taken_for_a_server_that_ended(cluster, monkeypatch):
    """A served cell's gate asks squeue whether its server's job lives. squeue that cannot reach
    slurmctld (busy, restarting) says nothing of the job: taken for an end, the gate would launch a
    second server beside the first. A job Slurm no longer knows is one that ended."""
    from scout import serving

    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    job = cluster.run("sbatch", "--parsable", "--mem=100", "--wrap", "sleep 300").stdout.strip()
    record = {"how": "slurm", "job": job}
    try:
        assert serving.launch_state(record) in ("PENDING", "RUNNING")
        ctld = next(p for name, p in cluster.procs if name == "slurmctld")
        ctld.send_signal(signal.SIGSTOP)
        try:
            assert serving.launch_state(record) == "UNKNOWN"
        finally:
            ctld.send_signal(signal.SIGCONT)
        assert serving.launch_state(record) in ("PENDING", "RUNNING")
    finally:
        cluster.run("scancel", job, check=False)
    assert serving.launch_state({"how": "slurm", "job": "999999"}) is None  # "Invalid job id specified"
