"""Run untrusted programs (model-generated code) in a contained child process.

Containment: a new session and process group killed as a whole at the wall-clock limit; a private
temporary working directory; rlimits on CPU time, address space, processes and file size; a scrubbed
environment; as root, a fresh network namespace and the privileges of ``nobody``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
NOBODY = 65534


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 6.0
    cpu_seconds: int = 6
    memory_bytes: int = 1 << 30
    processes: int = 32
    file_bytes: int = 1 << 20
    output_bytes: int = 1 << 16


@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _contain(limits: Limits, workdir: str):
    def setup() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.geteuid() == 0:
            try:
                ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)
            except OSError:
                pass
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        os.chdir(workdir)

    return setup


def _world_executable(path: str) -> bool:
    """Can an unprivileged user run ``path``? (every parent directory searchable, file executable)"""
    p = Path(os.path.realpath(path))
    try:
        return all(q.stat().st_mode & 0o001 for q in [p, *p.parents])
    except OSError:
        return False


def sandbox_python() -> str:
    """The interpreter for untrusted code: ours, or, when we drop root privileges and ours lives
    where ``nobody`` cannot reach (a venv under /root), the system Python."""
    if os.geteuid() != 0:
        return sys.executable
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and _world_executable(candidate):
            return os.path.realpath(candidate)
    raise RuntimeError("no Python interpreter that an unprivileged sandbox user can execute")


def run_program(source: str, stdin: str = "", limits: Limits = Limits()) -> Outcome:
    """Run ``source`` with the current Python interpreter inside the sandbox."""
    with tempfile.TemporaryDirectory(prefix="scout-sandbox-") as tmp:
        os.chmod(tmp, 0o777)
        prog = Path(tmp) / "prog.py"
        prog.write_text(source)
        os.chmod(prog, 0o644)
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sandbox_python(), "-I", str(prog)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=env,
                cwd=tmp,
                start_new_session=True,
                preexec_fn=_contain(limits, tmp),
            )
            timed_out = False
            try:
                proc.communicate(stdin.encode(), timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BrokenPipeError:
                pass
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        read = lambda p: p.read_bytes()[: limits.output_bytes].decode("utf-8", "replace")  # noqa: E731
        return Outcome(None if timed_out else proc.returncode, read(out_path), read(err_path), timed_out)
