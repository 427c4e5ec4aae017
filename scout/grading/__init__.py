"""Verifiers shared by training rewards and evaluation: one entry point per domain."""

from __future__ import annotations

from collections.abc import Sequence

from scout.grading.code import grade_many as grade_code
from scout.grading.math import MathGrader
from scout.grading.sandbox import Limits


class Grader:
    """Grades responses against dataset rows of either domain; keeps its math workers warm."""

    def __init__(self, code_limits: Limits = Limits(), code_workers: int = 2, math_workers: int = 1):
        self.math = MathGrader(workers=math_workers)
        self.code_limits, self.code_workers = code_limits, code_workers

    def grade(self, responses: Sequence[str], rows: Sequence[dict]) -> list[bool]:
        if not rows:
            return []
        domains = {r["domain"] for r in rows}
        if domains == {"math"}:
            return self.math.grade(responses, [r["answer"] for r in rows])
        if domains == {"code"}:
            return grade_code(responses, [r["tests"] for r in rows], self.code_limits, self.code_workers)
        raise ValueError(f"cannot grade a batch mixing domains {sorted(domains)}")

    def close(self) -> None:
        self.math.close()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
