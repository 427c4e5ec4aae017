"""Graders: malformed model output is graded wrong and never stops the caller."""

from __future__ import annotations

import time

import pytest

from scout.grading import Grader
from scout.grading.code import calls_from_asserts
from scout.grading.extract import extract_code
from scout.grading.math import MathGrader, _grade_item, grade_one, last_boxed, quick_verdict
from scout.grading.sandbox import Limits

FAST = Limits(wall_seconds=3, cpu_seconds=2, memory_bytes=512 << 20)


@pytest.mark.parametrize(
    "text, want",
    [
        ("so \\boxed{12}", "12"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\fbox{7}", "7"),
        ("no box at all", None),
        ("truncated \\boxed{12", None),
        ("\\boxed{3} and an unclosed \\boxed{4", "3"),
    ],
)
def test_last_boxed(text, want):
    assert last_boxed(text) == want


@pytest.fixture(scope="module")
def grader():
    with Grader(code_limits=FAST) as g:
        yield g


def test_math_malformed_outputs_are_wrong(grader):
    row = {"domain": "math", "answer": "13"}
    cases = {
        "The answer is \\boxed{13}.": True,
        "3+5=8\n\n8+5=13\n\nThe answer is \\boxed{13}.": True,
        "\\boxed{12} no wait \\boxed{13}": True,  # last box wins
        "\\boxed{13} no wait \\boxed{12}": False,
        "13": False,  # no boxed answer
        "": False,
        "\x00\x01 garbage ))}{{": False,
        "The answer is \\boxed{1": False,  # truncated
        "\\boxed{}": False,
        "<think>\\boxed{13}</think> so \\boxed{14}": False,
    }
    assert grader.grade(list(cases), [row] * len(cases)) == list(cases.values())


def _hangs_on_request(item):
    """A worker's per-item function that never returns for a response ending in "hang"."""
    if item[0].endswith("hang"):
        time.sleep(30)
    return _grade_item(item)


def test_math_worker_that_hangs_is_killed_and_counted_wrong():
    g = MathGrader(workers=1, deadline=1.0, item_fn=_hangs_on_request)
    try:
        t0 = time.time()
        # fractions go to the workers (plain integers and unboxed text are decided without them)
        out = g.grade(["\\boxed{1/2}", "\\boxed{1/2} hang", "\\boxed{\\frac12}"], ["\\frac{1}{2}"] * 3)
        assert out == [True, False, True]
        assert time.time() - t0 < 15
    finally:
        g.close()


def test_code_malformed_outputs_are_wrong(grader):
    tests = calls_from_asserts(["assert f(1) == 2", "assert f(5) == 6"], entry="f")
    cases = {
        "```python\ndef f(x):\n    return x + 1\n```": True,
        "def f(x):\n    return x + 1": True,  # unfenced
        "```python\ndef f(x):\n    return x + 1": True,  # unclosed fence (truncated after the code)
        "```python\ndef f(x):\n    return x + 2\n```": False,  # wrong answer
        "```python\ndef f(x):\n    raise RuntimeError('boom')\n```": False,  # crashes
        "```python\ndef f(x) return\n```": False,  # syntax error
        "```python\ndef f(x):\n    while True: pass\n```": False,  # never returns
        "```python\nimport sys\nsys.exit(0)\n```": False,  # exits before the tests run
        "": False,
        "```python\ndef f(x):\n    return x +": False,  # truncated mid-expression
    }
    got = grader.grade(list(cases), [{"domain": "code", "tests": tests}] * len(cases))
    assert got == list(cases.values())


def test_extract_code_takes_last_fenced_block():
    assert extract_code("```python\na=1\n```\ntext\n```python\nb=2\n```") == "b=2\n"
    assert extract_code("<think>```python\na=1\n```</think>plain") == "plain"


# (gold, response, verdict), each checked by hand. Traps: fractions vs decimals, intervals, sets,
# units, degrees, text answers, several boxes, no box, an unclosed box, thinking blocks.
MATH_CASES = [
    ("13", "so \\boxed{13}", True),
    ("\\frac{1}{2}", "\\boxed{0.5}", True),
    ("0.5", "\\boxed{\\frac12}", True),
    ("-\\frac{1}{2}", "\\boxed{-0.5}", True),
    ("0.1", "\\boxed{\\frac{1}{10}}", True),
    ("\\frac{1}{3}", "\\boxed{0.333}", False),  # a rounded decimal is not the fraction
    ("\\sqrt{2}", "\\boxed{1.414}", False),
    ("\\pi", "\\boxed{3.14159}", False),
    ("1", "\\boxed{1.0000001}", False),
    ("2", "\\boxed{2.0}", True),
    ("\\dfrac{3}{4}", "\\boxed{3/4}", True),
    ("1/2", "\\boxed{\\frac{2}{4}}", True),
    ("\\frac{5}{2}", "\\boxed{2\\frac{1}{2}}", True),  # mixed number
    ("10^{-3}", "\\boxed{0.001}", True),
    ("1000", "\\boxed{1,000}", True),  # thousands separator
    ("1000", "\\boxed{1{,}000}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\dfrac{\\sqrt 3}{2}}", True),
    ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}", True),
    ("\\sqrt{3}", "\\boxed{3^{1/2}}", True),
    ("x^2+2x+1", "\\boxed{(x+1)^2}", True),
    ("a+b", "\\boxed{b+a}", True),
    ("2\\pi", "\\boxed{2\\pi}", True),
    ("2", "\\boxed{-2}", False),
    ("[1,3)", "\\boxed{[1,3)}", True),  # intervals: the brackets matter
    ("[1,3)", "\\boxed{[1,3]}", False),
    ("(-\\infty, 2]", "\\boxed{(-\\infty,2]}", True),
    ("x \\in [0,1]", "\\boxed{[0,1]}", True),
    ("\\{1,2,3\\}", "\\boxed{\\{3,2,1\\}}", True),  # sets: order does not
    ("\\{1,2\\}", "\\boxed{\\{1,2,3\\}}", False),
    ("3, 5", "\\boxed{5, 3}", True),
    ("3, 5", "\\boxed{3}", False),
    ("(1,2)", "\\boxed{(1,2)}", True),  # points: order matters
    ("(1,2)", "\\boxed{(2,1)}", False),
    ("5", "\\boxed{5\\text{ cm}}", True),  # units
    ("100", "\\boxed{100\\text{ degrees}}", True),
    ("90", "\\boxed{90^\\circ}", True),  # degrees
    ("45^\\circ", "\\boxed{45}", True),
    ("5", "\\boxed{\\$5}", True),
    ("3", "\\boxed{x = 3}", True),
    ("k=4", "\\boxed{4}", True),
    ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", True),  # text answers
    ("\\text{Evelyn}", "\\boxed{Evelyn}", True),
    ("\\text{no}", "\\boxed{\\text{No}}", True),
    ("\\text{(C)}", "\\boxed{C}", True),
    ("\\infty", "\\boxed{\\infty}", True),
    ("13", "\\boxed{12}, no: \\boxed{13}", True),  # several boxes: the last one wins
    ("12", "\\boxed{12}, no: \\boxed{13}", False),
    ("13", "\\boxed{\\boxed{13}}", True),
    ("13", "\\fbox{13}", True),
    ("\\frac{1}{2}", "\\boxed{1/2} and \\boxed{}", False),  # the last box is empty
    ("13", "The answer is 13.", False),  # no box
    ("13", "The answer is \\boxed{13", False),  # unclosed (truncated) box
    ("13", "\\boxed{12} then \\boxed{13", False),  # the complete box is the wrong one
    ("13", "<think>maybe \\boxed{12}</think>So \\boxed{13}.", True),  # only the answer after thinking counts
    ("13", "<think>it is \\boxed{13}</think>I am not sure.", False),
    ("13", "<think>unfinished reasoning \\boxed{13}", True),  # no closing tag: the whole text is the answer
]


def test_math_grader_hand_checked_cases():
    assert len(MATH_CASES) >= 40
    with MathGrader(workers=2) as g:
        got = g.grade([r for _, r, _ in MATH_CASES], [gold for gold, _, _ in MATH_CASES])
    wrong = [(gold, r, want) for (gold, r, want), v in zip(MATH_CASES, got, strict=True) if v != want]
    assert wrong == []


@pytest.mark.parametrize(
    "gold, answer",
    [("13", "13"), ("13", "14"), ("13", "013"), ("-4", "-4"), ("-4", "4"), ("0", "-0"), ("7", " 7 "),
     ("123456789012345678901234567890", "123456789012345678901234567890")],
)  # fmt: skip
def test_integer_verdicts_without_a_worker_equal_math_verify(gold, answer):
    response = f"so \\boxed{{{answer}}}"
    assert quick_verdict(response, gold) == grade_one(response, gold)


@pytest.mark.parametrize(
    "gold, answer", [("\\frac{1}{2}", "1/2"), ("13", "13.0"), ("13", "+13"), ("x", "13"), ("10", "1 0"), ("42", "４２")]
)
def test_anything_but_two_plain_integers_goes_to_math_verify(gold, answer):
    assert quick_verdict(f"\\boxed{{{answer}}}", gold) is None


def _box_by_box(text: str) -> str | None:
    """The former scan, box by box to its closing brace (quadratic in nested boxes): the reference."""
    import re

    found = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth = 1
        for j in range(m.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                found = text[m.end() : j]
                break
    return found


def test_last_boxed_in_one_pass_finds_what_the_box_by_box_scan_found():
    """On 3,000 random strings of boxes, braces and text the one-pass matching agrees with the old
    scan; on 4,000 unclosed boxes (28k characters, 6.8 s a call before) it makes a single pass."""
    import random

    rng = random.Random(0)
    parts = ["{", "}", "\\boxed{", "\\fbox {", "\\boxed", "a", "1", " ", "}}"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 40)))
        assert last_boxed(text) == _box_by_box(text), text
    assert last_boxed("\\boxed{" * 4000) is None and last_boxed("\\boxed{" * 4000 + "7}") == "7"
