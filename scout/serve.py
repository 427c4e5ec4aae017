"""``scout serve-teacher``: the teacher server's own process (``scout.serving`` launches it and
finds it). It starts the engine's OpenAI-compatible server (vLLM's, or the embedded engine's on
the CPU), writes its address once it answers, and stays up while a run needs it (leases, demands
of live runs, ``idle_minutes``), then stops the engine and logs a record of its life."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from scout.resources import job_end
from scout.schema import default
from scout.serving import (
    GRACE,
    POLL,
    STALE,
    TeacherServerError,
    answers,
    launch,
    live_runs,
    live_server,
    locked,
    pending,
    read_leases,
    read_record,
    stop_reason,
    wanting_runs,
    write_record,
)


def engine_command(spec: dict, port: int) -> list[str]:
    """The engine's OpenAI-compatible server on the teacher's weights: vLLM's, data-parallel over the
    job's GPUs, or the embedded engine's (``teacher_serving.engine: embedded``, CPU)."""
    if spec.get("engine", default("teacher_serving.engine")) == "embedded":
        module = "scout.embedded.server"
    else:
        module = "vllm.entrypoints.openai.api_server"
    cmd = [sys.executable, "-m", module, "--model", spec["path"], "--served-model-name", spec["model"],
           "--host", "0.0.0.0", "--port", str(port), "--max-logprobs", str(spec["max_logprobs"]),
           "--max-model-len", str(spec["max_model_len"])]  # fmt: skip
    if spec.get("gpus", 0) > 1 and module.startswith("vllm"):
        cmd += ["--data-parallel-size", str(spec["gpus"])]
    return cmd + list(spec.get("args", []))


def _die_with_parent() -> None:
    """In the engine's process, before it starts: SIGTERM when the server that started it dies, even
    by SIGKILL, so that no engine outlives its server and answers at an address nobody manages."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


PORT_TRIES = 3


def _start_engine(spec: dict, where: Path, log: Callable[[str], None], poll: float) -> tuple[subprocess.Popen, str]:
    """The engine, answering at its URL; a port another process took meanwhile is tried again."""
    limit = 60 * spec.get("start_minutes", default("teacher_serving.start_minutes"))
    host = socket.gethostname()
    for attempt in range(1, PORT_TRIES + 1):
        port = _free_port()
        url = f"http://{host}:{port}"
        engine_log = where / "engine.log"
        with open(engine_log, "w") as out:
            proc = subprocess.Popen(engine_command(spec, port), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < limit:
            if answers(url, spec["model"], timeout=2):
                return proc, url
            time.sleep(poll)
        tail = engine_log.read_text(errors="replace")[-2000:]
        _stop(proc)
        if "address already in use" in tail.lower() and attempt < PORT_TRIES:
            log(f"port {port} was taken before the engine bound it; another")
            continue
        raise TeacherServerError(f"the engine did not come up; the end of {engine_log}:\n{tail}")
    raise AssertionError("unreachable")


def _launch_successor(spec: dict, where: Path, log: Callable[[str], None]) -> dict | None:
    """Near its time limit, a server still needed launches the next one as it was launched itself
    (its launch.json: the run, Slurm or a local process); None where that fails (it serves on)."""
    try:
        with locked(where):
            own = read_record(where / "launch.json") or {}
            how = own.get("how") or ("slurm" if os.environ.get("SLURM_JOB_ID") else "local")
            return launch({k: v for k, v in spec.items() if k != "end_at"}, own.get("run", ""), how, log)
    except (OSError, TeacherServerError) as exc:
        log(f"could not launch a successor before the time limit ({exc}); serving on until it")
        return None


def serve(spec: dict, server_id: str, log: Callable[[str], None] = print) -> dict:
    """Run the teacher's server while a run needs it (``stop_reason``), then stop it; log a record."""
    poll, grace = spec.get("poll_s", POLL), spec.get("grace_s", GRACE)  # (shorter in the tests)
    where = Path(spec["folder"])
    results = Path(spec["results"])
    leases = where / "leases"
    now = time.time()
    for p in leases.glob("*.lease") if leases.exists() else []:  # finished users' leases (never a live one)
        lease = read_record(p)
        with contextlib.suppress(OSError):
            if lease is None or lease.get("released") or now - p.stat().st_mtime > STALE:
                p.unlink()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"the teacher server of {spec['model']} was stopped (SIGTERM)"))
    t0 = time.time()
    proc, url = _start_engine(spec, where, log, poll)
    ready = time.time()
    address = {"id": server_id, "url": url, "model": spec["model"], "host": socket.gethostname(), "pid": os.getpid(),
               "job": os.environ.get("SLURM_JOB_ID"), "started": ready}  # fmt: skip
    write_record(where / "address.json", address)
    log(f"teacher server of {spec['model']} up at {url} in {ready - t0:.0f} s (id {server_id})")
    seen: set[str] = set()
    reason, needed_at, no_run_since = None, ready, None
    end_at = spec.get("end_at") or job_end()  # (the spec's: the tests')
    # at most half its job's time: a limit shorter than the margin must not relay servers at once
    handover = min(60 * spec.get("handover_minutes", default("teacher_serving.handover_minutes")),
                   (end_at - t0) / 2 if end_at else 0.0)  # fmt: skip
    successor: dict | None = None
    try:
        while reason is None:
            if proc.poll() is not None:
                raise TeacherServerError(f"the engine exited with {proc.returncode}; see {where / 'engine.log'}")
            now = time.time()
            live, users, _ = read_leases(leases, now)
            seen |= users
            alive = live_runs(results, now)
            if live or pending(where, alive):
                needed_at = now
                if end_at and successor is None and now >= end_at - handover:  # its users outlive its job
                    successor = _launch_successor(spec, where, log) or {}  # {}: none (it serves on to its limit)
                    if successor:
                        log(f"{(end_at - now) / 60:.0f} min before its time limit: launched its successor {successor['id']}")
            if successor:
                found = live_server(where, spec["model"])
                if found and found["id"] != server_id:
                    reason = f"handed over to {found['id']} before its time limit"
                    break
            runs_alive = bool(live) or bool(wanting_runs(where, alive))
            no_run_since = None if runs_alive else (no_run_since or now)
            reason = stop_reason(now, needed_at, runs_alive, no_run_since, 60 * spec.get("idle_minutes", default("teacher_serving.idle_minutes")),
                                 grace)  # fmt: skip
            if reason is None:
                time.sleep(poll)
        served = requests_answered(url)
    finally:
        if (read_record(where / "address.json") or {}).get("id") == server_id:  # only its own address
            (where / "address.json").unlink(missing_ok=True)
        _stop(proc)
    record = {"id": server_id, "model": spec["model"], "url": url, "ready_s": round(ready - t0, 1),
              "up_s": round(time.time() - ready, 1), "stopped": reason, "users": sorted(seen), "requests": served}  # fmt: skip
    log(f"teacher server of {spec['model']} stopped: {reason}; {served} requests from {len(seen)} users")
    log(json.dumps(record))
    return record


def requests_answered(url: str) -> int | None:
    """Completions the server answered (vLLM's ``vllm:request_success_total`` on /metrics)."""
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:request_success_total")))  # fmt: skip


def _stop(proc: subprocess.Popen) -> None:
    """The engine's whole process group: vLLM's engine core runs in a process of its own."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
