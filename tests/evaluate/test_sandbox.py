"""Containment of untrusted code: hostile programs are contained and graded wrong, the grader goes
on, and nothing outside the sandbox changes; as the user running the tests and, under root, as an
ordinary user (``nobody``) too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from scout.grading import sandbox
from tests.support import hostile

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(not sandbox.namespaces_available(), reason="this host gives no namespaces to unprivileged sandboxes"),
    pytest.mark.alone,  # counts every sandbox's processes on the host: no other test may grade meanwhile
]


def _as_nobody(tmp: Path) -> dict:
    """The battery in a fresh interpreter running as nobody, from a copy it can read."""
    copy = tmp / "src"
    shutil.copytree(ROOT / "scout", copy / "scout", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests" / "support").mkdir(parents=True)
    for name in ("__init__.py", "support/__init__.py", "support/hostile.py"):
        shutil.copy(ROOT / "tests" / name, copy / "tests" / name)
    for p in [tmp, *tmp.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(copy), "PYTHONPATH": str(copy), "LANG": "C.UTF-8"}
    cmd = ["setpriv", f"--reuid={sandbox.NOBODY}", f"--regid={sandbox.NOBODY}", "--clear-groups"]
    out = subprocess.run(
        [*cmd, sandbox.sandbox_python(), "-m", "tests.support.hostile"], cwd=copy, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module", params=["current user", "nobody"])
def battery(request):
    if request.param == "current user":
        return hostile.run()
    if os.geteuid() != 0:
        pytest.skip("already running as an ordinary user")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop to nobody")
    tmp = Path(tempfile.mkdtemp(prefix="scout-nobody-"))  # pytest's own temp root is private to root
    try:
        return _as_nobody(tmp)
    finally:
        shutil.rmtree(tmp)


@pytest.mark.parametrize("name", sorted(hostile.PROGRAMS))
def test_hostile_program_is_contained_and_graded_wrong(battery, name):
    case = battery["cases"][name]
    assert case["verdict"] is False
    assert case["worker_alive"], "the grader's worker was killed or replaced"
    assert case["next_program_graded"] is True, "the grader did not go on grading"
    assert case["leftover_processes"] == 0, "a process of the sandbox outlived it"
    assert case["seconds"] < hostile.LIMITS.wall_seconds + 3


def test_hostile_programs_in_one_batch_spoil_nothing_for_the_next(battery):
    batched = battery["batched"]
    assert batched["verdicts"] == [False, True] * len(hostile.PROGRAMS)
    assert batched["worker_alive"] and batched["leftover_processes"] == 0
    assert batched["seconds"] < len(hostile.PROGRAMS) * hostile.LIMITS.wall_seconds + 5


def test_nothing_outside_the_sandbox_changed(battery):
    outside = battery["outside"]
    assert outside["victim_unchanged"]
    assert outside["scratch_files"] == []
    assert not outside["home_file"]
    assert outside["connections_accepted"] == 0


def test_the_nobody_battery_ran_unprivileged(battery):
    if battery["uid"] != os.geteuid():
        assert battery["uid"] == sandbox.NOBODY


def test_isolation_line_names_what_is_contained():
    line = sandbox.isolation()
    assert "PID, network and mount namespaces" in line and "/tmp" in line


def test_sandbox_reads_stdin_and_caps_output():
    out = sandbox.run_program("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
    assert out.ok and out.stdout == "cba\n"
    flood = sandbox.run_program("print('x' * 10_000_000)", limits=hostile.LIMITS)
    assert not flood.ok and len(flood.stdout) <= hostile.LIMITS.output_bytes


MEMFDS = """
import os
held = []
try:
    while len(held) < 1000:
        fd = os.memfd_create("m")
        os.write(fd, b"x" * (1 << 20))
        held.append(fd)
except OSError as exc:
    print(len(held), exc.errno)
"""


def test_memory_in_files_of_ram_is_bounded_by_the_open_files_limit():
    """memfds are RAM outside RLIMIT_AS: 1 MiB each (the file-size limit) in as many as a program
    may hold open. With the inherited 20,000 descriptors that was 19.5 GiB from one program; the
    sandbox's 64 leave at most 64 MiB, alone and in a batch."""
    limits = sandbox.Limits(memory_bytes=256 << 20)
    alone = sandbox.run_program(MEMFDS, limits=limits)
    batched = next(iter(sandbox.run_programs([(MEMFDS, "", limits)])))
    for out in (alone, batched):
        held, errno = map(int, out.stdout.split())
        assert held < limits.open_files and errno == 24  # EMFILE: too many open files


ALONE_AND_BATCHED = [
    ("import sys\nprint(sys.stdin.read()[::-1])", "abc"),
    ("raise SystemExit(3)", ""),
    ("raise SystemExit('bye')", ""),
    ("1 / 0", ""),
    ("import sys\nprint(__name__, sys.argv, __file__.endswith('prog.py'), sys.flags.isolated)", ""),
    ("import os\nprint(os.getuid() == 0, sorted(k for k in os.environ if 'SECRET' in k))", ""),
    ("import atexit\natexit.register(print, 'at exit')\nprint('body')", ""),
    ("import os\nos.kill(os.getpid(), 9)", ""),
]


def test_a_batch_gives_what_running_alone_gives():
    """Same stdout, status and timeout flag for each program, whether it runs alone or batched."""
    limits = sandbox.Limits(wall_seconds=5)
    jobs = [(src, stdin, limits) for src, stdin in ALONE_AND_BATCHED]
    jobs.append(("while True:\n    pass", "", sandbox.Limits(wall_seconds=1, cpu_seconds=5)))
    batched = list(sandbox.run_programs(jobs))
    alone = [sandbox.run_program(*job) for job in jobs]
    for job, b, a in zip(jobs, batched, alone, strict=True):
        assert (b.returncode, b.stdout, b.timed_out) == (a.returncode, a.stdout, a.timed_out), job[0]
    assert batched[0].stdout == "cba\n" and batched[1].returncode == 3 and batched[3].returncode == 1
    assert "ZeroDivisionError" in batched[3].stderr and "bye" in batched[2].stderr
    assert batched[6].stdout == "body\nat exit\n" and batched[7].returncode == 128 + 9
    assert batched[-1].timed_out and batched[-1].returncode is None


def test_programs_of_a_batch_never_meet():
    """What one program leaves (files, a daemon, signals at PID 1) is gone or harmless for the next."""
    leave = """
import os, signal, time
open("mine.txt", "w").write("left")
try:
    open("../planted.txt", "w").write("left")
except OSError:
    pass
if os.fork() == 0:
    os.setsid()
    time.sleep(60)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
    try:
        os.kill(1, sig)
    except OSError:
        pass
print(os.getcwd())
"""
    look = """
import os
here = os.getcwd()
print(os.path.exists("mine.txt"), os.path.exists("../planted.txt"), sorted(os.listdir("..")) == [".io", os.path.basename(here)])
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [1, os.getpid()])
"""
    outs = list(sandbox.run_programs([(leave, "", sandbox.Limits()), (look, "", sandbox.Limits())]))
    assert outs[0].ok, outs[0].stderr
    assert outs[1].ok and outs[1].stdout == "False False True\nTrue\n", outs[1].stderr


def test_a_fork_bomb_leaves_a_concurrent_sandbox_its_processes():
    """RLIMIT_NPROC counts a uid's processes host-wide: where every sandbox ran as one `nobody`, a
    fork bomb in one left an honest program in another no thread to start. Each sandbox of root's
    has a uid of its own (as an ordinary user, the user namespace counts them apart)."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    honest = "import threading\nt = threading.Thread(target=lambda: print(sum(map(int, input().split()))))\nt.start()\nt.join()\n"
    limits = sandbox.Limits(wall_seconds=4, cpu_seconds=4, memory_bytes=256 << 20)
    got = {}
    side = threading.Thread(target=lambda: got.setdefault("bomb", sandbox.run_program(bomb, "", limits)))
    side.start()
    time.sleep(1.5)  # the bomb has taken every process it may by now
    out = sandbox.run_program(honest, "1 2\n", limits)
    side.join()
    assert got["bomb"].timed_out and out.ok and out.stdout == "3\n", out.stderr


def _outside_every_hidden_place() -> Path | None:
    """A new folder the sandbox shows unless told to hide it (not under /tmp, home or cwd)."""
    for parent in ("/srv", "/opt", "/mnt", "/var/lib"):
        try:
            return Path(tempfile.mkdtemp(prefix="scout-hide-", dir=parent))
        except OSError:
            continue
    return None


def test_the_results_and_data_folders_are_hidden_wherever_they_are(monkeypatch):
    """A results folder on a scratch file system, the data preparation's mirror and a Hugging Face
    cache hold benchmarks' tests; the workflow names the first two to the sandbox, Hugging Face's
    own variable the third. A folder beside them stays readable (the read-only file system)."""
    from scout import workflow

    root = _outside_every_hidden_place()
    if root is None:
        pytest.skip("no folder outside the sandbox's hidden places is writable here")
    try:
        for name in ("results", "mirror", "hf", "beside"):
            (root / name).mkdir()
            (root / name / "tests.json").write_text(name)
            os.chmod(root / name, 0o755)
            os.chmod(root / name / "tests.json", 0o644)
        os.chmod(root, 0o755)
        monkeypatch.setenv(sandbox.HIDE_ENV, "")
        monkeypatch.setenv("HF_HOME", str(root / "hf"))
        workflow.export_sandbox_hide({"data": {"mirror": str(root / "mirror")}}, str(root / "results"))
        assert workflow.SANDBOX_HIDE == sandbox.HIDE_ENV
        sandbox._hidden_dirs.cache_clear()
        read = (f"import os\nfor n in ('results', 'mirror', 'hf', 'beside'):\n"
                f"    p = os.path.join({str(root)!r}, n, 'tests.json')\n"
                f"    print(n, open(p).read() if os.path.exists(p) else '-')\n")  # fmt: skip
        for out in (sandbox.run_program(read), next(iter(sandbox.run_programs([(read, "", sandbox.Limits())])))):
            assert out.ok and out.stdout.split() == ["results", "-", "mirror", "-", "hf", "-", "beside", "beside"], out
    finally:
        sandbox._hidden_dirs.cache_clear()
        shutil.rmtree(root)
