"""Pieces the embedded trainer's tests share."""

from __future__ import annotations

import json
from pathlib import Path


class Alternating:
    """A grader whose verdicts alternate: an untrained teacher never solves a task, so every GRPO
    group would be all-zero reward (no update at all); this gives the teacher phase a signal."""

    def grade(self, texts, rows):
        return [i % 2 == 0 for i in range(len(texts))]

    def close(self):
        pass


def metrics_without_time(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k != "step_seconds"} for x in path.read_text().splitlines()]
