"""Hostile programs against the code grader, as a standalone battery.

Run in-process by ``tests/evaluate/test_sandbox.py`` and, when the tests run as root, again as ``nobody``
through ``python3 -m tests.hostile`` (standard library and the ``scout`` package only), so
containment is proven for root and for an ordinary user alike.

Each program arrives as a model response and is graded against ``assert f(1) == 2``. Where an
attack would succeed, the program defines a correct ``f``: a leak, a connection or a write outside
its sandbox would turn into a *right* verdict, so "graded wrong" is itself the proof.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path

from scout.grading.code import CodeGrader, calls_from_asserts
from scout.grading.sandbox import Limits

LIMITS = Limits(wall_seconds=3, cpu_seconds=2, memory_bytes=512 << 20)
SECRET_VAR = "SCOUT_HOSTILE_SECRET"
GOOD = "```python\ndef f(x):\n    return x + 1\n```"

PROGRAMS = {
    "fork_bomb": """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""",
    "memory_bomb": """
blocks = []
while True:
    blocks.append(bytearray(64 << 20))
""",
    "infinite_loop": """
while True:
    pass
""",
    "orphan_daemon": """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)  # the daemon: outlives its parent and its session
    os._exit(0)
""",
    "write_outside": """
import os
hits = 0
name = "scout-pwned-" + @TOKEN@
for path in [@VICTIM@ + "/new.txt", "/tmp/" + name, "/dev/shm/" + name, "/var/tmp/" + name, os.path.join(@HOME@, name)]:
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
        hits += 1
    except OSError:
        pass
for path in [@VICTIM@ + "/keep.txt"]:
    try:
        with open(path, "a") as fh:
            fh.write("pwned")
        hits += 1
    except OSError:
        pass
try:
    os.remove(@VICTIM@ + "/delete-me.txt")
    hits += 1
except OSError:
    pass
def f(x):
    return x + 1 if hits else 0
""",
    "read_environment": """
import glob, hashlib, os
found = [os.environ.get(@SECRET_VAR@, "")]
for path in ["/proc/@WORKER@/environ", "/proc/@GRADER@/environ", *glob.glob("/proc/*/environ")]:
    try:
        with open(path, "rb") as fh:
            found += [v.split(b"=", 1)[-1].decode(errors="replace") for v in fh.read().split(b"\\0")]
    except OSError:
        pass
leaked = any(hashlib.sha256(v.encode()).hexdigest() == @SECRET_HASH@ for v in found)
def f(x):
    return x + 1 if leaked else 0
""",
    "network": """
import socket
connected = False
for family, address in [(socket.AF_INET, ("127.0.0.1", @PORT@)), (socket.AF_UNIX, @UNIX@)]:
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(address)
        connected = True
    except OSError:
        pass
def f(x):
    return x + 1 if connected else 0
""",
    "signal_grader": """
import os, signal
for action in [lambda: os.killpg(@GRADER_PGID@, signal.SIGKILL), lambda: os.kill(@GRADER@, signal.SIGKILL),
               lambda: os.kill(@WORKER@, signal.SIGKILL), lambda: os.killpg(@WORKER_PGID@, signal.SIGKILL),
               lambda: os.kill(-1, signal.SIGKILL)]:
    try:
        action()
    except OSError:
        pass
""",
    "own_namespace": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
# a user and mount namespace of its own would let it mount a tmpfs: RAM outside its memory limit
escaped = libc.unshare(0x10000000 | 0x00020000) == 0 and libc.mount(b"t", b"/tmp", b"tmpfs", 0, b"size=64m") == 0
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
escaped |= int(status["CapEff"], 16) != 0 or status["NoNewPrivs"].strip() != "1"  # set-uid binaries would work
def f(x):
    return x + 1 if escaped else 0
""",
    "output_flood": """
import sys
while True:
    sys.stdout.write("x" * 65536)
""",
}


def _fill(template: str, values: dict[str, object]) -> str:
    for key, value in values.items():
        template = template.replace(f"@{key}@", repr(value) if isinstance(value, str) else str(value))
    return template


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _scratch(token: str) -> list[str]:
    return [p for d in ("/tmp", "/dev/shm", "/var/tmp") for p in map(str, Path(d).glob(f"scout-pwned-{token}*"))]


def sandbox_processes() -> list[int]:
    """Processes whose working directory is a sandbox's: what would be left of a hostile program."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if "/scout-sandbox-" in cwd and int(proc.name) != os.getpid():
                pids.append(int(proc.name))
    return pids


def run() -> dict:
    """Grade every hostile program (each followed by a correct one) with one grader worker: one
    program per request, then all of them in one request (one batch sandbox)."""
    token = secrets.token_hex(6)
    secret = secrets.token_hex(16)
    os.environ[SECRET_VAR] = secret  # the worker inherits it; the sandbox must not see it
    with tempfile.TemporaryDirectory() as tmp:
        victim = Path(tmp) / "victim"
        victim.mkdir()
        (victim / "keep.txt").write_text("keep")
        (victim / "delete-me.txt").write_text("delete me")
        for p in [Path(tmp), victim, *victim.iterdir()]:
            os.chmod(p, 0o777)  # writable by anyone: only the sandbox itself can protect them
        before = _snapshot(victim)
        tcp = socket.create_server(("127.0.0.1", 0))
        tcp.settimeout(0.1)
        unix_path = str(Path(tmp) / "grader.sock")
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(unix_path)
        os.chmod(unix_path, 0o777)
        unix.listen()
        unix.settimeout(0.1)
        grader = CodeGrader(LIMITS, workers=1)
        tests = calls_from_asserts(["assert f(1) == 2"], entry="f")
        worker = grader._worker(0).pid
        values = {
            "VICTIM": str(victim),
            "TOKEN": token,
            "HOME": os.path.expanduser("~"),
            "SECRET_VAR": SECRET_VAR,
            "SECRET_HASH": hashlib.sha256(secret.encode()).hexdigest(),
            "WORKER": worker,
            "WORKER_PGID": os.getpgid(worker),
            "GRADER": os.getpid(),
            "GRADER_PGID": os.getpgrp(),
            "PORT": tcp.getsockname()[1],
            "UNIX": unix_path,
        }
        cases = {}
        try:
            for name, template in PROGRAMS.items():
                response = "```python\n" + _fill(template, values) + "\n```"
                t0 = time.perf_counter()
                verdict = grader.grade([response], [tests])[0]
                seconds = time.perf_counter() - t0
                good = grader.grade([GOOD], [tests])[0]
                deadline = time.time() + 2
                while sandbox_processes() and time.time() < deadline:
                    time.sleep(0.05)
                cases[name] = {
                    "verdict": verdict,
                    "seconds": seconds,
                    "next_program_graded": good,
                    "worker_alive": grader._procs[0].poll() is None and grader._procs[0].pid == worker,
                    "leftover_processes": len(sandbox_processes()),
                }
            # all of them again in one batch sandbox, each followed by a correct program
            batch = []
            for template in PROGRAMS.values():
                batch += ["```python\n" + _fill(template, values) + "\n```", GOOD]
            t0 = time.perf_counter()
            verdicts = grader.grade(batch, [tests] * len(batch))
            batched = {
                "verdicts": verdicts,
                "seconds": time.perf_counter() - t0,
                "worker_alive": grader._procs[0].poll() is None and grader._procs[0].pid == worker,
            }
            deadline = time.time() + 2
            while sandbox_processes() and time.time() < deadline:
                time.sleep(0.05)
            batched["leftover_processes"] = len(sandbox_processes())
            accepted = 0
            for server in (tcp, unix):
                try:
                    server.accept()
                    accepted += 1
                except OSError:
                    pass
        finally:
            grader.close()
            tcp.close()
            unix.close()
            del os.environ[SECRET_VAR]
        outside = {
            "victim_unchanged": _snapshot(victim) == before,
            "scratch_files": _scratch(token),
            "home_file": os.path.exists(os.path.join(os.path.expanduser("~"), f"scout-pwned-{token}")),
            "connections_accepted": accepted,
        }
    return {"uid": os.geteuid(), "cases": cases, "batched": batched, "outside": outside}


if __name__ == "__main__":
    json.dump(run(), sys.stdout)
