"""Code grading: extract the program from a response and run the benchmark's tests in the sandbox."""

from __future__ import annotations

import re
import secrets
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


def assert_program(code: str, tests: dict, nonce: str) -> str:
    """Setup, the candidate code, the asserts, then a secret the program cannot know in advance:
    exiting early with status 0 never counts as passing."""
    return "\n".join([tests.get("setup", ""), code, "", *tests["asserts"], f"print({nonce!r})", ""])


def grade_one(response: str, tests: dict, limits: Limits = Limits()) -> bool:
    if tests.get("type") != "assert":
        raise ValueError(f"unsupported test type {tests.get('type')!r}")
    nonce = "tests-passed-" + secrets.token_hex(8)
    out = run_program(assert_program(extract_code(response), tests, nonce), limits=limits)
    return out.ok and out.stdout.rstrip().endswith(nonce)


def grade_many(
    responses: Sequence[str], tests: Sequence[dict], limits: Limits = Limits(), workers: int = 2
) -> list[bool]:
    """Grade programs concurrently; each runs in its own sandboxed process."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda rt: grade_one(rt[0], rt[1], limits), zip(responses, tests, strict=True)))
