"""What the graders require of a benchmark row: its domain, and the answer or the tests it is
graded by. Data preparation checks every row with it when it writes them, and the grader again on
every row it is handed, so malformed test data is refused by name, never graded wrong."""

from __future__ import annotations

from scout.grading.code import TEST_TYPES
from scout.grading.extract import EXTRACTORS


def check_graded(row: dict) -> str | None:
    """What keeps a row from being graded, or None: its domain and the answer or tests it is graded
    by (``check_row`` on load; the grader on every row it is handed)."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if row.get("domain") == "math":
        return None if isinstance(row.get("answer"), str) and row["answer"].strip() else "math row without an 'answer'"
    if row.get("domain") != "code":
        return f"unknown domain {row.get('domain')!r}; expected 'math' or 'code'"
    return check_tests(row.get("tests"))


def _strings(x) -> bool:
    return isinstance(x, list) and all(isinstance(i, str) for i in x)


def check_tests(t) -> str | None:
    """What is wrong with a code row's ``tests``, or None: every field the grader reads, of the type
    it reads it as, so that malformed test data is refused by name instead of graded wrong."""
    if not isinstance(t, dict):
        return f"code row whose 'tests' is {type(t).__name__ if t is not None else 'missing'}, not an object"
    if t.get("type") == "assert":
        return ("assert-style tests can be forged by the program under test, so the grader accepts calls, stdin "
                "and functional tests; prepare the data again (assert tests become calls)")
    if t.get("type") not in TEST_TYPES:
        return f"unknown test type {t.get('type')!r}; the grader accepts {', '.join(TEST_TYPES)}"
    if t.get("extract", "fenced") not in EXTRACTORS:
        return f"unknown 'extract' {t['extract']!r}; the grader extracts code by {', '.join(EXTRACTORS)}"
    if not isinstance(t.get("setup", ""), str):
        return "'setup' must be a string (code run before the program)"
    timeout = t.get("timeout", 1)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        return f"'timeout' must be a positive number of seconds, not {timeout!r}"
    if t["type"] == "calls":
        calls, check = t.get("calls"), t.get("check")
        if not _strings(calls) or not calls:
            return "calls tests need a non-empty list of 'calls' (expressions)"
        if not isinstance(check, dict):
            return "calls tests need a 'check' object"
        if "replay" in check:
            if not isinstance(check["replay"], str) or not isinstance(check.get("code"), str):
                return "a 'replay' check needs the test function's name ('replay') and its 'code', both strings"
        elif not _strings(check.get("asserts")) or not isinstance(check.get("setup", ""), str):
            return "calls tests need a 'check' with 'asserts' (a list of statements) or a 'replay' function"
        return None
    cases = t.get("cases")
    fields_ok = isinstance(cases, list) and all(
        isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str) for c in cases
    )
    if not cases or not fields_ok:
        return f"{t['type']} tests need a non-empty list of 'cases', each with an 'input' and an 'output' string"
    if t["type"] == "functional" and not (isinstance(t.get("fn_name"), str) and t["fn_name"]):
        return "functional tests without 'fn_name'"
    return None
