"""Code grading as the benchmarks' own harnesses do it: rows built by the catalogue's converters
from source rows in each benchmark's schema, graded in the sandbox."""

from __future__ import annotations

import base64
import json
import pickle
import re
import time
import zlib

import pytest

from scout import catalogue
from scout.grading import Grader
from scout.grading.code import RESULT_MARK, stdin_output_matches
from scout.grading.extract import extract_lcb, sanitize
from scout.grading.sandbox import Limits

FAST = Limits(wall_seconds=3, cpu_seconds=3, memory_bytes=512 << 20)


def fence(code: str, prose: str = "Here is my solution.") -> str:
    return f"{prose}\n```python\n{code}\n```\n"


def private(cases: list[dict]) -> str:
    """LiveCodeBench's encoding of private test cases."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def lcb_source(question_id: str, cases: list[dict], starter: str = "", func: str | None = None) -> dict:
    return {
        "question_title": "t",
        "question_content": "Solve it.",
        "platform": "leetcode" if func else "atcoder",
        "question_id": question_id,
        "contest_id": "c",
        "contest_date": "2024-09-01T00:00:00",
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(cases[:1]),
        "private_test_cases": private(cases[1:]),
        "metadata": json.dumps({"func_name": func} if func else {}),
    }


@pytest.fixture(scope="module")
def grader():
    with Grader(code_limits=FAST) as g:
        yield g


def grade(grader, row, cases: dict[str, bool]):
    got = grader.grade(list(cases), [row] * len(cases))
    assert dict(zip(cases, got, strict=True)) == cases


def test_lcb_stdin(grader):
    cases = [
        {"input": f"{a} {b}\n", "output": f"{a + b}\n", "testtype": "stdin"} for a, b in [(1, 2), (5, 7), (10**7, 1)]
    ]
    row = catalogue.lcb_v5(lcb_source("abc001_a", cases), 0)
    row["tests"]["timeout"] = 2
    assert row["tests"]["type"] == "stdin" and len(row["tests"]["cases"]) == 3
    assert row["prompt"][0]["role"] == "system" and "Read the inputs from stdin" in row["prompt"][1]["content"]
    read = "a, b = map(int, input().split())\n"
    grade(
        grader,
        row,
        {
            fence(read + "print(a + b)"): True,
            fence(read + "print(f'{a + b}.0')"): True,  # equal as decimals
            fence(read + "print(a + b, '  ')\nprint()"): True,  # stripped lines
            fence("q = deque(map(int, input().split()))\nprint(sum(q))"): True,  # LiveCodeBench's imports
            fence(read + "print(a + b)\nsys.exit(0)"): True,
            fence(read + "print(a + b)\nexit(1)"): False,  # runtime error after the output
            fence(read + "print(a - b)"): False,
            fence(read + "print(a + b)\nif a > 10**6:\n    while True: pass"): False,  # third case times out
            read + "print(a + b)": False,  # no code block: LiveCodeBench extracts nothing
            "```python\n" + read + "print(a + b)": False,  # one fence line only
            fence(read + "print(a + b, a)"): False,
        },
    )


def test_lcb_functional(grader):
    cases = [
        {"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"},
        {"input": "[]\n1", "output": "[]", "testtype": "functional"},
        {"input": "[-1]\n1", "output": "[0]", "testtype": "functional"},
    ]
    starter = "class Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        "
    row = catalogue.lcb_v5(lcb_source("3001", cases, starter, "addAll"), 0)
    row["tests"]["timeout"] = 1
    assert row["tests"]["fn_name"] == "addAll" and "starter code" in row["prompt"][1]["content"]
    cls = "class Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        return {}"
    grade(
        grader,
        row,
        {
            fence(cls.format("[x + k for x in nums]")): True,
            fence(cls.format("tuple(x + k for x in nums)")): True,  # tuples compare as lists
            fence(cls.format("[x + k for x in nums] if nums else None")): False,
            fence(cls.format("[x - k for x in nums]")): False,
            fence(cls.format("[x + k for x in nums] if nums != [-1] else [0, 0]")): False,
            fence(
                cls.replace("return {}", "while not nums:\n            pass\n        return [x + k for x in nums]")
            ): False,
            fence(cls.format("nums[0]")): False,  # raises on the empty list
            fence("def addAll(nums, k):\n    return [x + k for x in nums]"): True,  # a top-level function
            fence(f"print({RESULT_MARK!r} + '[4, 5]')\n" + cls.format("None")): False,  # cannot forge results
        },
    )


def test_lcb_functional_deadline_is_per_case(grader):
    cases = [{"input": str(i), "output": str(i), "testtype": "functional"} for i in range(4)]
    row = catalogue.lcb_v5(lcb_source("3002", cases, "class Solution:\n    def f(self, x):\n", "f"), 0)
    row["tests"]["timeout"] = 1
    slow = fence("import time\nclass Solution:\n    def f(self, x):\n        time.sleep(0.6)\n        return x")
    t0 = time.perf_counter()
    assert grader.grade([slow], [row]) == [True]  # 4 x 0.6 s: over one case's deadline in total, not per case
    assert time.perf_counter() - t0 > 2.4


HE_PROMPT = '''from typing import List


def mean_gap(numbers: List[float]) -> float:
    """ Mean absolute difference between consecutive numbers.
    >>> mean_gap([1.0, 2.0, 4.0])
    1.5
    """
'''
HE_TEST = """

import numpy as np

def is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
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
    inputs = [[[1.0, 2.0, 4.0]], [[0.1, 0.2, 0.3]], [[5.0, 5.0]], [[3.0, 1.0]]]
    results = [1.5, 0.1, 0.0, 2.0]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)
"""


def test_humaneval_plus(grader):
    row = catalogue.humaneval_plus(
        {"task_id": "HumanEval/999", "prompt": HE_PROMPT, "entry_point": "mean_gap", "test": HE_TEST}, 0
    )
    assert "self-contained Python script" in row["prompt"][0]["content"]
    body = "def mean_gap(numbers):\n    gaps = [abs(b - a) for a, b in zip(numbers, numbers[1:])]\n    return sum(gaps) / len(gaps)"
    grade(
        grader,
        row,
        {
            fence(body): True,  # 0.1 only within tolerance: numpy's allclose
            fence(body + "\n\nprint(mean_gap([1.0, 2.0]))\nwhile True: pass"): True,  # sanitized away
            fence(body + "\n\nif __name__ == '__main__':\n    raise SystemExit(1)"): True,
            fence("def mean_gap(numbers: List[float]) -> float:\n    return 1.5"): False,
            fence(body.replace("abs(b - a)", "b - a")): False,
            "I cannot solve this.": False,
        },
    )


def test_mbpp(grader):
    src = {
        "task_id": 2,
        "text": "Write a function to find the shared elements from the given two lists.",
        "code": "",
        "test_list": [
            "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
            "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
        ],
        "test_setup_code": "BIG = 10",
        "challenge_test_list": [],
    }
    row = catalogue.mbpp(src, 0)
    assert "Your code should pass these tests" in row["prompt"][0]["content"]
    grade(
        grader,
        row,
        {
            fence("def similar_elements(a, b):\n    return tuple(set(a) & set(b))"): True,
            fence("def similar_elements(a, b):\n    assert BIG == 10\n    return set(a) & set(b)"): True,  # setup
            fence("def similar_elements(a, b):\n    return set(a) | set(b)"): False,
            fence("def similar_elements(a, b):\n    return a"): False,
        },
    )


def test_a_large_right_value_is_graded_right_and_its_decoding_has_a_deadline(grader, monkeypatch):
    """A call returning 1.2 MB of text: the calls program's output may hold 4 MiB of values, and the
    file-size limit now lets it write them (it stopped at 1 MiB: "File too large", graded wrong). A
    forged results line of a set whose ints all share one hash decodes in quadratic time (3.6 s at
    870 kB): values are decoded under the check's deadline (an alarm is armed while they decode)."""
    row = catalogue.mbpp({"task_id": 9, "text": "Repeat a.", "code": "", "test_list":
                          ["assert len(rep(1200000)) == 1200000"], "test_setup_code": "",
                          "challenge_test_list": []}, 0)  # fmt: skip
    grade(grader, row, {fence("def rep(n):\n    return 'a' * n"): True, fence("def rep(n):\n    return 'a'"): False})
    import signal

    from scout.grading import values
    from scout.grading.code import check_values

    armed, decode = [], values.decode

    def watched(data, depth=0):
        left = signal.alarm(0)  # the seconds left on the deadline's alarm (0: none armed)
        signal.alarm(left)
        armed.append(left)
        return decode(data, depth)

    monkeypatch.setattr(values, "decode", watched)
    assert check_values({"calls": ["rep(1)"], "check": {"asserts": ["assert _v[0] == 'a'"]}},
                        [["value", values.encode("a")]], seconds=30)  # fmt: skip
    assert armed and all(0 < left <= 30 for left in armed)


def test_extraction_rules():
    two = "a\n```python\nx = 1\n```\nthen\n```python\ny = 2\n```\ndone"
    assert extract_lcb(two) == "y = 2"
    assert extract_lcb("```python\nx = 1") == ""
    assert extract_lcb("<think>```python\nbad\n```</think>\n```python\ngood\n```") == "good"
    code = "import math\nfrom typing import List\nK = 3\ndef f(x):\n    return x\nclass A:\n    pass\nprint(f(1))\nf(2)\nif __name__ == '__main__':\n    f(3)"
    assert (
        sanitize(fence(code))
        == "import math\n\nfrom typing import List\n\nK = 3\n\ndef f(x):\n    return x\n\nclass A:\n    pass"
    )
    assert sanitize(fence("def f(x):\n    return x\n\ndef g(:\n")) == "def f(x):\n    return x"


@pytest.mark.parametrize(
    "got, want, same",
    [
        ("3\n", "3", True),
        ("3.0", "3", True),
        ("1 2.50\n", "1 2.5", True),
        ("0.3333", "0.33333", False),
        ("3\n\n", "3", True),
        ("3\n4", "3", False),
        ("Yes", "yes", False),
        ("a  b", "a b", False),
    ],
)
def test_stdin_output_rule(got, want, same):
    assert stdin_output_matches(got, want) is same


def test_lcb_private_cases_refuse_pickled_objects():
    evil = base64.b64encode(zlib.compress(pickle.dumps(Limits()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        catalogue.lcb_cases(evil)


def test_taco_training_rows_convert_to_both_kinds():
    stdin = catalogue.deepcoder_taco({"problem": "p", "tests": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})}, 3)
    assert stdin["tests"]["type"] == "stdin" and stdin["tests"]["cases"] == [{"input": "1\n", "output": "2\n"}]
    fn = catalogue.deepcoder_taco(
        {"problem": "p", "tests": json.dumps({"inputs": [[1, [2, 3]]], "outputs": [[5]], "fn_name": "f"})}, 4
    )
    assert fn["tests"]["cases"] == [{"input": "1\n[2, 3]", "output": "5"}] and fn["tests"]["fn_name"] == "f"
    assert catalogue.check_row(stdin) is None and catalogue.check_row(fn) is None


def test_a_test_type_the_grader_cannot_run_is_refused_not_graded_wrong(tmp_path):
    """A row with assert-style tests (the format before preparation, or a user's own benchmark)
    used to come back False in silence: a benchmark of 0% and no reason."""
    from scout.grading import Grader
    from scout.prepare import load_rows

    row = {"id": "mine-1", "domain": "code", "prompt": "Write f.", "tests": {"type": "assert", "asserts": ["assert f(1) == 2"]}}
    with Grader() as g, pytest.raises(ValueError, match=r"row 'mine-1': assert-style tests can be forged .* "
                                                        r"the grader accepts calls, stdin and functional"):  # fmt: skip
        g.grade(["```python\ndef f(x):\n    return x + 1\n```"], [row])
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps(row) + "\n")
    with pytest.raises(catalogue.DataError, match=r"row 1: assert-style tests .* the grader accepts calls, stdin and functional"):
        load_rows(data)


def he_check(exp) -> dict:
    """The tests of a one-input HumanEval+ task expecting ``exp``, converted from the hub's text
    (whose own ``assertion`` lacks evalplus's type and length guards: HE_TEST's)."""
    test = HE_TEST.split("def check")[0] + f"def check(candidate):\n    inputs = [[0]]\n    results = [{exp!r}]\n" + (
        "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n"
    )
    return catalogue.humaneval_plus({"task_id": "HumanEval/998", "prompt": "def g(x):\n    pass\n", "entry_point": "g",
                                     "test": test}, 0)["tests"]  # fmt: skip


@pytest.mark.parametrize(
    "out, exp, right",  # evalplus/evaluate.py's unsafe_execute, worked by hand
    [
        (None, [], False),  # is_floats([]) is False there: no tolerance, no exact match (the hub's text: True)
        (None, (), False),
        ([], [], True),
        ((1.0, 2.0), [1.0, 2.0], False),  # not equal, so the types must agree before the tolerance
        ([1.0, 2.0000001], [1.0, 2.0], True),  # within atol 1e-6
        ([1.0], [1.0, 2.0], False),  # lengths must agree (allclose would broadcast)
        (1.0, [1.0, 1.0], False),  # a scalar for a list (allclose would broadcast it)
        (2, 1.9999999, False),  # int for a float
        (True, 1.0000001, False),
        (0.1 + 0.2, 0.3, True),
        (3, 3, True),
        (10**9 + 1, 10**9, False),  # ints compare exactly
    ],
)
def test_humaneval_plus_compares_as_evalplus_does(out, exp, right):
    from scout.grading import values
    from scout.grading.code import check_values

    assert check_values(he_check(exp), [["value", values.encode(out)]]) is right


def test_humaneval_plus_keeps_the_raised_tolerance_for_later_inputs_as_evalplus_does():
    """evalplus raises its one atol variable to 1e-6 at the first float result and keeps it: an int
    result after a float one is then compared within tolerance (1,000,000,001 for 1,000,000,000)."""
    from scout.grading import values
    from scout.grading.code import check_values

    test = HE_TEST.split("def check")[0] + (
        "def check(candidate):\n    inputs = [[0], [1]]\n    results = [1.5, 1000000000]\n"
        "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n"
    )
    tests = catalogue.humaneval_plus({"task_id": "HumanEval/997", "prompt": "def g(x):\n    pass\n", "entry_point": "g",
                                      "test": test}, 0)["tests"]  # fmt: skip
    got = [["value", values.encode(1.5)], ["value", values.encode(10**9 + 1)]]
    assert check_values(tests, got) is True
    assert check_values(tests, [got[0], ["value", values.encode(10**9 + 101)]]) is False


def test_a_none_answer_to_an_empty_list_is_wrong_end_to_end(grader):
    tests = he_check([])
    row = {"id": "HumanEval/998", "domain": "code", "prompt": "p", "tests": tests}
    got = grader.grade([fence("def g(x):\n    return None"), fence("def g(x):\n    return []")], [row, row])
    assert got == [False, True]


CODE_ROW = {"id": "r1", "domain": "code", "prompt": "Write f."}
CALLS = {"type": "calls", "calls": ["f(1)"], "check": {"asserts": ["assert _v[0] == 2"]}}


@pytest.mark.parametrize(
    "row, problem",
    [
        ({**CODE_ROW, "domain": "physics", "answer": "2"}, "unknown domain 'physics'"),
        ({**CODE_ROW, "tests": json.dumps(CALLS)}, "'tests' is str, not an object"),
        (CODE_ROW, "'tests' is missing, not an object"),
        ({**CODE_ROW, "tests": {**CALLS, "check": {}}}, "a 'check' with 'asserts'"),
        ({**CODE_ROW, "tests": {**CALLS, "check": {"replay": "check"}}}, "a 'replay' check needs .* 'code'"),
        ({**CODE_ROW, "tests": {**CALLS, "extract": "magic"}}, "unknown 'extract' 'magic'"),
        ({**CODE_ROW, "tests": {"type": "stdin", "cases": [{"input": "1\n"}]}}, "each with an 'input' and an 'output'"),
        ({**CODE_ROW, "tests": {"type": "functional", "fn_name": "f", "cases": [{"input": "1", "output": 2}]}},
         "each with an 'input' and an 'output' string"),
        ({**CODE_ROW, "tests": {**CALLS, "timeout": "10"}}, "'timeout' must be a positive number"),
    ],
)
def test_malformed_test_data_is_refused_on_load_and_by_the_grader_naming_the_row(tmp_path, row, problem):
    """Each used to be graded False in silence, or to fail without naming the row."""
    from scout.grading import Grader
    from scout.prepare import load_rows

    assert re.search(problem, catalogue.check_row(row))
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({**CODE_ROW, "tests": CALLS}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(catalogue.DataError, match=r"mine.jsonl: row 2: .*" + problem):
        load_rows(data)
    with Grader() as g, pytest.raises(ValueError, match=r"row 'r1': .*" + problem):
        g.grade(["```python\ndef f(x):\n    return x + 1\n```"], [row])


def test_the_worker_reports_tests_it_cannot_run_instead_of_a_verdict():
    """Past the grader's checks (a CodeGrader used alone), a worker that cannot grade says so."""
    from scout.grading.code import CodeGrader

    grader = CodeGrader(FAST, workers=1)
    try:
        with pytest.raises(ValueError, match=r"cannot grade with tests .*: KeyError: 'calls'"):
            grader.grade([fence("def f(x):\n    return x")], [{"type": "calls", "check": {"asserts": []}}])
        assert grader.grade([fence("def f(x):\n    return x + 1")], [CALLS]) == [True]  # the worker lives on
    finally:
        grader.close()


FIND_ZERO_PROMPT = '''import math


def poly(xs: list, x: float):
    """The polynomial with coefficients xs at x."""
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])


def find_zero(xs: list):
    """One zero of the polynomial with coefficients xs (even count, leading one non-zero)."""
'''
BISECT = """def find_zero(xs):
    lo, hi = -1.0, 1.0
    while poly(xs, lo) * poly(xs, hi) > 0:
        lo, hi = 2 * lo, 2 * hi
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2
        if poly(xs, mid) * poly(xs, lo) > 0:
            lo = mid
        else:
            hi = mid
    return lo"""


def find_zero_row() -> dict:
    """HumanEval/32 as the hub exports it: the loop's oracle unpacks the float root (a TypeError for
    every program); its stored results are the reference's roots."""
    ns: dict = {}
    exec(FIND_ZERO_PROMPT + "\n" + BISECT, ns)
    inputs = [[[1, 2]], [[-6, 11, -6, 1]], [[3, -4, 0, 2]]]
    results = [ns["find_zero"](*inp) for inp in inputs]
    test = HE_TEST.split("def check")[0] + (
        f"def check(candidate):\n    inputs = {inputs!r}\n    results = {results!r}\n"
        "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
        "        assert _poly(*candidate(*inp), inp) <= 0.0001\n"
    )
    return catalogue.humaneval_plus({"task_id": "HumanEval/32", "prompt": FIND_ZERO_PROMPT,
                                     "entry_point": "find_zero", "test": test}, 0)  # fmt: skip


def test_find_zero_is_graded_by_evalplus_root_oracle(grader):
    """HumanEval/32: evalplus asserts ``_poly(xs, out) <= 1e-4`` and then the stored root within
    1e-4; the reference is right, a value off the root or another root is wrong."""
    grade(
        grader,
        find_zero_row(),
        {
            fence(BISECT): True,
            fence(BISECT.replace("1e-10", "1e-6")): True,  # another reference-like root within 1e-4
            fence("def find_zero(xs):\n    return 0.0"): False,  # poly(xs, 0) = xs[0] > 1e-4 for [1, 2]
            # x = 3 is a root of the cubic, but not the stored one (x = 1): evalplus compares both
            fence(BISECT + "\n\n_f = find_zero\ndef find_zero(xs):\n    return 3.0 if xs == [-6, 11, -6, 1] else _f(xs)"): False,
        },
    )


def test_find_zero_oracle_is_signed_as_in_evalplus():
    """evalplus writes ``_poly(*inp, out) <= atol`` without abs(): a value where the polynomial is
    negative passes the oracle, and only the comparison with the stored root catches it."""
    from scout.grading import values
    from scout.grading.code import check_values

    tests = find_zero_row()["tests"]
    roots = [-0.5, 1.0]
    ns: dict = {}
    exec(FIND_ZERO_PROMPT + "\n" + BISECT, ns)
    exact = [ns["find_zero"](*inp) for inp in ([[1, 2]], [[-6, 11, -6, 1]], [[3, -4, 0, 2]])]
    assert abs(exact[0] - roots[0]) < 1e-9 and abs(exact[1] - roots[1]) < 1e-9
    ok = [["value", values.encode(x)] for x in exact]
    assert check_values(tests, ok) is True
    # 1 + 2x at x = -0.50004 is -8e-5 < 0: within the oracle, and within 1e-4 of the stored root
    near = [["value", values.encode(-0.50004)], *ok[1:]]
    assert check_values(tests, near) is True
    # at x = -0.6 the polynomial is -0.2 (the signed oracle passes), but the stored root is 0.1 away
    far = [["value", values.encode(-0.6)], *ok[1:]]
    assert check_values(tests, far) is False


def test_the_longest_parsable_run_is_searched_within_a_budget(monkeypatch):
    """evalplus's fallback tries runs of lines longest first: an answer cut off at its end is found
    in a few parses, as without a budget; 1,600 lines that never parse stop after PARSE_BUDGET
    parses (they took 1.3 million, 9 s, in the trainer's reward path)."""
    import ast
    import sys
    import types

    extract = sys.modules["scout.grading.extract"]  # the package's name `extract` is its function
    parses = []

    def counted(source, *args, **kwargs):
        parses.append(1)
        return ast.parse(source, *args, **kwargs)

    monkeypatch.setattr(extract, "ast", types.SimpleNamespace(parse=counted))  # this module's parses only
    cut = "def f(x):\n    return x + 1\n\ndef g(y):\n    return f(y) * (2 +"
    assert extract._longest_parsable(cut) == "def f(x):\n    return x + 1\n" and len(parses) < 10
    parses.clear()
    assert extract._longest_parsable("\n".join([")"] * 1600)) == "" and len(parses) == extract.PARSE_BUDGET
