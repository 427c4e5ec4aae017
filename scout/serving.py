"""A teacher server the workflow starts (``teacher_server: serve``), from the first cell that needs it
to the last: launched on demand, found by its address, held by its users, stopped when no run
needs it.

Snakemake cannot run a provider beside its consumers across a cluster (its ``service()`` outputs put
both in one group allocation), so the life of a server is the project's own, built to give what
Snakemake would: a consumer is never allocated before its provider answers, and the provider lives
as long as its consumers need it.

- **Demand.** Each served cell that a run will train has a local job, ``await_teacher``, as its
  input: Snakemake plans it exactly when it plans the cell (whatever the reason: a missing output,
  changed params or inputs, ``--force``, ``-R``, a failed earlier try) and runs it on the submit
  host, holding no GPU. It records the cell's demand (``demand/``), makes sure a server is up
  (``ensure``), and finishes once it answers; only then is the cell submitted.
- **Launch.** ``ensure`` finds a live server or launches one under a lock (``launch.json``): a Slurm
  job of its own (``sbatch``, the config's ``resources.teacher_server``) or, on one machine, a
  detached process. A launch that dies is launched again, up to ``LAUNCHES`` times a caller.
- **Identity.** The server writes ``address.json`` once it answers, with an id of its own; a reader
  trusts it only if the URL answers and serves the expected model; the server deletes only its own
  address, never a live lease.
- **Life.** It stays up while a cell holds it (a lease) or waits for it (a demand of a run that is
  alive: its heartbeat in ``runs/``, until the cell's job has held it and ended), and for
  ``idle_minutes`` after, while any run that launched or
  used it is alive; once none is (the run ended, successfully or not, or was killed), it stops.
  A cell whose server goes away waits for it again (``ensure``: it may launch one) for up to
  ``wait_minutes``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from scout.io import JobStopped

HEARTBEAT = 30.0  # seconds between touches of a lease and of a run's heartbeat
STALE = 3 * HEARTBEAT  # untouched this long: its job (or run) is gone
POLL = 5.0  # seconds between looks (a server at its users, a waiter at the server)
GRACE = 15.0  # seconds a server stays up once no run is alive
LAUNCHES = 3  # launches one waiter makes before it gives up
RUN_ENV = "SCOUT_RUN"  # the Snakemake run a job belongs to (its heartbeat's name)
LAUNCH_ENV = "SCOUT_SERVER_LAUNCH"  # slurm | local: how this run launches a server (set at its start)


class TeacherServerError(JobStopped):
    """The teacher server cannot be reached, or its answer is not a whole one."""


# -- where a server's files are ------------------------------------------------------------------------


def folder(results: str | Path, model: str) -> Path:
    return Path(results) / "servers" / model


def runs_folder(results: str | Path) -> Path:
    return Path(results) / "servers" / "runs"


def write_record(path: Path, record: dict) -> None:
    """Write a JSON record whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# -- runs: a Snakemake run's heartbeat -----------------------------------------------------------------


def start_run(results: str | Path, run: str) -> Path:
    """The run's heartbeat, touched every ``HEARTBEAT`` seconds from a thread of the Snakemake
    process while it lives: a server serves only runs that are alive."""
    path = runs_folder(results) / run
    write_record(path, {"run": run, "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})

    def beat() -> None:
        while path.exists():
            with contextlib.suppress(OSError):
                os.utime(path)
            time.sleep(HEARTBEAT)

    threading.Thread(target=beat, daemon=True).start()
    return path


def live_runs(results: str | Path, now: float | None = None) -> set[str]:
    now = time.time() if now is None else now
    out = set()
    for p in runs_folder(results).glob("*") if runs_folder(results).exists() else []:
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime < STALE:
                out.add(p.name)
    return out


def end_run(results: str | Path, run: str, log: Callable[[str], None] = print) -> None:
    """What a run leaves when it ends: its heartbeat and demands go; a server it launched that is
    still waiting in Slurm's queue, with no other run needing it, is cancelled (one that runs stops
    itself within ``GRACE``)."""
    (runs_folder(results) / run).unlink(missing_ok=True)
    alive = live_runs(results)
    root = Path(results) / "servers"
    for where in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "runs") if root.exists() else []:
        for d in where.glob("demand/*.json"):
            if (read_record(d) or {}).get("run") == run:
                d.unlink(missing_ok=True)
        launched = read_record(where / "launch.json")
        if launched and launched.get("how") == "slurm" and not wanting_runs(where, alive):
            if launch_state(launched) == "PENDING":
                subprocess.run(["scancel", str(launched["job"])], capture_output=True)
                log(f"teacher server of {where.name}: its Slurm job {launched['job']} was still queued; cancelled")


def clear_stale(results: str | Path) -> list[Path]:
    """Leftovers of runs that are gone: their await flags (which would let a cell skip waiting for
    its server) and demands. Cleared when a workflow is read, before Snakemake plans anything."""
    alive = live_runs(results)
    gone = []
    root = Path(results) / "servers"
    for p in [*root.glob("*/await/**/*.json"), *root.glob("*/demand/*.json")] if root.exists() else []:
        if (read_record(p) or {}).get("run") not in alive:
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone


# -- demand and leases --------------------------------------------------------------------------------


def _key(user: str) -> str:
    return hashlib.sha1(user.encode()).hexdigest()[:12]


def add_demand(where: Path, user: str, run: str) -> None:
    """A cell of ``run`` will train and needs the server (``user``: its ``train.json``)."""
    write_record(where / "demand" / f"{_key(user)}.json", {"user": user, "run": run, "since": time.time()})


def wanting_runs(where: Path, alive: set[str]) -> set[str]:
    """The live runs that have asked for this server (a demand of theirs is on file)."""
    return {(read_record(p) or {}).get("run") for p in where.glob("demand/*.json")} & alive


def pending(where: Path, alive: set[str], now: float | None = None) -> list[str]:
    """The users that wait for the server or train with it: a demand of a live run whose
    ``train.json`` is not yet newer than the demand, and whose job has not held the server and
    ended since. A job that failed (or was killed) is met: under ``keep-going`` its demand would
    hold the server's GPUs until the whole run ends; a retry holds a lease of its own. A met demand
    is marked so (``ended``), for a later server too, which starts without the old leases."""
    ended = _ended_users(where / "leases", time.time() if now is None else now)
    out = []
    for p in sorted(where.glob("demand/*.json")):
        d = read_record(p)
        if not d or d.get("run") not in alive or d.get("ended"):
            continue
        with contextlib.suppress(OSError):
            if Path(d["user"]).stat().st_mtime >= d["since"]:
                continue
        if ended.get(d["user"], 0.0) >= d["since"]:
            write_record(p, {**d, "ended": ended[d["user"]]})
            continue
        out.append(d["user"])
    return out


def _ended_users(leases: Path, now: float) -> dict[str, float]:
    """Users whose every lease has ended (released, or untouched for ``STALE`` seconds: the job was
    killed), with when the last one did."""
    last: dict[str, float] = {}
    live = set()
    for p in leases.glob("*.lease") if leases.exists() else []:
        try:
            mtime, lease = p.stat().st_mtime, json.loads(p.read_text())
        except (OSError, ValueError):  # being written
            continue
        if not lease["released"] and now - mtime < STALE:
            live.add(lease["user"])
        last[lease["user"]] = max(last.get(lease["user"], 0.0), mtime)
    return {u: t for u, t in last.items() if u not in live}


class Lease:
    """A served job's claim on its server: a file it touches every ``HEARTBEAT`` seconds while it
    runs and marks released when it ends. A job killed outright leaves it untouched, and the
    server counts it gone after ``STALE`` seconds."""

    def __init__(self, where: Path, user: str = "") -> None:
        self.path = where / f"{socket.gethostname()}-{os.getpid()}.lease"
        self.user = user

    def start(self) -> Lease:
        self._write(released=False)
        threading.Thread(target=self._beat, daemon=True).start()
        import atexit

        atexit.register(self._write, released=True)
        return self

    def _write(self, released: bool) -> None:
        write_record(self.path, {"user": self.user, "released": released})

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT)
            with contextlib.suppress(OSError):
                os.utime(self.path)


def read_leases(where: Path, now: float) -> tuple[list[str], set[str], float | None]:
    """The users holding the server now (leases unreleased and touched within ``STALE`` seconds),
    every user a lease names, and when one last held it (its latest touch or release)."""
    live, seen, last = [], set(), None
    for p in sorted(where.glob("*.lease")) if where.exists() else []:
        try:
            mtime, lease = p.stat().st_mtime, json.loads(p.read_text())
        except (OSError, ValueError):  # being written
            continue
        seen.add(lease["user"])
        last = max(last or mtime, mtime)
        if not lease["released"] and now - mtime < STALE:
            live.append(lease["user"])
    return live, seen, last


def stop_reason(now: float, needed_at: float, runs_alive: bool, no_run_since: float | None, idle_s: float,
                grace_s: float = GRACE) -> str | None:  # fmt: skip
    """Why a server stops now, or None while it is wanted. ``needed_at``: when a user last held it
    or waited for it (or when it came up). It stays while a run that may use it lives, up to
    ``idle_s`` after its last use; once no such run lives, ``grace_s`` after that."""
    if not runs_alive:
        return "no run needs it" if no_run_since is not None and now - no_run_since >= grace_s else None
    if now - needed_at > idle_s:
        return f"no user for {idle_s / 60:g} minutes"
    return None


# -- finding a live server ------------------------------------------------------------------------------


def answers(url: str, model: str, timeout: float = 5.0) -> bool:
    """Whether an OpenAI-compatible server answers at ``url`` and serves ``model``."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout) as r:
            served = {m.get("id") for m in json.loads(r.read()).get("data", [])}
    except (OSError, ValueError):
        return False
    return model in served


def live_server(where: Path, model: str) -> dict | None:
    """The server's address if it answers there and serves ``model``; a file a dead or other server
    left is not trusted."""
    address = read_record(where / "address.json")
    if address and address.get("model") == model and answers(address["url"], model):
        return address
    return None


# -- launching --------------------------------------------------------------------------------------------


def sbatch_args(spec: dict, job_name: str, log: Path) -> list[str]:
    """sbatch's flags for the server's job, from the config's ``resources.teacher_server`` (one task
    per node with all its CPUs, GPUs as a per-node gres, as the workflow's own jobs) and its
    ``teacher_serving.sbatch`` (partition, account, QoS: what the profile gives the other jobs)."""
    r = spec["resources"]
    args = [f"--job-name={job_name}", f"--output={log}", f"--nodes={r['nodes']}", "--ntasks-per-node=1",
            f"--cpus-per-task={r['cpus_per_node']}", f"--mem={r['mem_mb']}M", f"--time={int(r['runtime'])}"]  # fmt: skip
    if r["gpus_per_node"]:
        args.append(f"--gres=gpu:{r['gpus_per_node']}")
    return args + list(spec.get("sbatch", []))


def launch(spec: dict, run: str, how: str, log: Callable[[str], None] = print) -> dict:
    """Start the server's job and record it in ``launch.json``; the caller holds the lock."""
    where = Path(spec["folder"])
    where.mkdir(parents=True, exist_ok=True)
    server_id = uuid.uuid4().hex[:12]
    spec_path = where / f"spec-{server_id}.json"
    write_record(spec_path, spec)
    cmd = [sys.executable, "-m", "scout.cli", "--log", str(where / f"server-{server_id}.log"), "serve-teacher",
           "--spec", f"@{spec_path}", "--id", server_id]  # fmt: skip
    record = {"id": server_id, "how": how, "run": run, "time": time.time(), "log": str(where / f"server-{server_id}.log")}
    if how == "slurm":
        args = ["sbatch", "--parsable", *sbatch_args(spec, f"scout-teacher-{spec['model']}", where / "slurm-%j.log"),
                "--wrap", shlex.join(cmd)]  # fmt: skip
        out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode != 0:
            raise TeacherServerError(f"sbatch refused the teacher server's job: {out.stderr.strip() or out.stdout.strip()}")
        record["job"] = out.stdout.strip().split(";")[0]
        log(f"teacher server of {spec['model']}: launched as Slurm job {record['job']} ({where})")
    else:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        record |= {"pid": proc.pid, "host": socket.gethostname()}
        log(f"teacher server of {spec['model']}: launched as process {proc.pid} on {record['host']} ({where})")
    write_record(where / "launch.json", record)
    return record


def launch_state(record: dict) -> str | None:
    """PENDING or RUNNING (Slurm's word for a queued or running job; RUNNING for a local process
    that lives), None once it has ended, or UNKNOWN when squeue cannot say (slurmctld busy or
    restarting): never taken for an end, which would launch a second server beside the first."""
    if record.get("how") == "slurm":
        out = subprocess.run(["squeue", "-h", "-j", str(record["job"]), "-o", "%T"], capture_output=True, text=True)
        if out.returncode != 0 and "Invalid job id" not in out.stderr:  # a purged job's answer: ended
            return "UNKNOWN"
        state = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        if state in ("PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD"):
            return "PENDING"
        return "RUNNING" if state in ("RUNNING", "COMPLETING", "SUSPENDED") else None
    if record.get("host") != socket.gethostname():
        return None
    proc = Path("/proc") / str(record["pid"])
    try:  # the process, if it is this launch's (a pid is reused) and not a zombie
        mine = record["id"] in (proc / "cmdline").read_bytes().decode(errors="replace")
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    if state == "Z":
        with contextlib.suppress(OSError):
            os.waitpid(int(record["pid"]), os.WNOHANG)  # the launcher's own child: reaped
        return None
    return "RUNNING" if mine else None


@contextlib.contextmanager
def locked(where: Path):
    where.mkdir(parents=True, exist_ok=True)
    with open(where / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(spec: dict, user: str, run: str, how: str, wait_s: float | None = None,
           log: Callable[[str], None] = print, poll: float = POLL) -> dict:  # fmt: skip
    """The address of a live server of ``spec``'s model, launching one if none is up or coming
    (a queued or starting job). ``user`` (a cell's ``train.json``) is recorded as waiting for it.
    ``wait_s``: how long to wait in all (None: while a launched job is alive, which holds no GPU of
    the caller's); a job that ends without answering is launched again, ``LAUNCHES`` times in all."""
    where, model = Path(spec["folder"]), spec["model"]
    user = str(Path(user).resolve()) if user else user  # a Slurm job may look from elsewhere
    add_demand(where, user, run)
    t0, told, launches = time.monotonic(), -60.0, 0
    while True:
        found = live_server(where, model)
        if found:
            return found
        with locked(where):
            record = read_record(where / "launch.json")
            state = launch_state(record) if record else None
            if state is None and not live_server(where, model):
                if launches >= LAUNCHES:
                    raise TeacherServerError(
                        f"the teacher server of {model} was launched {launches} times and never answered; the last "
                        f"launch's log: {record.get('log') if record else where}")  # fmt: skip
                record, state = launch(spec, run, how, log), "PENDING"
                launches += 1
        waited = time.monotonic() - t0
        if wait_s is not None and waited > wait_s:
            raise TeacherServerError(f"no teacher server of {model} answered in {wait_s / 60:g} minutes "
                                     f"(its launch: {record}); see {record.get('log') if record else where}")  # fmt: skip
        if waited - told >= 60:
            what = f"Slurm job {record['job']}" if record and record.get("job") else "its process"
            log(f"waiting for the teacher server of {model} ({what}, {state or 'starting'}), {waited:.0f} s so far")
            told = waited
        time.sleep(poll)
