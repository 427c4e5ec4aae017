"""Cluster resources from config, the grid's plan, and the Ray launcher's commands (no Slurm needed;
tests/workflow/test_slurm.py runs them on a real cluster)."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from scout import config as scout_config
from scout import plan, raycluster, resources
from scout.cli import main
from scout.grid import Grid
from tests.support.toy import REPO, dry_run, toy_config

PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())

LAYERED = {
    "default": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 2, "mem_mb": 1000, "runtime": 10},
    "evaluate": {"gpus_per_node": 4, "runtime": 30},
    "train": {
        "default": {"gpus_per_node": 8, "runtime": 100},
        "methods": {"scout": {"nodes": 3, "mem_mb": 2000}, "scout-f1": {"runtime": 300}},
        "settings": {"big": {"scout": {"nodes": 4}, "scout-f1": {"cpus_per_node": 16}}},
    },
}


def test_layers_override_single_keys_in_order():
    cfg = {"resources": LAYERED}
    assert resources.job_resources(cfg, "evaluate") == {
        "nodes": 1,
        "gpus_per_node": 4,
        "cpus_per_node": 2,
        "mem_mb": 1000,
        "runtime": 30,
    }
    assert resources.job_resources(cfg, "analysis") == LAYERED["default"]
    assert resources.job_resources(cfg, "train", "small", "grpo", "grpo") == {
        "nodes": 1,
        "gpus_per_node": 8,
        "cpus_per_node": 2,
        "mem_mb": 1000,
        "runtime": 100,
    }
    # method, then variant, then the setting's method, then the setting's variant
    assert resources.job_resources(cfg, "train", "small", "scout", "scout-f1") == {
        "nodes": 3,
        "gpus_per_node": 8,
        "cpus_per_node": 2,
        "mem_mb": 2000,
        "runtime": 300,
    }
    assert resources.job_resources(cfg, "train", "big", "scout", "scout-f1") == {
        "nodes": 4,
        "gpus_per_node": 8,
        "cpus_per_node": 16,
        "mem_mb": 2000,
        "runtime": 300,
    }
    assert resources.job_resources({}, "train", "x", "opd", "opd") == resources.FALLBACK


def test_slurm_resources_per_node_gpus_and_tasks():
    gpu = {"nodes": 3, "gpus_per_node": 8, "cpus_per_node": 64, "mem_mb": 480000, "runtime": 2880}
    assert resources.slurm_resources(gpu) == {
        "nodes": 3,
        "tasks": 0,
        "gres": "gpu:8",
        "job_gpus": 24,
        "cpus_per_task": 64,
        "mem_mb": 480000,
        "runtime": 2880,
    }
    cpu = {**gpu, "gpus_per_node": 0, "nodes": 2}
    assert resources.slurm_resources(cpu)["tasks"] == 2 and resources.slurm_resources(cpu)["gres"] == ""
    assert resources.slurm_resources(cpu)["job_gpus"] == 0
    # the Slurm plugin's job step reads these as srun's --gpus, for one node of a multi-node job
    assert not {"gpus", "gpu", "nvidia_gpu"} & set(resources.slurm_resources(gpu))


def test_a_job_longer_than_the_partitions_limit_runs_in_pieces():
    """Worked by hand: 7,200 minutes under a 2,880-minute limit are 3 pieces (2,880 + 2,880 +
    1,440), so 2 retries more than a failure gets; jobs that fit ask for no more."""
    job = {"nodes": 1, "gpus_per_node": 8, "cpus_per_node": 64, "mem_mb": 480000, "runtime": 7200}
    assert resources.slurm_resources(job, 2880)["runtime"] == 2880
    assert resources.slurm_resources(job)["runtime"] == 7200 and resources.slurm_resources(job, 10000)["runtime"] == 7200
    assert [resources.pieces(t, 2880) for t in (1, 2880, 2881, 5760, 7200)] == [1, 1, 2, 2, 3]
    assert resources.pieces(7200, None) == 1
    assert resources.retries([2880, 7200, 5760], 2880, base=2) == 4
    assert resources.retries([2880, 1440], 2880, base=2) is None and resources.retries([7200], None, base=2) is None
    assert resources.retries([], 2880, base=2) is None


def test_the_paper_grid_under_a_48_hour_partition_asks_for_48_hours(tmp_path):
    """A dry run with resources.max_runtime: 2880: OPD over three epochs (7,200 minutes) is
    submitted with the partition's 2,880 (above it Slurm would leave it pending for good), and
    so is the teacher server's job."""
    from scout import jobs

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["resources"]["max_runtime"] = 2880
    cfg["resources"]["teacher_server"]["runtime"] = 4000
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    target = "results-paper/train/q4b-q1.7b-math/opd-3ep/s1/train.json"
    out = dry_run(tmp_path, tmp_path / "cfg.yaml", "-p", target)
    assert out.returncode == 0, out.stderr[-3000:]
    block = out.stdout[out.stdout.index(f"output: {target}") :]
    assert "runtime=2880," in block.split("shell:")[0] and "runtime=7200" not in block
    assert jobs.teacher_server_spec(Grid.of(cfg), "Qwen3-4B-Instruct-2507")["resources"]["runtime"] == 2880
    cfg["resources"]["evaluate"]["runtime"] = 3000  # an evaluation does not resume: named, not split
    table = plan.grid_jobs(Grid.of(cfg), exists=lambda _: False)
    said = plan.render_time_limit(Grid.of(cfg), table)
    longest = table[table.rule == "train"]["runtime"].max()
    assert longest == 7200 and "train: " in said and "in up to 3 pieces of 2880 min" in said
    assert "evaluate: " in said and "do not resume" in said
    assert plan.render_time_limit(Grid.of({**cfg, "resources": {**cfg["resources"], "max_runtime": 10000}}), table) == ""


@pytest.mark.parametrize(
    "setting, variant, method, nodes, runtime",
    [
        ("q4b-q1.7b-math", "grpo", "grpo", 1, 2880),
        ("q4b-q1.7b-math", "relay_opd", "relay_opd", 1, 2880),
        ("q4b-q1.7b-math", "opd", "opd", 2, 2880),
        ("sky7b-ds1.5b-math", "esr", "esr", 2, 2880),
        ("q4b-q1.7b-math", "scout", "scout", 3, 2880),
        ("q4b-q1.7b-code", "scout", "scout", 3, 2880),
        ("q8b-q1.7b-math", "scout", "scout", 4, 2880),
        ("sky7b-ds1.5b-math", "scout", "scout", 4, 2880),
        ("q8b-q1.7b-math", "scout-f1", "scout", 4, 5760),
        ("q8b-q1.7b-math", "opd_teacher_grpo", "opd_teacher_grpo", 4, 2880),
        ("q4b-q1.7b-math", "opd-3ep", "opd", 2, 7200),
    ],
)
def test_paper_placement(setting, variant, method, nodes, runtime):
    """SPEC section 3: GRPO/Prune/Relay 1 node, OPD/ESR 2, SCOUT 3 (4B teacher) or 4 (7B/8B)."""
    r = resources.job_resources(PAPER, "train", setting, method, variant)
    assert (r["nodes"], r["gpus_per_node"], r["runtime"]) == (nodes, 8, runtime)
    assert resources.job_resources(PAPER, "evaluate")["nodes"] == 1
    assert resources.job_resources(PAPER, "evaluate")["gpus_per_node"] == 8


def test_plan_counts_jobs_and_hours():
    cfg = toy_config()
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1, 2]}}
    cfg["claims"] = []  # the config's own claims are about experiments left out here
    cfg["settings"] = {"toy-l-s-math": cfg["settings"]["toy-l-s-math"]}
    cfg["models"].pop("toy-medium-grpo")
    cfg.pop("analysis")
    cfg["resources"] = {
        "default": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1, "mem_mb": 1000, "runtime": 30},
        "evaluate": {"gpus_per_node": 2},
        "train": {"default": {"gpus_per_node": 4, "runtime": 90}, "methods": {"scout": {"nodes": 2}}},
    }
    done = {"results/train/toy-l-s-math/opd/s1/train.json"}
    jobs = plan.grid_jobs(Grid.of(cfg), exists=done.__contains__)
    assert len(jobs) == 4 + 4 + 6  # toy: data, tokenizer, 2 models; 4 trainings; 4 + 2 base evaluations
    s = plan.summary(jobs)
    # to run: opd s2 (4 GPUs x 1.5 h), scout s1, s2 (2 nodes x 4 GPUs x 1.5 h), 6 evaluations (2 GPUs x 0.5 h)
    assert s.loc["main", "to_run"] == 3 + 4 and s.loc["main", "jobs"] == 8
    assert s.loc["main", "gpu_hours"] == pytest.approx(6 + 2 * 12 + 4 * 1)
    assert s.loc["base", "gpu_hours"] == pytest.approx(2 * 1)
    assert s.loc["toy world", "gpu_hours"] == 0 and s.loc["toy world", "node_hours"] == pytest.approx(4 * 0.5)
    assert s.loc["total", "to_run"] == 13 and s.loc["total", "max_nodes"] == 2
    assert "Job shapes still to run" in plan.render(jobs)


def test_plan_of_a_reduced_experiment_has_only_the_jobs_its_dag_runs():
    """select: one setting without the probes needs no DAPO teacher (prepare_teacher) and no
    toy-medium; the plan counts what snakemake -n schedules, nothing else."""
    sel = {"settings": ["q4b-q1.7b-math"], "methods": ["opd", "scout"], "seeds": [1], "analysis": False}
    cfg = scout_config.validate({**copy.deepcopy(PAPER), "select": sel})
    jobs = plan.grid_jobs(Grid.of(cfg), exists=lambda _: False)
    assert sorted(jobs["rule"]) == ["evaluate"] * 4 + ["train"] * 2
    assert jobs["gpu_hours"].sum() == pytest.approx(2 * 8 * 48 + 3 * 8 * 48 + 4 * 8 * 12)
    toy = scout_config.validate({**toy_config(), "select": {"settings": ["toy-l-s-math"], "methods": ["opd"]}})
    pretrained = {
        Path(t).parent.name
        for t in plan.grid_jobs(Grid.of(toy), exists=lambda _: False).query("rule == 'toy_pretrain'")["target"]
    }
    assert pretrained == {"toy-large", "toy-small"}


def test_plan_of_the_paper_grid(capsys, tmp_path):
    assert main(["plan", "--configfile", str(REPO / "config" / "paper.yaml"), "--csv", str(tmp_path / "jobs.csv")]) == 0
    text = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in text.splitlines()
        if line and line.split()[0] in ("main", "prefix0", "interval", "lora", "total")
    }
    # 4 settings x 6 methods x 3 seeds, trained and evaluated, less q8b's GRPO (q4b's runs), + scout s1's
    # evaluations at the compute-matched steps (scout-cm s1 is the same run) and the probed step 160 of s2, s3
    assert rows["main"][:2] == ["148", "148"]
    assert rows["prefix0"][:3] == ["18", "18", "4"]  # the q8b control places the 8B teacher on its own node
    assert rows["interval"][:2] == ["20", "20"]  # f=1 (1 seed) + f=5, 15, 20 (3 seeds), each + its evaluation
    assert rows["lora"][:3] == ["6", "6", "2"]  # the LoRA teacher's SCOUT on OPD's two nodes
    assert int(rows["total"][0]) == 254  # the teacher probes (analysis) and their step-160 evaluations too
    assert "Shared runs: 4 cells share another cell's run" in text and "2,784 GPU-hours fewer" in text
    assert (tmp_path / "jobs.csv").read_text().startswith("experiment,rule,target,")
    # peak disk: a probed q4b SCOUT run keeps step 160 (student 1.72B + teacher 4.02B at 12 B/param)
    # and holds the latest and the next checkpoint, plus two bf16 exports of the student
    assert "Peak disk per training run" in text
    jobs = plan.grid_jobs(Grid.of(PAPER), exists=lambda _: False).set_index("target")
    scout_q4b = jobs.loc["results-paper/train/q4b-q1.7b-math/scout/s2/train.json", "peak_disk_gb"]
    assert scout_q4b == pytest.approx(3 * (1.72 + 4.02) * 12 + 2 * 1.72 * 2)
    opd = jobs.loc["results-paper/train/q4b-q1.7b-math/opd/s1/train.json", "peak_disk_gb"]
    assert opd == pytest.approx(2 * 1.72 * 12 + 1.72 * 2)  # nothing evaluated before the end: no teacher


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"train": {"methods": {"scoot": {"nodes": 3}}}}, "resources.train.methods.scoot: not a method or variant"),
        ({"train": {"settings": {"nope": {"scout": {"nodes": 4}}}}}, "resources.train.settings.nope: unknown setting"),
        ({"evaluate": {"gpus_per_node": 0}}, "evaluation.engine vllm needs at least one GPU"),
        ({"default": {"runtime": "2h"}}, "resources.default.runtime"),
        ({"train": {"default": {"gpus": 8}}}, "resources.train.default.gpus: unknown key"),
        ({"teacher_server": {"nodes": 2}}, "resources.teacher_server.nodes: a teacher server runs on one node"),
        ({"train": {"methods": {"opd": {"gpus_per_node": 1, "nodes": 1}}}}, "leaves its teacher's engine no GPU"),
    ],
)
def test_resource_config_errors(patch, message):
    cfg = copy.deepcopy(PAPER)
    for k, v in patch.items():
        cfg["resources"][k] = {**cfg["resources"].get(k, {}), **v}
    with pytest.raises(scout_config.ConfigError, match=message.replace(".", r"\.")):
        scout_config.validate(cfg)


def test_a_served_cells_gate_waits_for_the_preflight(tmp_path):
    """A served cell's gate launches its teacher's server: only after the preflight, so that no
    server holds GPUs for cells the preflight refuses, and gates waiting out the server's queue never
    hold the local job slots the preflight needs (Snakemake runs local jobs a few at a time)."""
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["settings"]["q4b-q1.7b-math"]["teacher_server"] = "serve"
    (tmp_path / "served.yaml").write_text(yaml.safe_dump(cfg))
    target = "results-paper/train/q4b-q1.7b-math/opd/s1/train.json"
    out = dry_run(tmp_path, tmp_path / "served.yaml", "-p", "--profile", str(REPO / "profiles" / "slurm"), "--", target)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout + out.stderr
    gate = printed[printed.index("rule await_teacher:") :].splitlines()[1]
    assert gate.startswith("    input:") and "results-paper/preflight.json" in gate


def test_rules_get_their_resources_and_the_verl_launcher(tmp_path):
    """A dry run of the paper grid: the SCOUT cell with the 8B teacher asks for 4 nodes of 8 GPUs
    and its driver starts under `scout ray-run`."""
    target = "results-paper/train/q8b-q1.7b-math/scout/s1/train.json"
    out = dry_run(tmp_path, REPO / "config" / "paper.yaml", "-p", target)
    assert out.returncode == 0, out.stderr[-3000:]
    block = out.stdout[out.stdout.index(f"output: {target}") :]
    assert "nodes=4, tasks=0, gres=gpu:8, job_gpus=32, cpus_per_task=64, runtime=2880, mem_mb=480000" in block
    assert "scout ray-run --cpus-per-node 64 --gpus-per-node 8 -- scout --log" in block


def _train_command(tmp_path, overlay: dict, target: str) -> tuple[str, dict]:
    """A paper-grid training job under ``overlay``: its spec file (a param Snakemake compares) and
    the resources written beside it."""
    from scout import workflow

    cfg = scout_config.deep_merge(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()), overlay)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    out = dry_run(tmp_path, tmp_path / "cfg.yaml", "-p", target)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout[out.stdout.index(f"output: {target}") :].splitlines() if " train --spec " in x)
    spec = line.split("--spec ", 1)[1].split()[0]
    return spec, workflow.resources_of(f"@{tmp_path / spec.removeprefix('@')}")


def test_a_changed_time_limit_or_node_count_retrains_nothing(tmp_path):
    """The spec, whose path is a param Snakemake compares to decide a rerun, holds what a run
    computes; its resources (time limit, memory, nodes) are written beside it. Before, they were in
    it: raising a time limit to fit a partition moved every finished run aside and trained it again."""
    target = "results-paper/train/q8b-q1.7b-math/opd/s1/train.json"
    spec, placed = _train_command(tmp_path, {}, target)
    assert (placed["nodes"], placed["runtime"], placed["mem_mb"]) == (2, 2880, 480000)
    longer = {"resources": {"train": {"default": {"runtime": 1440, "mem_mb": 240000},
                                      "methods": {"opd": {"nodes": 3}}}}}  # fmt: skip
    spec2, placed2 = _train_command(tmp_path, longer, target)
    assert spec2 == spec and (placed2["nodes"], placed2["runtime"], placed2["mem_mb"]) == (3, 1440, 240000)
    assert "resources" not in json.loads(Path(tmp_path / spec.lstrip("@")).read_text())
    lr = {"settings": {"q8b-q1.7b-math": {"student_lr": 2e-6}}}  # what it computes: compared, rerun
    assert _train_command(tmp_path, lr, target)[0] != spec


# -- the Ray launcher ----------------------------------------------------------------------------


def test_ray_commands():
    head = raycluster.start_command(
        "ray", head_address=None, node_ip="10.0.0.1", port=20042, cpus=64, gpus=8, object_store_mb=None
    )
    assert head[:2] == ["ray", "start"] and "--head" in head and "--port=20042" in head
    assert "--node-ip-address=10.0.0.1" in head and "--num-gpus=8" in head and "--block" in head
    assert f"--temp-dir={tempfile.gettempdir()}/ray-{os.getuid()}" in head  # not /tmp/ray: another user's
    worker = raycluster.start_command(
        "ray", head_address="10.0.0.1:20042", node_ip="10.0.0.1", port=20042, cpus=64, gpus=8, object_store_mb=100
    )
    assert "--address=10.0.0.1:20042" in worker and "--head" not in worker
    assert f"--object-store-memory={100 * 1024 * 1024}" in worker
    assert raycluster.on_node("17", "gpu-a3", ["hostname"]) == [
        "srun",
        "--overlap",
        "--jobid=17",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=gpu-a3",
        "hostname",
    ]
    # per job, outside Ray's worker port range 10002-19999
    assert raycluster.ray_port("12345") == 22345 and raycluster.ray_port(None) == 6379
    assert raycluster.client_port("12345") == 30000 + 12345 % 2768 and raycluster.client_port(None) == 10001


@pytest.mark.alone  # it looks for every Ray process on the host
def test_a_jobs_ray_head_starts_where_rays_default_ports_are_taken(tmp_path):
    """Two jobs on one node: another Ray holds the client server's 10001 and the dashboard agent's
    52365 (Ray's defaults; the head exited at once on the first). The job's head takes ports of its
    own, and a task runs on it (a worker on a port the system picked)."""
    held = []
    for taken in (10001, 52365):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", taken))
        except OSError:
            pytest.skip(f"port {taken} is in use here already")
        s.listen()
        held.append(s)
    port = raycluster.ray_port("4242")
    argv = raycluster.start_command(str(Path(sys.executable).with_name("ray")), head_address=None,
                                    node_ip="127.0.0.1", port=port, cpus=1, gpus=0, object_store_mb=100,
                                    client=raycluster.client_port("4242"))  # fmt: skip
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "1",
           "HOME": str(tmp_path)}  # fmt: skip
    head = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while head.poll() is None and not raycluster._listening("127.0.0.1", port) and time.time() < deadline:
            time.sleep(0.5)
        assert head.poll() is None, head.stderr.read()[-3000:]
        task = f"import ray; ray.init(address='127.0.0.1:{port}'); print(ray.get(ray.remote(lambda: 41 + 1).remote()))"
        out = subprocess.run([sys.executable, "-c", task], env=env, capture_output=True, text=True, timeout=180)
        assert out.stdout.split()[-1:] == ["42"], out.stderr[-3000:]
    finally:
        head.terminate()
        head.wait(timeout=60)
        for s in held:
            s.close()


def test_ray_auth_mode_follows_the_token_the_head_would_find(tmp_path):
    assert raycluster.auth_mode({}, tmp_path) == "disabled"
    assert raycluster.auth_mode({"RAY_AUTH_TOKEN": "abc"}, tmp_path) == "token"
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("abc")
    assert raycluster.auth_mode({}, tmp_path) == "token"
    assert raycluster.auth_mode({"RAY_AUTH_MODE": "disabled"}, tmp_path) == "disabled"


@pytest.mark.alone  # it looks for every Ray process on the host
@pytest.mark.parametrize("token", [False, True], ids=["no-token", "token-in-home"])
def test_ray_run_outside_slurm_starts_a_local_cluster_and_stops_it(tmp_path, token):
    """`scout ray-run` on a machine without Slurm: a local Ray head, the driver against it (the
    probe), the driver's exit status passed on, and no Ray process left. With ~/.ray/auth_token
    present (any local ray.init writes one) the head turns token auth on, and the launcher and
    the driver must follow it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_AUTH"))}
    env["HOME"] = str(tmp_path / "home")
    if token:
        (tmp_path / "home" / ".ray").mkdir(parents=True)
        (tmp_path / "home" / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    probe = tmp_path / "probe.json"
    cmd = [
        "scout",
        "ray-run",
        "--cpus-per-node",
        "1",
        "--object-store-mb",
        "100",
        "--",
        "sh",
        "-c",
        f"python -m scout.raycluster {probe} && exit 5",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 5, out.stderr[-3000:]
    found = json.loads(probe.read_text())
    assert len(found) == 1 and found[0]["gpus"] == [] and found[0]["slurm_node"] is None
    leftover = subprocess.run(["pgrep", "-f", "raylet|gcs_server"], capture_output=True, text=True).stdout
    assert not leftover.strip()


def test_ray_run_needs_a_driver(capsys):
    with pytest.raises(SystemExit, match="no driver command"):
        main(["ray-run", "--cpus-per-node", "1", "--"])


def test_plan_of_a_finished_grid_says_nothing_to_run():
    jobs = plan.grid_jobs(Grid.of(toy_config()), exists=lambda _: True)
    assert (
        plan.render(jobs)
        == f"Nothing to run: all {len(jobs)} jobs of the grid have their outputs, made with the config's specs."
    )
