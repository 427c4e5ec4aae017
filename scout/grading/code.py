"""Code grading: extract the program from a response and run the benchmark's tests in the sandbox."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

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
        out = []
        for response, tests in items:
            proc = self._worker(i)
            try:
                proc.stdin.write(
                    json.dumps({"response": response, "tests": tests, "limits": asdict(self.limits)}) + "\n"
                )
                proc.stdin.flush()
                out.append(json.loads(proc.stdout.readline()) is True)
            except (BrokenPipeError, json.JSONDecodeError):
                proc.kill()
                out.append(False)
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
    """Worker loop: one JSON request per line in, one JSON verdict per line out."""
    for line in sys.stdin:
        req = json.loads(line)
        try:
            ok = grade_one(req["response"], req["tests"], Limits(**req["limits"]))
        except Exception:  # noqa: BLE001 - a malformed request is a wrong answer, never a dead worker
            ok = False
        print(json.dumps(ok), flush=True)
