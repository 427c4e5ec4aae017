"""Verifiers shared by training rewards and evaluation: one entry point per domain."""

from __future__ import annotations

import json
from collections.abc import Sequence

from scout.grading.code import CodeGrader
from scout.grading.extract import extract
from scout.grading.math import MathGrader, answer_of
from scout.grading.rows import check_graded
from scout.grading.sandbox import Limits


class Grader:
    """Grades responses against dataset rows of either domain; keeps its math workers warm.

    Verdicts are deterministic, so each distinct (answer, reference) pair is graded once per
    grader: GRPO groups and repeated samples often contain identical programs or answers.
    """

    def __init__(self, code_limits: Limits = Limits(), code_workers: int = 2, math_workers: int = 1):
        self.math = MathGrader(workers=math_workers)
        self.code = CodeGrader(code_limits, code_workers)
        self._cache: dict[tuple[str, str], bool] = {}

    def grade(self, responses: Sequence[str], rows: Sequence[dict]) -> list[bool]:
        if not rows:
            return []
        for row in {id(r): r for r in rows}.values():  # malformed test data is an error, never "wrong"
            problem = check_graded(row)
            if problem:
                raise ValueError(f"row {row.get('id') if isinstance(row, dict) else row!r}: {problem}")
        domains = {r["domain"] for r in rows}
        if len(domains) > 1:
            raise ValueError(f"cannot grade a batch mixing domains {sorted(domains)}")
        if domains == {"math"}:  # a verdict depends on the last boxed answer alone (grading.math)
            keys = [(answer_of(r), row["answer"]) for r, row in zip(responses, rows, strict=True)]
        else:
            tests_key: dict[int, str] = {}  # test suites can be megabytes: serialise each row once
            keys = [
                (
                    extract(r, row["tests"].get("extract", "fenced")),
                    tests_key.setdefault(id(row), json.dumps(row["tests"], sort_keys=True)),
                )
                for r, row in zip(responses, rows, strict=True)
            ]
        # first response and row for each key not graded yet; graders see the original response
        todo = {}
        for k, response, row in zip(keys, responses, rows, strict=True):
            if k not in self._cache and k not in todo:
                todo[k] = (response, row)
        firsts = list(todo.values())
        if not firsts:
            verdicts = []
        elif domains == {"math"}:
            verdicts = self.math.grade([r for r, _ in firsts], [row["answer"] for _, row in firsts])
        else:
            verdicts = self.code.grade([r for r, _ in firsts], [row["tests"] for _, row in firsts])
        if len(self._cache) > 200_000:
            self._cache.clear()
        self._cache.update(zip(todo, verdicts, strict=True))
        return [self._cache[k] for k in keys]

    def close(self) -> None:
        self.math.close()
        self.code.close()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
