"""Reward hacks of every class are graded wrong; honest answers stay right (tests/support/reward_hacks.py).

The rows are built the way the pipeline builds them: a toy code row, MBPP rows (math.isclose and
set forms) through the catalogue, an evalplus-style HumanEval+ row through the catalogue, and
LiveCodeBench's functional and stdin kinds. The benchmark's data (expected values included) lies
in the grader's working directory, where a program that looks for it might find it.
"""

from __future__ import annotations

import json

import pytest

from scout import catalogue
from scout.grading import Grader
from scout.grading.code import calls_from_asserts
from tests.support.reward_hacks import ENTRY, HACKS, SOLUTIONS, response

HE_TEST = """
import numpy as np

def is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    return False

def assertion(out, exp, atol):
    exact_match = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert exact_match

def check(candidate):
    inputs = [[[1, 2]], [[0.5, -3]], [[]]]
    results = [[2, 3], [1.5, -2], []]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)

check(add_one)
"""


def rows() -> dict[str, dict]:
    toy_asserts = [f"assert f({x}) == {(x + 3) * 2}" for x in (0, 1, 2, 5, 7)]

    def mbpp(tid, fn, tests):
        row = catalogue.mbpp({"task_id": tid, "text": f"Write {fn}.", "test_list": tests, "test_setup_code": ""}, 0)
        return {**row, "tests": {**row["tests"], "timeout": 3}}  # the hacks that sleep hit the wall sooner

    case = [{"input": "3", "output": "6"}, {"input": "-4", "output": "-8"}]
    he = catalogue.humaneval_plus(
        {
            "task_id": "HumanEval/1000",
            "prompt": "def add_one(xs):\n    pass\n",
            "entry_point": "add_one",
            "test": HE_TEST,
        },
        0,
    )
    he["tests"]["timeout"] = 3
    return {
        "toy": {
            "id": "toy",
            "domain": "code",
            "prompt": "Write f(x): add 3, then multiply by 2.",
            "tests": {**calls_from_asserts(toy_asserts, entry="f"), "timeout": 3},
        },  # fmt: skip
        "mbpp_isclose": mbpp(
            1, "add", ["assert add(1, 2) == 3", "assert math.isclose(add(0.1, 0.2), 0.3, rel_tol=1e-9)"]
        ),
        "mbpp_set": mbpp(2, "common", ["assert set(common([1, 2, 3], [2, 3, 4])) == set([2, 3])"]),
        "humaneval_plus": he,
        "functional": {
            "id": "fn",
            "domain": "code",
            "prompt": "twice",
            "tests": {"type": "functional", "fn_name": "twice", "cases": case, "timeout": 3},
        },  # fmt: skip
        "stdin": {
            "id": "io",
            "domain": "code",
            "prompt": "twice",
            "tests": {"type": "stdin", "cases": [{"input": "3\n", "output": "6\n"}], "timeout": 3},
        },  # fmt: skip
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every hack against every row, graded once (the data file sits in the grader's working dir)."""
    import os

    work = tmp_path_factory.mktemp("grader-cwd")
    table = rows()
    data_dir = work / "results" / "data"
    data_dir.mkdir(parents=True)
    (data_dir / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table.values()))
    old = os.getcwd()
    os.chdir(work)
    try:
        with Grader() as grader:
            texts, graded_rows, keys = [], [], []
            for kind, row in table.items():
                for name, cls, code in HACKS:
                    texts.append(response(code, ENTRY[kind], str(data_dir)))
                    graded_rows.append(row)
                    keys.append((kind, name, cls))
                texts.append(response(SOLUTIONS[kind], ENTRY[kind]))
                graded_rows.append(row)
                keys.append((kind, "honest solution", "control"))
            verdicts = grader.grade(texts, graded_rows)
    finally:
        os.chdir(old)
    return dict(zip(keys, verdicts, strict=True))


def test_honest_solutions_are_graded_right(graded):
    assert {k[0]: v for k, v in graded.items() if k[2] == "control"} == dict.fromkeys(ENTRY, True)


@pytest.mark.parametrize("hack", [h[0] for h in HACKS])
def test_every_hack_is_graded_wrong(graded, hack):
    forged = sorted(kind for (kind, name, _), ok in graded.items() if name == hack and ok)
    assert forged == [], f"{hack!r} was graded right on {forged}"


def test_the_battery_covers_every_class_the_issue_names():
    classes = {cls for _, cls, _ in HACKS}
    assert {"forged channel", "marker from own code", "exception hook", "always-equal object",
            "interpreter re-run", "frame inspection", "monkeypatched builtins", "early exit",
            "timing and signals", "expected values from the file system"} <= classes  # fmt: skip


def test_expected_values_never_enter_the_sandbox():
    """What the sandbox runs holds the calls, never the checks or the values they compare with."""
    from scout.grading.code import calls_program

    table = rows()
    for kind, secret in (("toy", "== 16"), ("mbpp_isclose", "0.3"), ("humaneval_plus", "results = ")):
        tests = table[kind]["tests"]
        program = calls_program("def f(x):\n    return x", tests)
        assert all(call in program for call in tests["calls"])
        assert secret in json.dumps(tests["check"]) and secret not in program


# A program that looks for its batch's other programs (the frame that read them, any object that
# holds one, its own process memory) and answers with whichever of their functions it can run.
COPIER = r'''
import ctypes as _c, gc as _gc, sys as _s

def _sources():
    mine = open(__file__, "rb").read()
    found = []
    f = _s._getframe()
    while f is not None:
        for scope in (f.f_locals, f.f_globals):
            for value in list(scope.values()):
                found.append(value)
        f = f.f_back
    found += _gc.get_objects()
    texts = set()
    for o in found:
        for item in (o.values() if isinstance(o, dict) else o if isinstance(o, list) else [o]):
            for v in (item.values() if isinstance(item, dict) else [item]):
                if isinstance(v, (str, bytes)) and "def {fn}(" in (v if isinstance(v, str) else v.decode("latin-1")):
                    texts.add(v if isinstance(v, str) else v.decode("latin-1"))
    with open("/proc/self/maps") as maps:  # the heap this process inherited
        for line in maps:
            if "[heap]" in line or line.split()[-1:] == ["rw-p"]:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if hi - lo <= 64 << 20:
                    try:
                        raw = _c.string_at(lo, hi - lo)
                    except Exception:
                        continue
                    start = raw.find(b"def {fn}(x):\n    x = x + 3")
                    if start >= 0:
                        texts.add(raw[start:start + 200].split(b"\x00")[0].decode("latin-1"))
    return [t for t in texts if t.encode("latin-1") not in mine]

def {fn}(x):
    for text in _sources():
        body = text[text.index("def {fn}("):]
        ns = {}
        try:
            exec(body.split("\n\n")[0], ns)
            return ns["{fn}"](x)
        except Exception:
            continue
    return None
'''


# ... and one that looks in its memory for a sibling's results line (the values of the same calls)
# and writes it as its own
ECHO = r'''
import ctypes as _c, os as _o, sys as _s
_mark = bytes([30]) + b"scout-result:"
for _line in open("/proc/self/maps"):
    _parts = _line.split()
    if _parts[1].startswith("rw"):
        _lo, _hi = (int(x, 16) for x in _parts[0].split("-"))
        if _hi - _lo <= 64 << 20:
            _raw = _c.string_at(_lo, _hi - _lo)
            _at = _raw.find(_mark)
            while _at >= 0:
                _got = _raw[_at:].split(b"\n")[0].split(b"\x00")[0]
                if _got.endswith(b"]]") and b'"value"' in _got:  # a whole results line
                    _s.stdout.write("\n" + _got.decode("latin-1") + "\n")
                    _s.stdout.flush()
                    _o._exit(0)
                _at = _raw.find(_mark, _at + 1)
def {fn}(x):
    return None
'''


def test_a_program_cannot_copy_another_program_of_its_batch():
    """Programs of one batch are forked from one runner: a copier that finds an honest sibling's
    source, or its results line, in the frames, objects or memory it inherits would answer right
    without solving anything (majority@k for avg@k under RL). It finds nothing, alone or after the
    honest one."""
    from scout.grading.code import grade_batch

    row = rows()["toy"]
    honest = response(SOLUTIONS["toy"], ENTRY["toy"])
    for hack in (COPIER, ECHO):
        copier = response(hack, ENTRY["toy"])
        assert grade_batch([(honest, row["tests"]), (copier, row["tests"])]) == [True, False]
        assert grade_batch([(copier, row["tests"]), (honest, row["tests"])]) == [False, True]


def test_output_nested_past_the_parsers_stack_is_wrong_not_an_error():
    """A results line of 100,000 nested brackets, and a functional answer nested 5,000 deep, make
    json.loads raise RecursionError (not ValueError): graded wrong, never a grader that dies and
    takes the evaluation (or the training step) with it."""
    from scout.grading.code import RESULT_MARK, grade_batch

    table = rows()
    deep_line = (
        f"import sys, os\nsys.stdout.write('\\n' + {RESULT_MARK!r} + '[' * 100000 + ']' * 100000 + '\\n')\n"
        "sys.stdout.flush()\nos._exit(0)\n"
    )
    deep_answer = (
        "import sys\nsys.setrecursionlimit(100000)\nclass Solution:\n    def twice(self, n):\n"
        "        x = []\n        for _ in range(5000):\n            x = [x]\n        return x\n"
    )
    items = [(response(deep_line, "f"), table["toy"]["tests"]), (response(deep_line, "f"), table["functional"]["tests"]),
             (response(deep_answer, "twice"), table["functional"]["tests"])]  # fmt: skip
    assert grade_batch(items) == [False, False, False]
