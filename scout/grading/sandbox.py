"""Run untrusted programs (model-generated code) in a contained child process.

Each program runs in fresh Linux namespaces where the host allows them (as root always; as an
ordinary user through an unprivileged user namespace):

- PID: the program sees only its own processes, so it cannot signal or inspect the grader, and
  when the sandbox ends the kernel kills everything left in it, daemons that called setsid included;
- network: only a loopback device that is down;
- mount: the whole file system is read-only except a small private tmpfs working directory;
  ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run`` are empty (no sockets of other programs to
  connect to), and ``/proc`` shows only the sandbox;
- as root, the program runs as ``nobody`` with no supplementary groups.

Always, whatever the host allows: its own session and process group killed as a whole at the
wall-clock limit; rlimits on CPU time, address space, processes and file size; a scrubbed
environment; output read back only up to a cap.

Process tree: the grader forks a *keeper* (outside the namespaces, the process the grader waits
for and kills), which forks the namespace's init (a tiny reaper, PID 1, killed by the kernel when
the keeper dies), which forks the program (PID 2) and waits for it. The program therefore gets
ordinary signal semantics, which PID 1 would not.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

NOBODY = 65534
UID_BASE, UID_SPAN = 1_000_000_000, 1 << 30  # root's sandbox users: one per sandbox (below 2^31)
_SANDBOXES = itertools.count()
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x1000, 0x4000, 1 << 18
SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}.get(os.uname().machine)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
TMPFS_BYTES = 64 << 20


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 6.0
    cpu_seconds: int = 6
    memory_bytes: int = 1 << 30
    processes: int = 32
    file_bytes: int = 1 << 20
    output_bytes: int = 1 << 16
    # descriptors open at once: each memfd (RAM, outside RLIMIT_AS) holds at most file_bytes, so
    # together at most open_files x file_bytes (64 MiB) where 20,000 inherited ones allowed 19.5 GiB
    open_files: int = 64


@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _readonly_everywhere() -> None:
    """Make every mount of this (private) mount namespace read-only (Linux >= 5.12)."""
    if SYS_MOUNT_SETATTR is None:
        raise OSError(errno.ENOSYS, "mount_setattr is unknown on this architecture")
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    _check(
        _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
        "mount_setattr /",
    )


def _exit_status(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _supervise(child: int) -> None:
    """Wait for ``child`` (reaping any orphans on the way) and exit with its status; never returns."""
    try:
        os.closerange(3, 1 << 16)  # above all the exec-error pipe, so the grader's Popen() returns
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                os._exit(_exit_status(status))
    except BaseException:  # noqa: BLE001 - a supervisor must exit, never fall through to exec
        os._exit(125)


HIDDEN = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home")
HIDE_ENV = "SCOUT_SANDBOX_HIDE"  # more folders to hide (os.pathsep-separated), e.g. a results folder
DATA_ENVS = ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE")  # Hugging Face's caches: benchmarks' tests
SYSTEM = ("/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@cache
def _hidden_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Places the program should not see, each replaced by an empty tmpfs: shared scratch places
    (and the sockets in them), home folders, the grader's working directory (where the results
    and the benchmarks' expected values live), Hugging Face's caches where their variables name
    them, and any folder named in $SCOUT_SANDBOX_HIDE (the workflow names its results and data
    folders there, wherever they are); and the
    folders inside them the interpreter needs (a venv), which are bound back in place. Facts of
    the host, worked out once per process, not per program."""
    python = sandbox_python()
    needed = [os.path.dirname(os.path.realpath(python))]
    if python == sys.executable:
        needed += [os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]
    extra = [p for p in os.environ.get(HIDE_ENV, "").split(os.pathsep) if p]
    extra += [os.environ[v] for v in DATA_ENVS if os.environ.get(v)]
    hidden = []
    for d in (*HIDDEN, tempfile.gettempdir(), os.getcwd(), os.path.expanduser("~"), *extra):
        d = os.path.realpath(d)
        system = d == "/" or any(_under(s, d) for s in SYSTEM)  # never an ancestor of /usr, /etc, ...
        if os.path.isdir(d) and not system and not any(_under(d, h) for h in hidden):
            hidden = [h for h in hidden if not _under(h, d)] + [d]
    keep = tuple(sorted({n for n in needed if any(_under(n, d) and n != d for d in hidden)}))
    return tuple(d for d in hidden if not any(_under(d, n) for n in needed)), keep


def _namespaces(workdir: str, source: str | None, hidden: tuple[str, ...], keep: tuple[str, ...]) -> None:
    """In the keeper: enter new namespaces, build the read-only view with a tmpfs working
    directory holding the program, then fork init and the program (which returns to exec). For a
    batch (``source`` None) init itself returns to exec: the batch runner is the namespace's PID 1."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWUSER if uid else 0)
    _check(_libc.unshare(flags), "unshare")
    if uid:  # identity mapping: the program keeps the user's uid and loses every capability at exec
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    kept = {k: os.open(k, os.O_PATH) for k in keep}  # handles that outlive the tmpfs laid over them
    for d in hidden:
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0755")
    for k, fd in kept.items():
        os.makedirs(k, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(workdir, exist_ok=True)
    _readonly_everywhere()
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_BYTES},mode=0777")
    if source is not None:
        prog = Path(workdir) / "prog.py"
        prog.write_text(source)
        prog.chmod(0o644)
    init = os.fork()
    if init:
        _supervise(init)
    # PID 1 of the new namespace: dies with the keeper, taking every process of the sandbox along
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if source is None:
        return
    program = os.fork()
    if program:
        _supervise(program)


def program_uid() -> int:
    """The unprivileged uid (and gid) a sandbox of root's runs its programs as: one of its own (by
    this process and a count of its sandboxes), not a shared ``nobody``. RLIMIT_NPROC counts a uid's
    processes across the host, so with one uid for every concurrent sandbox a fork bomb in one left
    no process for an honest program's thread in another, and so did enough honest ones at once."""
    return UID_BASE + (os.getpid() * 1024 + next(_SANDBOXES) % 1024) % UID_SPAN


def _seal_user_namespaces(libc: ctypes.CDLL) -> None:
    """As the program's own (unprivileged) user, enter a user namespace in which no further one can
    be made, then give up the capabilities entering it gave. With a user namespace of its own a
    program could mount a tmpfs and hold RAM outside its memory limit. Where the host refuses the
    program a user namespace, it refuses the program too, and nothing is done. The batch runner
    does the same (``scout.grading.runner``, which imports nothing of the package)."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER) != 0:
        return
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # a change of uid made /proc/self root's; the exec would undo it
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    Path("/proc/sys/user/max_user_namespaces").write_text("0")  # this namespace's own limit
    header, caps = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0), (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, caps), "capset")


def _limit(limits: Limits, workdir: str, uid: int, isolate: bool) -> None:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if isolate:
        _seal_user_namespaces(_libc)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")  # no set-uid binary gives privileges back
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    os.chdir(workdir)


def _contain(limits: Limits, workdir: str, source: str, isolate: bool):
    hidden, keep = _hidden_dirs() if isolate else ((), ())
    uid = program_uid()  # here, in the keeper: inside the sandbox's PID namespace every pid is alike

    def setup() -> None:
        if isolate:
            _namespaces(workdir, source, hidden, keep)
        _limit(limits, workdir, uid, isolate)

    return setup


@cache
def namespaces_available() -> bool:
    """Can this host give sandboxes their own PID, network and mount namespaces?"""
    try:
        out = _launch("print('ok')", "", Limits(wall_seconds=20), isolate=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.ok and out.stdout.strip() == "ok"


def isolation() -> str:
    """One line for logs: what containment this host gives untrusted programs."""
    user = "as an unprivileged uid of its own" if os.geteuid() == 0 else "as the calling user"
    if namespaces_available():
        hidden = ", ".join(_hidden_dirs()[0]) or "nothing"
        return (
            f"sandbox: own PID, network and mount namespaces (read-only file system, tmpfs workdir, "
            f"hidden: {hidden}), {user}, with no user namespace of its own to make and no set-uid privileges"
        )
    return (
        f"sandbox: DEGRADED, no namespaces on this host (rlimits, process group, scrubbed environment), {user}; "
        "generated code could reach the network and signal the grader's user's processes"
    )


def _world_executable(path: str) -> bool:
    """Can an unprivileged user run ``path``? (every parent directory searchable, file executable)"""
    p = Path(os.path.realpath(path))
    try:
        return all(q.stat().st_mode & 0o001 for q in [p, *p.parents])
    except OSError:
        return False


@cache
def sandbox_python() -> str:
    """The interpreter for untrusted code: ours, or, when we drop root privileges and ours lives
    where ``nobody`` cannot reach (a venv under /root), the system Python. Programs run there with
    its modules only: a benchmark whose sandboxed setup or calls import numpy needs it installed
    (Debian: python3-numpy; ``evaluate.check_sandbox`` says so before generating)."""
    if os.geteuid() != 0:
        return sys.executable
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and _world_executable(candidate):
            return os.path.realpath(candidate)
    raise RuntimeError("no Python interpreter that an unprivileged sandbox user can execute")


def _environment(workdir: Path) -> dict[str, str]:
    """All a sandboxed program inherits: nothing of the grader's environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    return env | {f"{lib}_NUM_THREADS": "1" for lib in ("OMP", "OPENBLAS", "MKL")}  # numpy within RLIMIT_AS


def _launch(source: str, stdin: str, limits: Limits, isolate: bool) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="scout-sandbox-") as tmp:
        os.chmod(tmp, 0o711)  # the sandbox user may pass through to its working directory, no more
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        os.chmod(workdir, 0o777)  # not through mkdir: its mode is cut by the umask
        if not isolate:  # with namespaces the program is written into the sandbox's own tmpfs
            (workdir / "prog.py").write_text(source)
            os.chmod(workdir / "prog.py", 0o644)
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sandbox_python(), "-I", "prog.py"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=_environment(workdir),
                cwd=tmp,
                start_new_session=True,
                preexec_fn=_contain(limits, str(workdir), source, isolate),
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

        def read(p: Path) -> str:
            with open(p, "rb") as f:
                return f.read(limits.output_bytes).decode("utf-8", "replace")

        return Outcome(None if timed_out else proc.returncode, read(out_path), read(err_path), timed_out)


def run_program(source: str, stdin: str = "", limits: Limits = Limits()) -> Outcome:
    """Run Python ``source`` in the sandbox, feeding it ``stdin``."""
    return _launch(source, stdin, limits, isolate=namespaces_available())


BATCH_PROGRAMS = 64  # programs per batch sandbox at most


@cache
def _runner_source() -> str:
    return Path(__file__).with_name("runner.py").read_text()


def _run_batch(jobs: list[tuple[str, str, Limits]]) -> Iterator[Outcome]:
    """One sandbox, the runner as its PID 1, the programs in turn; their outcomes as they come
    (one held at a time, however much each printed). Fewer than the jobs if the batch died or ran
    past the sum of their wall-clock limits."""
    batch = {"uid": program_uid() if os.geteuid() == 0 else None}
    deadline = sum(lim.wall_seconds for _, _, lim in jobs) + 5 + 0.2 * len(jobs)
    hidden, keep = _hidden_dirs()
    with tempfile.TemporaryDirectory(prefix="scout-sandbox-") as tmp:
        os.chmod(tmp, 0o711)
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        batch["workdir"] = str(workdir)
        with open(Path(tmp) / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sandbox_python(), "-I", "-c", _runner_source()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=_environment(workdir),
                cwd=tmp,
                start_new_session=True,
                preexec_fn=lambda: _namespaces(str(workdir), None, hidden, keep),
            )

            def kill() -> None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(deadline, kill)
            timer.start()
            # fed from a thread: the runner reads each program as it comes to it, and its results
            # must be read meanwhile, or both pipes fill
            feeder = threading.Thread(target=_feed, args=(proc.stdin, batch, jobs), daemon=True)
            feeder.start()
            try:
                for _ in jobs:
                    try:
                        r = json.loads(_exactly(proc.stdout, int(_exactly(proc.stdout, 16), 16)))
                        out, err = (_exactly(proc.stdout, n).decode("utf-8", "replace") for n in r["sizes"])
                        yield Outcome(r["returncode"], out, err, r["timed_out"])
                    except (ValueError, KeyError, TypeError, EOFError):
                        return
            finally:
                timer.cancel()
                kill()
                proc.stdout.close()
                proc.wait()
                feeder.join()


def _exactly(pipe, n: int) -> bytes:
    data = pipe.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _feed(pipe, batch: dict, jobs: list[tuple[str, str, Limits]]) -> None:
    """The runner's stdin (``scout.grading.runner``): the batch, then each program's header, source
    and input, each a frame of a 16-hex-digit length and its bytes."""

    def frame(data: bytes) -> bytes:
        return f"{len(data):016x}".encode() + data

    try:
        pipe.write(frame(json.dumps(batch).encode()))
        for source, stdin, limits in jobs:
            code, text = source.encode("utf-8", "surrogatepass"), stdin.encode("utf-8", "surrogatepass")
            header = {"limits": asdict(limits), "source_bytes": len(code), "stdin_bytes": len(text)}
            pipe.write(frame(json.dumps(header).encode()) + code + text)
            pipe.flush()
    except (BrokenPipeError, ValueError):  # the runner died or was killed, or the pipe was closed
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def run_programs(jobs: Sequence[tuple[str, str, Limits]]) -> Iterator[Outcome]:
    """Run many programs, each ``(source, stdin, limits)``, as :func:`run_program` would, at a
    fraction of its cost; their outcomes in order, as they come. One sandbox per batch
    (namespaces, mounts and an interpreter made once) whose PID 1 forks each program from a fresh
    interpreter that holds none of the batch's programs or outputs (``scout.grading.runner``).
    Programs of a batch run one after another, each with its own working directory, limits and
    session, and every process of one is killed before the next starts. Without namespaces, or for
    what a batch did not finish, each runs alone."""
    jobs = list(jobs)
    for start in range(0, len(jobs), BATCH_PROGRAMS):
        batch = jobs[start : start + BATCH_PROGRAMS]
        done = 0
        if namespaces_available():
            for outcome in _run_batch(batch):
                done += 1
                yield outcome
        for job in batch[done:]:
            yield run_program(*job)
