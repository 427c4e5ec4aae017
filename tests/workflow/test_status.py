"""scout status from a results folder and Snakemake's state, built to order."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

from scout import status
from scout.grid import Grid
from scout.paths import Paths
from tests.support.files import safetensors
from tests.support.toy import toy_config


def finished_run(d) -> None:
    d.mkdir(parents=True)
    (d / "train.json").write_text(json.dumps({"seconds": 30.0}))
    safetensors(d / "model" / "final" / "model.safetensors")


@contextmanager
def a_snakemake_in(folder, tmp_path):
    """A process of this host whose command line is a snakemake's working in ``folder``."""
    script = tmp_path / "bin" / "snakemake"
    script.parent.mkdir(exist_ok=True)
    script.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script), "--cores", "2", "--directory", str(folder)], cwd=tmp_path / "bin")
    try:
        t0 = time.monotonic()
        while not status.snakemake_processes(folder) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_cells_by_state_and_the_running_step(tmp_path):
    cfg = toy_config()
    running = "toy-l-s-math/scout/s2"
    finished_run(tmp_path / Paths.of(cfg).train_dir("toy-l-s-math", "opd", 1))  # done
    d = tmp_path / Paths.of(cfg).train_dir("toy-l-s-math", "scout", 2)
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 17}) + "\n")
    marker = base64.urlsafe_b64encode(f"{Paths.of(cfg).train_dir('toy-l-s-math', 'scout', 2)}/train.json".encode()).decode()
    (tmp_path / ".snakemake" / "incomplete").mkdir(parents=True)
    (tmp_path / ".snakemake" / "incomplete" / marker).write_text("")
    (tmp_path / ".snakemake" / "locks").mkdir()
    (tmp_path / ".snakemake" / "locks" / "0.output.lock").write_text("")
    log = tmp_path / "results" / "logs" / "train" / "toy-l-s-code" / "grpo" / "s3.log"  # failed
    log.parent.mkdir(parents=True)
    log.write_text("step 3/50\nTraceback (most recent call last):\n  ...\nValueError: boom\n")
    with a_snakemake_in(tmp_path, tmp_path) as pid:
        st = status.status(Grid.of(cfg), tmp_path)
    assert st["snakemake_pids"] == [pid] and not st["stale_lock"]
    main = st["experiments"]["main"]
    plans = Grid.of(cfg).plans
    n = sum(1 for c in Grid.of(cfg).cells if "main" in c.experiments and plans[c].shares is None)
    assert (main["done"], main["running"], main["failed"], main["pending"]) == (1, 1, 1, n - 3)
    assert len(st["shared"]) == 6  # toy-mg-s-math's GRPO runs are toy-l-s-math's; scout-cm's are scout's
    assert st["running_trainings"] == [(running, "17", cfg["training"]["steps"])] and st["snakemake_running"]
    # every run not done, counted once though main and headline both name toy-l-s-math's OPD and SCOUT
    runs = sum(1 for c in Grid.of(cfg).runs if plans[c].shares is None)
    assert st["remaining_s"] == 30.0 * (runs - 1)
    text = status.render(st)
    total = cfg["training"]["steps"]
    assert f"running: toy-l-s-math/scout/s2 at step 17/{total}" in text and "evaluations: 0 of" in text
    assert f"snakemake is running (pid {pid})" in text and "stale lock" not in text
    # Snakemake killed: its marker and its lock left behind, no process. Interrupted, not running,
    # with the step it resumes from, and the lock named with the command that clears it
    (d / "checkpoints" / "step_16").mkdir(parents=True)
    st = status.status(Grid.of(cfg), tmp_path)
    assert st["experiments"]["main"]["interrupted"] == 1 and st["running_trainings"] == []
    assert st["interrupted_trainings"] == [(running, "17", total, 16)] and st["stale_lock"]
    text = status.render(st)
    assert f"interrupted: {running} at step 17/{total}; the next snakemake resumes from step 16" in text
    assert "stale lock:" in text and "`snakemake --unlock`" in text and "no snakemake running on this host" in text
    assert "running:" not in text and "snakemake is running" not in text and "of training left" not in text
    # a snakemake of another folder is not this one's
    with a_snakemake_in(tmp_path / "elsewhere", tmp_path):
        assert status.status(Grid.of(cfg), tmp_path)["stale_lock"]


def test_damaged_files_and_the_grid_wall_time(tmp_path):
    cfg = toy_config()
    st = status.status(Grid.of(cfg), tmp_path)
    assert st["wall"] is None and "cannot be told" in status.render(st)
    d = tmp_path / Paths.of(cfg).train_dir("toy-l-s-math", "opd", 1)
    d.mkdir(parents=True)
    (d / "train.json").write_text('{"seconds": 3')  # truncated
    rec = tmp_path / Paths.of(cfg).eval_dir("toy-l-s-math", "base-student", 0, "final")
    rec.mkdir(parents=True)
    for b in ("tm-easy", "tm-hard", "tm-long"):
        (rec / f"{b}.json").write_text(json.dumps({"setting": "toy-l-s-math", "variant": "base-student", "seed": 0,
                                                   "checkpoint": "final", "benchmark": b, "mean": 0.5, "sem": 0.1}))  # fmt: skip
    (rec / "tm-long.json").write_text('{"mean": 0.')
    # two jobs' benchmark files: the first started at t0 - 100 - 50, the last ended at t0
    bench = tmp_path / "results" / "benchmarks" / "train"
    bench.mkdir(parents=True)
    for name, seconds, end in (("a.tsv", 50.0, 1_000_000_100), ("b.tsv", 10.0, 1_000_000_200)):
        (bench / name).write_text(f"s\th:m:s\n{seconds}\t0:00:50\n")
        os.utime(bench / name, (end, end))
    st = status.status(Grid.of(cfg), tmp_path)
    assert st["experiments"]["main"]["damaged"] == 1
    assert st["evaluations"][0] == 0
    assert [line.split(":")[0] for line in st["damaged"]] == [
        f"{Paths.of(cfg).train_dir('toy-l-s-math', 'opd', 1)}/train.json",
        f"{Paths.of(cfg).eval_dir('toy-l-s-math', 'base-student', 0, 'final')}/tm-long.json",
    ]
    assert all("remake it: snakemake --cores 1 --force -- " in line for line in st["damaged"])
    assert st["wall"] == (1_000_000_050.0, 1_000_000_200.0)
    assert "wall time 2:30 since the first job" in status.render(st)


def test_a_finished_run_whose_model_is_damaged_or_missing_is_damaged(tmp_path):
    """train.json alone does not make a run done: a truncated or missing model is damaged, named
    with the training job that remakes it."""
    cfg = toy_config()
    runs = {v: tmp_path / Paths.of(cfg).train_dir("toy-l-s-math", v, 1) for v in ("opd", "scout", "grpo")}
    for d in runs.values():
        finished_run(d)
    weights = runs["opd"] / "model" / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-3])  # truncated
    import shutil

    shutil.rmtree(runs["scout"] / "model")  # missing
    st = status.status(Grid.of(cfg), tmp_path)
    assert st["experiments"]["main"]["damaged"] == 2 and st["experiments"]["main"]["done"] >= 1
    opd = f"{Paths.of(cfg).train_dir('toy-l-s-math', 'opd', 1)}/model/final/model.safetensors"
    want = f"{opd}: truncated ({weights.stat().st_size:,} of {weights.stat().st_size + 3:,} bytes); remake it: "
    assert any(line.startswith(want) and line.endswith("opd/s1/train.json") for line in st["damaged"]), st["damaged"]
    assert any(line.startswith(f"{Paths.of(cfg).train_dir('toy-l-s-math', 'scout', 1)}/model/final: missing")
               for line in st["damaged"])  # fmt: skip


def test_the_safetensors_check_reads_only_the_header(tmp_path):
    from scout.io import safetensors_problem

    f = tmp_path / "m.safetensors"
    safetensors(f, 8)
    assert safetensors_problem(f) is None
    f.write_bytes(f.read_bytes()[:20])
    assert safetensors_problem(f) == "truncated (no complete header)"
    assert safetensors_problem(tmp_path / "none.safetensors") == "missing"



def test_a_failed_rerun_names_the_finished_run_it_can_restore(tmp_path):
    cfg = toy_config()
    run = Paths.of(cfg).train_dir("toy-l-s-math", "opd", 2)
    owner = {"fingerprint": "f1", "spec": {"lr": 1}}
    kept = tmp_path / f"{run}.superseded-20261127T010000"
    finished_run(kept)
    (kept / "train.json").unlink()  # Snakemake deleted it before the rerun; run.json keeps its record
    (kept / "run.json").write_text(json.dumps({**owner, "complete": True, "record": {"seconds": 30.0}}))
    (tmp_path / run).mkdir(parents=True)
    (tmp_path / run / "run.json").write_text(json.dumps({**owner, "complete": False}))
    log = tmp_path / "results" / "logs" / "train" / "toy-l-s-math" / "opd" / "s2.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    st = status.status(Grid.of(cfg), tmp_path)
    assert st["restorable"] == [(run, f"{run}.superseded-20261127T010000")]
    assert f"restorable: {run} has no train.json" in status.render(st) and f"`scout restore {run}`" in status.render(st)
    # a rerun of another spec: its finished predecessor would be stale, and is not offered
    (tmp_path / run / "run.json").write_text(json.dumps({**owner, "fingerprint": "f2", "complete": False}))
    assert status.status(Grid.of(cfg), tmp_path)["restorable"] == []


def test_a_teacher_server_the_workflow_starts_is_shown_up_or_not(tmp_path):
    """Up only when its address answers and serves its model: an address left by a server that is
    gone reads "not up"."""
    import http.server
    import threading

    from scout import jobs, serving

    cfg = toy_config()
    cfg["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
    users = jobs.served_outputs(Grid.of(cfg), "toy-large")
    finished_run(tmp_path / users[0].removesuffix("/train.json"))
    text = status.render(status.status(Grid.of(cfg), tmp_path))
    assert f"teacher server toy-large: not up; {len(users) - 1} of its {len(users)} cells still to train" in text
    folder = tmp_path / Grid.of(cfg).paths.server_dir("toy-large")
    folder.mkdir(parents=True)

    class Models(http.server.BaseHTTPRequestHandler):  # what a server answers on /v1/models
        def do_GET(self):
            body = json.dumps({"data": [{"id": "toy-large"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    (folder / "address.json").write_text(json.dumps({"id": "a", "url": url, "model": "toy-large"}))
    lease = serving.Lease(folder / "leases", users[1])
    lease.path.parent.mkdir(parents=True)
    lease._write(released=False)
    text = status.render(status.status(Grid.of(cfg), tmp_path))
    assert f"teacher server toy-large: up at {url}, 1 cells holding it;" in text
    server.shutdown()
    server.server_close()
    text = status.render(status.status(Grid.of(cfg), tmp_path))
    assert "teacher server toy-large: not up;" in text  # its address is still there, and not trusted


def test_after_snakemake_is_killed_status_says_interrupted_and_names_the_stale_lock(tmp_path):
    """The newcomer's steps: a cell trains through snakemake, snakemake and its job are killed
    (SIGKILL, as an OOM killer or a lost terminal does), `scout status` tells what is true, and
    the command it names clears the lock."""
    import signal

    import yaml

    from tests.support.toy import REPO, mini_config

    cfg = mini_config("results")
    cfg["training"].update(steps=400, save_every=2)
    (tmp_path / "mini.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    smk = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--configfile", "mini.yaml"]
    cell = "results/train/toy-l-s-math/opd/s1"
    run = subprocess.Popen([*smk, "--cores", "1", f"{cell}/train.json"], cwd=tmp_path, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    metrics, t0 = tmp_path / cell / "metrics.jsonl", time.monotonic()
    while time.monotonic() - t0 < 240 and run.poll() is None:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        if len(lines) >= 5:
            break
        time.sleep(0.1)
    assert run.poll() is None, "the run ended before it could be killed"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    said = subprocess.run([sys.executable, "-m", "scout.cli", "status", "--configfile", "mini.yaml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)  # fmt: skip
    assert said.returncode == 0, said.stderr
    text = said.stdout
    assert "interrupted: toy-l-s-math/opd/s1 at step" in text and "the next snakemake resumes from step" in text
    assert "stale lock:" in text and "running:" not in text and "snakemake is running" not in text
    subprocess.run([*smk, "--unlock"], cwd=tmp_path, env=env, check=True, capture_output=True)
    text = subprocess.run([sys.executable, "-m", "scout.cli", "status", "--configfile", "mini.yaml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True).stdout  # fmt: skip
    assert "stale lock" not in text and "interrupted: toy-l-s-math/opd/s1" in text


def test_a_killed_job_and_a_finished_run_snakemake_marks_incomplete_are_told_as_they_are(tmp_path):
    """A training job killed with SIGKILL while Snakemake goes on (an OOM killer): no traceback in
    its log and no incomplete mark (Snakemake took it off), but a claimed run that never finished,
    with a checkpoint: interrupted, and the next run resumes, not "pending". A run that finished
    after Snakemake itself was killed: its train.json is there, but Snakemake marks it incomplete and
    refuses to go on; status names the command that keeps it."""
    from scout import runs

    cfg = toy_config()
    paths = Paths.of(cfg)
    killed = tmp_path / paths.train_dir("toy-l-s-math", "scout", 1)
    (killed / "checkpoints" / "step_32").mkdir(parents=True)
    (killed / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 47)))
    runs._write(killed, {"fingerprint": "f", "spec": {}, "complete": False})
    orphan = f"{paths.train_dir('toy-l-s-math', 'opd', 2)}/train.json"
    finished_run(tmp_path / paths.train_dir("toy-l-s-math", "opd", 2))
    (tmp_path / ".snakemake" / "incomplete").mkdir(parents=True)
    (tmp_path / ".snakemake" / "incomplete" / base64.urlsafe_b64encode(orphan.encode()).decode()).write_text("")
    st = status.status(Grid.of(cfg), tmp_path)
    assert ("toy-l-s-math/scout/s1", "46", 64, 32) in [(k, s, t, c) for k, s, t, c in st["interrupted_trainings"]]
    text = status.render(st)
    assert "interrupted: toy-l-s-math/scout/s1 at step 46/64; the next snakemake resumes from step 32" in text
    assert f"marked: Snakemake marks {orphan} incomplete" in text
    assert f"`snakemake --cleanup-metadata {orphan}` (with your --configfile) keeps it" in text


def test_the_critical_path_is_the_longest_chain_of_jobs_by_hand():
    """Four jobs: data (2 s) feeds a pretraining (10 s) and a tokenizer (1 s); a training (5 s) reads
    the pretrained model and the tokenizer. The longest chain: data -> pretraining -> training,
    17 s; the tokenizer's branch (2 + 1 + 5) is shorter."""
    from scout.critical_path import Job, longest_chain

    jobs = [
        Job("data d", 2.0, ("d",), ()),
        Job("pretrain m", 10.0, ("m",), ("d",)),
        Job("tokenizer t", 1.0, ("t",), ("d",)),
        Job("train r", 5.0, ("r",), ("m", "t", "outside")),
    ]
    total, chain = longest_chain(jobs)
    assert total == 17.0 and [j.key for j in chain] == ["data d", "pretrain m", "train r"]
    assert longest_chain([]) == (0.0, [])


def test_the_critical_path_counts_only_the_grid_asked_about(tmp_path):
    """One working directory's Snakemake records hold every grid run from it: the paper grid's
    status, with nothing run in results-paper/, printed the toy grid's critical path."""
    from scout import critical_path

    meta = tmp_path / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    for out, rule in (("results/toy/models/toy-small/model.safetensors", "toy_pretrain"),
                      ("results-paper/train/q4b-q1.7b-math/opd/s1/train.json", "train")):  # fmt: skip
        record = {"rule": rule, "job_hash": hash(out), "starttime": 100.0, "endtime": 160.0, "input": []}
        (meta / base64.urlsafe_b64encode(out.encode()).decode()).write_text(json.dumps(record))
    toy, paper = critical_path.render(tmp_path, "results"), critical_path.render(tmp_path, "results-paper")
    assert toy.startswith("critical path: 60 s") and "toy_pretrain (60 s)" in toy and " train (" not in toy
    assert "(train (60 s))" in paper and "toy_pretrain" not in paper
    assert critical_path.render(tmp_path, "results-other") == ""


def test_a_command_piped_into_head_ends_without_a_traceback():
    """`scout plan --configfile config/paper.yaml | head -2`: the reader leaves after two lines of
    its 10 kB; the command ends quietly (it printed a BrokenPipeError traceback)."""
    from tests.support.toy import REPO

    shell = f"{sys.executable} -m scout.cli plan --configfile config/paper.yaml | head -2"
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.startswith("Jobs and requested hours") and out.stderr == "", out.stderr


def test_a_results_folder_that_is_not_there_is_said_so(tmp_path):
    """A mistyped --results (or --directory): status said every cell pending, report wrote a report
    of 26 unmeasured claims; each now says the folder is not there. A --spec @file that is not
    there is one line, not a traceback."""
    scout = [sys.executable, "-m", "scout.cli"]
    missing = tmp_path / "resluts"
    st = subprocess.run([*scout, "status", "--results", str(missing)], capture_output=True, text=True)
    assert st.returncode == 0 and st.stdout.startswith(f"no results folder at {missing}: nothing has run there")
    rep = subprocess.run([*scout, "report", "--results", str(missing)], capture_output=True, text=True)
    assert rep.returncode != 0 and rep.stderr.strip().startswith(f"scout report: no results folder at {missing}")
    assert not missing.exists()
    spec = subprocess.run([*scout, "train", "--spec", f"@{missing}.json", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)  # fmt: skip
    assert spec.returncode != 0 and "Traceback" not in spec.stderr
    assert spec.stderr.strip() == f"scout: --spec @{missing}.json: cannot read it (No such file or directory)"
