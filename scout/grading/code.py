"""Code grading: extract the program from a response and run the benchmark's tests in the sandbox."""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from scout.grading.sandbox import Limits, run_program

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python3?)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


def extract_code(response: str) -> str:
    """The last fenced code block (an unclosed fence runs to the end); else the whole response."""
    if "</think>" in response:
        response = response.split("</think>")[-1]
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def assert_program(code: str, tests: dict) -> str:
    return "\n".join([tests.get("setup", ""), code, "", *tests["asserts"], ""])


def grade_one(response: str, tests: dict, limits: Limits = Limits()) -> bool:
    if tests.get("type") != "assert":
        raise ValueError(f"unsupported test type {tests.get('type')!r}")
    return run_program(assert_program(extract_code(response), tests), limits=limits).ok


def grade_many(
    responses: Sequence[str], tests: Sequence[dict], limits: Limits = Limits(), workers: int = 2
) -> list[bool]:
    """Grade programs concurrently; each runs in its own sandboxed process."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda rt: grade_one(rt[0], rt[1], limits), zip(responses, tests, strict=True)))
