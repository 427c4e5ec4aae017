"""Code grading: extract the program from a response as the benchmark's own harness does, then run
the benchmark's tests on it in the sandbox. All tests must pass.

Test kinds (the ``tests`` field of a code row; see docs/data-and-evaluation.md):

- ``calls``: the sandboxed program (``setup``, the candidate, a driver) only computes the values of
  the ``calls`` the tests make and writes them out as plain data (``scout.grading.values``); the
  benchmark's own checks then run on those values here, outside the sandbox, in a process that
  never runs candidate code (toy world, MBPP, HumanEval+). Expected values never enter the
  sandbox, and nothing the program prints, exits with or returns as an object decides the verdict.
  ``check`` is either ``{"setup", "asserts"}`` (assert statements over ``_v[i]``, the value of
  call i) or ``{"code", "replay"}`` (a test function, e.g. HumanEval+'s ``check(candidate)``,
  called with a stand-in that hands back the computed values in order).
- ``stdin``: ``cases`` of ``{input, output}``; the program runs once per case on its input and its
  output must match line by line (LiveCodeBench's rule: stripped lines equal, or equal as decimals
  token by token). Stops at the first failure.
- ``functional``: ``fn_name`` and ``cases`` whose input is one JSON value per line (the arguments)
  and whose output is JSON. ``Solution().fn_name`` (LeetCode style) or the top-level function is
  called once per case, in one process as LiveCodeBench does, with a per-case deadline; results
  are compared outside the sandbox, so the program never sees an expected output.

``setup`` (optional for every kind) is prepended, e.g. LiveCodeBench's standard-library imports.
``timeout`` is the per-case (or per-program for ``calls``) limit in seconds. Assert-style tests
(``assert``) are converted to ``calls`` when data is prepared (:func:`calls_from_asserts`).
"""

from __future__ import annotations

import ast
import functools
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from decimal import Decimal, InvalidOperation

import scout.grading.values as values
from scout.grading.extract import extract
from scout.grading.sandbox import BATCH_PROGRAMS, Limits, Outcome, run_program, run_programs

RESULT_MARK = "\x1escout-result:"


class Unconvertible(ValueError):
    """Assert-style tests that cannot become calls and checks (the reason says why)."""


def _entry_calls(tree: ast.AST, entry: str) -> list[ast.Call]:
    """Outermost calls of ``entry`` in an assert, in source order."""
    found: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry:
            found.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _defined_names(setup: str) -> set[str]:
    """Python's builtins and the names the setup code defines (functions, classes, imports, globals)."""
    import builtins

    names = set(dir(builtins))
    for node in ast.walk(ast.parse(setup or "")):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def entry_point(asserts: list[str], setup: str = "") -> str:
    """The function the asserts test: the one name they call that neither Python's builtins nor the
    setup code define."""
    defined = _defined_names(setup)
    names = []
    for text in asserts:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in defined:
                names.append(node.func.id)
    distinct = list(dict.fromkeys(names))
    if len(distinct) != 1:
        raise Unconvertible(f"the asserts call {distinct or 'no function'}; expected exactly one function under test")
    return distinct[0]


class _ValueSlots(ast.NodeTransformer):
    """Replaces the given call nodes by ``_v[i]``."""

    def __init__(self, slots: dict[int, int]):
        self.slots = slots

    def visit_Call(self, node):  # noqa: N802 - ast's naming
        if id(node) in self.slots:
            return ast.Subscript(ast.Name("_v", ast.Load()), ast.Constant(self.slots[id(node)]), ast.Load())
        return self.generic_visit(node)


def calls_from_asserts(asserts: list[str], setup: str = "", entry: str | None = None) -> dict:
    """Assert statements -> the calls of the function under test (computed in the sandbox) and the
    same asserts over their values (run outside): ``assert f(2) == 5`` becomes the call ``f(2)``
    and the check ``assert _v[0] == 5``."""
    try:
        entry = entry or entry_point(asserts, setup)
        calls, checks = [], []
        for text in asserts:
            tree = ast.parse(text)
            if not tree.body or not all(isinstance(stmt, ast.Assert) for stmt in tree.body):
                raise Unconvertible(f"not an assert statement: {text[:80]!r}")
            found = _entry_calls(tree, entry)
            if not found:
                raise Unconvertible(f"{text[:80]!r} does not call {entry}")
            slots = _ValueSlots({id(node): len(calls) + i for i, node in enumerate(found)})
            calls += [ast.unparse(node) for node in found]
            checks.append(ast.unparse(ast.fix_missing_locations(slots.visit(tree))))
    except SyntaxError as exc:
        raise Unconvertible(f"an assert does not parse: {exc.msg}") from exc
    return {
        "type": "calls",
        "setup": setup,
        "calls": calls,
        "check": {"setup": _check_setup(checks, setup), "asserts": checks},
    }


def _check_setup(checks: list[str], setup: str) -> str:
    """The checks run outside, without the candidate's globals: standard-library modules they use
    (``math.isclose``; MBPP leaves the import to the answer) are imported for them. A check that
    needs any other name from the answer cannot run outside."""
    known = _defined_names(setup) | {"_v"}
    imports = []
    for check in checks:
        tree = ast.parse(check)
        local = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known | local:
                if node.id not in sys.stdlib_module_names:
                    raise Unconvertible(f"the check {check[:60]!r} uses {node.id!r}, which only the answer defines")
                imports.append(node.id)
                known.add(node.id)
    return "\n".join([*(f"import {m}" for m in imports), setup or ""]).strip()


_CALLS_DRIVER = """

{encoder}

_scout_calls = [{calls}]


def _scout_run_calls():
    import sys
    out = []
    for call in _scout_calls:
        try:
            value = call()
        except BaseException as exc:
            out.append(["raised", type(exc).__name__])
            continue
        data = _scout_encode(value)
        out.append(["value", data] if data is not None else ["opaque", type(value).__name__])
    sys.stdout.write("\\n" + {mark!r} + _scout_dumps(out) + "\\n")
    sys.stdout.flush()


_scout_run_calls()
"""


def calls_program(code: str, tests: dict) -> str:
    """Setup, the candidate, then a driver that evaluates each call and writes the values out."""
    encoder = (
        values.encoder_source()
        .replace("encode(", "_scout_encode(")
        .replace("dumps(", "_scout_dumps(")
        .replace("_quote", "_scout_quote")
    )
    # each call compiled with the program, as a module-level lambda: it sees the program's globals
    # as eval(call, globals()) would, at a tenth of the cost of compiling 50 calls one by one
    calls = "".join(f"\n        lambda: ({expr}),\n" for expr in tests["calls"])
    driver = _CALLS_DRIVER.format(encoder=encoder, calls=calls, mark=RESULT_MARK)
    return "\n".join([tests.get("setup", ""), code, driver])


@functools.lru_cache(maxsize=512)
def _compiled(source: str):
    return compile(source, "<benchmark check>", "exec")


class _Deadline:
    """SIGALRM deadline for the trusted check (graders run checks in their main thread)."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, self._fire)
            signal.alarm(self.seconds)

    @staticmethod
    def _fire(*_):
        raise TimeoutError("benchmark check deadline")

    def __exit__(self, *exc):
        if threading.current_thread() is threading.main_thread():
            signal.alarm(0)


def check_values(tests: dict, results: list | None, seconds: int = 30) -> bool:
    """The verdict: every call returned a plain value, and the benchmark's checks pass on them.
    Runs here, outside the sandbox; ``results`` is the program's data, trusted for nothing."""
    if not isinstance(results, list) or len(results) != len(tests["calls"]):
        return False
    if not all(isinstance(item, list) and len(item) == 2 and item[0] == "value" for item in results):
        return False  # a call raised, or returned something that is not a plain value
    check = tests["check"]
    try:
        with _Deadline(seconds):  # decoding too: a set of colliding hashes costs quadratic time
            got = [values.decode(item[1]) for item in results]  # Malformed: not plain values
            if "replay" in check:
                ns: dict = {}
                exec(_compiled(check["code"]), ns)
                served = iter(got)
                count = [0]

                def candidate(*args, **kwargs):
                    count[0] += 1
                    return next(served)

                ns[check["replay"]](candidate)
                return count[0] == len(got)
            ns = {"_v": got}
            exec(_compiled(check.get("setup", "")), ns)
            for statement in check["asserts"]:
                exec(_compiled(statement), ns)
    except Exception:  # noqa: BLE001 - a failed assertion, or a check that cannot run on these values
        return False
    return True


def stdin_output_matches(got: str, expected: str) -> bool:
    """LiveCodeBench's comparison of a stdin program's output."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    want_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(want_lines):
        return False
    for a, b in zip(got_lines, want_lines, strict=True):
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except InvalidOperation:
            return False
    return True


_DRIVER = """

def _scout_run_cases():
    import json, signal, sys
    target = Solution() if "Solution" in globals() else None
    fn = getattr(target, {fn!r}) if target is not None else globals()[{fn!r}]

    def alarm(*_):
        raise TimeoutError("test case deadline")

    signal.signal(signal.SIGALRM, alarm)
    for text in json.loads(sys.stdin.read()):
        args = [json.loads(line) for line in text.split("\\n")]
        signal.alarm({seconds})
        try:
            result = fn(*args)
        finally:
            signal.alarm(0)
        if isinstance(result, tuple):
            result = list(result)
        print("\\n" + {mark!r} + json.dumps(result), flush=True)


_scout_run_cases()
"""


def functional_program(code: str, tests: dict, seconds: int) -> str:
    driver = _DRIVER.format(fn=tests["fn_name"], seconds=seconds, mark=RESULT_MARK)
    return "\n".join([tests.get("setup", ""), code, driver])


def _case_limits(limits: Limits, seconds: float, expected: str = "") -> Limits:
    room = max(limits.output_bytes, 2 * len(expected.encode()) + 4096)
    return replace(
        limits,
        wall_seconds=seconds,
        cpu_seconds=max(1, int(seconds + 0.999)),
        output_bytes=room,
        file_bytes=max(limits.file_bytes, room),
    )


TEST_TYPES = ("calls", "stdin", "functional")  # what grade_one runs; anything else is refused on load


def _job(response: str, tests: dict, limits: Limits) -> tuple[str, str, Limits] | None:
    """The one sandboxed run that decides a ``calls`` or ``functional`` row: (program, stdin,
    limits); None when the response holds no code."""
    kind = tests.get("type")
    if kind not in ("calls", "functional"):  # stdin rows run case by case (_grade_stdin)
        raise ValueError(f"unsupported test type {kind!r}; the grader accepts {', '.join(TEST_TYPES)}")
    code = extract(response, tests.get("extract", "fenced"))
    if not code.strip():
        return None
    seconds = float(tests.get("timeout", limits.wall_seconds))
    if kind == "calls":
        room = max(limits.output_bytes, 1 << 22)  # values of every call, however large (the output is a file)
        return calls_program(code, tests), "", replace(
            _case_limits(limits, seconds), output_bytes=room, file_bytes=max(limits.file_bytes, room)
        )
    cases = tests["cases"]
    total = seconds * (len(cases) + 1) + 5  # LiveCodeBench's global deadline
    expected = "".join(c["output"] for c in cases)
    program = functional_program(code, tests, max(1, int(seconds)))
    return program, json.dumps([c["input"] for c in cases]), _case_limits(limits, total, expected)


def _verdict(tests: dict, out: Outcome) -> bool:
    """A ``calls`` or ``functional`` row's verdict from its run, decided here, outside the sandbox."""
    if tests["type"] == "calls":
        return check_values(tests, values.results_line(RESULT_MARK, out.stdout))
    cases = tests["cases"]
    results = [line[len(RESULT_MARK) :] for line in out.stdout.split("\n") if line.startswith(RESULT_MARK)]
    if len(results) < len(cases):
        return False
    try:
        return all(json.loads(r) == json.loads(c["output"]) for r, c in zip(results, cases, strict=False))
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's (or ==) stack
        return False


def _grade_stdin(response: str, tests: dict, limits: Limits) -> bool:
    """One run per case, stopping at the first failure (a program that fails early costs little)."""
    code = extract(response, tests.get("extract", "fenced"))
    if not code.strip():
        return False
    seconds = float(tests.get("timeout", limits.wall_seconds))
    program = "\n".join([tests.get("setup", ""), code])
    for case in tests["cases"]:
        out = run_program(program, case["input"], _case_limits(limits, seconds, case["output"]))
        if not (out.ok and stdin_output_matches(out.stdout, case["output"])):
            return False
    return True


def grade_one(response: str, tests: dict, limits: Limits = Limits()) -> bool:
    if tests.get("type") == "stdin":
        return _grade_stdin(response, tests, limits)
    job = _job(response, tests, limits)
    return job is not None and _verdict(tests, run_program(*job))


def grade_batch(items: Sequence[tuple[str, dict]], limits: Limits = Limits()) -> list[bool]:
    """Verdicts of many responses, as :func:`grade_one` gives them: ``calls`` and ``functional``
    rows run together in batch sandboxes (``sandbox.run_programs``), ``stdin`` rows case by case."""
    verdicts = [False] * len(items)
    jobs, owners = [], []
    for i, (response, tests) in enumerate(items):
        if tests.get("type") == "stdin":
            verdicts[i] = _grade_stdin(response, tests, limits)
        elif (job := _job(response, tests, limits)) is not None:
            jobs.append(job)
            owners.append(i)
    for i, out in zip(owners, run_programs(jobs), strict=True):  # one outcome held at a time
        verdicts[i] = _verdict(items[i][1], out)
    return verdicts


class CodeGrader:
    """Grades programs through a few small worker processes (``python -m scout.grading.worker``).

    Sandboxed programs are then forked from a small worker instead of from a trainer holding
    hundreds of megabytes of tensors, which would make every fork slow.
    """

    def __init__(self, limits: Limits = Limits(), workers: int = 2):
        self.limits, self.workers = limits, workers
        self._procs: list[subprocess.Popen | None] = [None] * workers

    def _worker(self, i: int) -> subprocess.Popen:
        proc = self._procs[i]
        if proc is None or proc.poll() is not None:
            proc = subprocess.Popen(
                [sys.executable, "-m", "scout.grading.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            self._procs[i] = proc
        return proc

    def _run_slice(self, i: int, items: list[tuple[str, dict]]) -> list[bool]:
        out: list[bool] = []
        for start in range(0, len(items), BATCH_PROGRAMS):
            chunk = items[start : start + BATCH_PROGRAMS]
            proc = self._worker(i)
            try:
                proc.stdin.write(json.dumps({"items": chunk, "limits": asdict(self.limits)}) + "\n")
                proc.stdin.flush()
                verdicts = json.loads(proc.stdout.readline())
            except (BrokenPipeError, json.JSONDecodeError) as exc:
                proc.kill()
                raise RuntimeError(f"the code-grading worker died ({type(exc).__name__}); no verdict") from exc
            if isinstance(verdicts, dict):
                tests = json.dumps([t for _, t in chunk])[:200]
                raise ValueError(f"cannot grade with tests {tests}: {verdicts.get('error')}")
            out += [v is True for v in verdicts]
        return out

    def grade(self, responses: Sequence[str], tests: Sequence[dict]) -> list[bool]:
        items = list(zip(responses, tests, strict=True))
        n = max(1, min(self.workers, len(items)))
        slices = [items[i::n] for i in range(n)]
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(self._run_slice, range(n), slices))
        out = [False] * len(items)
        for i, res in enumerate(results):
            out[i::n] = res
        return out

    def close(self) -> None:
        for proc in self._procs:
            if proc is not None and proc.poll() is None:
                proc.stdin.close()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self._procs = [None] * self.workers


def grade_many(
    responses: Sequence[str], tests: Sequence[dict], limits: Limits = Limits(), workers: int = 2
) -> list[bool]:
    """Grade programs concurrently; each runs in its own sandboxed process."""
    grader = CodeGrader(limits, workers)
    try:
        return grader.grade(responses, tests)
    finally:
        grader.close()


def serve() -> None:
    """Worker loop: one JSON request (responses with their tests) per line in, one JSON list of
    verdicts per line out, or an ``{"error"}`` the grader raises: a request the worker cannot grade
    is never a verdict (the program's own failures are caught where it runs and come back as False)."""
    for line in sys.stdin:
        try:
            req = json.loads(line)
            out = grade_batch([(r, t) for r, t in req["items"]], Limits(**req["limits"]))
        except Exception as exc:  # noqa: BLE001 - reported to the grader, never a dead worker
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
