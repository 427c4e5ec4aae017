"""PID 1 of a batch sandbox (``scout.grading.sandbox.run_programs``): runs untrusted programs one
after another, each in a forked child of this fresh interpreter, with nothing of one left when
the next starts.

It is executed as source (``python -I -c``) inside the namespaces the keeper made, so it imports
the standard library only. It never holds a program or its input in its own memory: each arrives
on stdin after a small header, and the kernel moves it straight into that program's files
(``os.splice``), and its output goes out the same way. So a program, forked from this process,
finds none of its batch's other programs or their outputs in its copy of this process's memory
(a sibling's source or results line would be an answer to copy), and never an expected output,
which never enters the sandbox.

Per program: a fresh working directory; its own session; privileges dropped to the batch's own
unprivileged uid where the sandbox runs as root; the rlimits of its ``Limits``; stdin, stdout and
stderr as files. At the wall-clock limit, or when it ends, every other process of the namespace is
killed (``kill(-1)`` from PID 1 spares PID 1 only), so no daemon of one program meets the next. As
PID 1 this process receives no signal from inside the namespace that it has not asked for, and it
is not dumpable, so a program can neither kill nor trace it.

Protocol: on stdin, frames of a 16-hex-digit length and that many bytes: first the batch's
``{"workdir", "uid"}`` (JSON), then per program its header ``{"limits", "source_bytes",
"stdin_bytes"}`` (JSON) followed by the raw source and stdin bytes. On stdout, per program in
order, a frame ``{"returncode", "timed_out", "sizes"}`` followed by that many bytes of its stdout
and of its stderr, spliced from its files as its source was spliced in.
"""

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
CLONE_NEWUSER, LINUX_CAPABILITY_VERSION_3 = 0x10000000, 0x20080522


def _exit_status(status):
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _read_exact(fd, n):
    """``n`` bytes from ``fd`` (a frame header: small); EOFError where the stream ends first."""
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _frame(fd):
    return _read_exact(fd, int(_read_exact(fd, 16), 16))


def _splice(src, dst, n):
    """``n`` bytes from ``src`` to ``dst`` (one of them a pipe), moved by the kernel: they never pass
    through this process's memory, which every later program of the batch inherits."""
    while n:
        moved = os.splice(src, dst, n)
        if not moved:
            raise EOFError
        n -= moved


def _receive(path, n):
    """A program's next ``n`` bytes of stdin (its source, or its input) into a new file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _splice(0, fd, n)
    finally:
        os.close(fd)


def _send(header, paths, cap):
    """A program's outcome on stdout: the header's frame, then at most ``cap`` bytes of each file
    (its stdout, its stderr), their sizes in the header. Spliced, as its source came in: a program's
    output (a calls row's values) must not stay in this process's memory for the next to find."""
    fds = []
    for path in paths:
        try:
            fds.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW))
        except OSError:
            fds.append(None)
    try:
        sizes = [0 if fd is None else min(os.fstat(fd).st_size, cap) for fd in fds]
        data = json.dumps({**header, "sizes": sizes}).encode()
        frame = memoryview(f"{len(data):016x}".encode() + data)
        while frame:
            frame = frame[os.write(1, frame) :]
        for fd, n in zip(fds, sizes, strict=True):
            if n:
                _splice(fd, 1, n)
    finally:
        for fd in fds:
            if fd is not None:
                os.close(fd)


def _seal_user_namespaces(libc):
    """``scout.grading.sandbox._seal_user_namespaces``, for a program that is not executed: enter a
    user namespace in which no further one can be made, and give up the capabilities it gave."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER) != 0:
        return  # the host refuses this user one: the program is refused too
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")
    header, caps = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0), (ctypes.c_uint32 * 6)()
    if libc.capset(header, caps) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _program(limits, rundir, files, uid, libc):
    """In the forked child: become the program, run it, exit with its status. Never returns."""
    try:
        os.setsid()
        fds = [
            os.open(files[0], os.O_RDONLY),
            os.open(files[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            os.open(files[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        ]
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a freshly executed program is
        _seal_user_namespaces(libc)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
        for res, value in (
            (resource.RLIMIT_CPU, limits["cpu_seconds"]),
            (resource.RLIMIT_AS, limits["memory_bytes"]),
            (resource.RLIMIT_FSIZE, limits["file_bytes"]),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NPROC, limits["processes"]),
            (resource.RLIMIT_NOFILE, limits["open_files"]),
        ):
            resource.setrlimit(res, (value, value))
        os.chdir(rundir)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
        sys.argv = ["prog.py"]
    except BaseException:  # noqa: BLE001 - a child that cannot be set up must never run the program
        os._exit(125)
    path = os.path.join(rundir, "prog.py")
    code = 0
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        scope = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
        exec(compile(source, path, "exec"), scope)  # noqa: S102 - the sandboxed program itself
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001, S110 - a full disk or a closed stream: the status stands
        pass
    os._exit(code & 0xFF)


def _wait(pid, seconds):
    """True if ``pid`` ended within ``seconds``."""
    fd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, int(seconds * 1000))))
    finally:
        os.close(fd)


def _reap_all(child):
    """Kill every process of the namespace but this one; wait for them all. The child's status.
    Killed again before each wait: a process forked while the last kill went round dies too."""
    status = None
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            return status
        if pid == child:
            status = st


def _wipe(path):
    """Remove what a program left, whatever modes it set."""
    if not os.path.isdir(path) or os.path.islink(path):
        try:
            os.remove(path)
        except OSError:
            pass
        return
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def main():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1: signals without a handler never arrive
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    batch = json.loads(_frame(0))
    workdir, uid = batch["workdir"], batch["uid"]
    private = os.path.join(workdir, ".io")
    i = 0
    while True:
        try:
            header = json.loads(_frame(0))
        except EOFError:
            break
        limits = header["limits"]
        os.mkdir(private, 0o700)
        rundir = os.path.join(workdir, f"run{i}")
        os.mkdir(rundir)
        os.chmod(rundir, 0o777)
        files = [os.path.join(private, name) for name in ("stdin", "stdout", "stderr")]
        _receive(os.path.join(rundir, "prog.py"), header["source_bytes"])
        os.chmod(os.path.join(rundir, "prog.py"), 0o644)
        _receive(files[0], header["stdin_bytes"])
        os.chmod(files[0], 0o644)
        pid = os.fork()
        if pid == 0:
            _program(limits, rundir, files, uid, libc)
        finished = _wait(pid, limits["wall_seconds"])
        status = _reap_all(pid)
        returncode = None if not finished or status is None else _exit_status(status)
        _send({"returncode": returncode, "timed_out": not finished}, files[1:], limits["output_bytes"])
        for name in os.listdir(workdir):  # all a program could have left for the next one
            _wipe(os.path.join(workdir, name))
        i += 1


if __name__ == "__main__":
    main()
