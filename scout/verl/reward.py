"""verl's custom reward function: the real graders of ``scout.grading`` behind verl's signature.

verl's reward manager decodes only the response tokens of a sample. In SCOUT's teacher phase the
response is the teacher's continuation of a student prefix that sits in the prompt, and an answer
(a boxed number, a code block) can start in the prefix and end in the continuation; so the prefix
text travels in ``extra_info["scout_prefix"]`` and the two are graded as one response.

Configured as ``reward.custom_reward_function.path=pkg://scout.verl.reward`` with
``name=compute_score``; verl calls it from a thread pool, hence the lock around the shared grader.
SCOUT's teacher phase grades its whole batch of continuations at once (``grade_batch``), so the
grader's worker pools (as many as the process has cores) work on it in parallel.
"""

from __future__ import annotations

import atexit
import json
import os
import threading

from scout.grading import Grader

_grader: Grader | None = None
_lock = threading.Lock()


def _shared_grader() -> Grader:
    global _grader
    if _grader is None:
        cores = len(os.sched_getaffinity(0))
        _grader = Grader(code_workers=max(2, cores), math_workers=max(1, min(16, cores)))
        atexit.register(_grader.close)
    return _grader


def row_of(data_source: str, ground_truth: str, extra_info: dict | None) -> dict:
    """The scout row a sample was made from (``scout.verl.data`` stores it in extra_info)."""
    if extra_info and extra_info.get("row"):
        row = extra_info["row"]
        return json.loads(row) if isinstance(row, str) else dict(row)
    if data_source == "scout/code":
        return {"id": "?", "domain": "code", "prompt": "?", "tests": json.loads(ground_truth)}
    return {"id": "?", "domain": "math", "prompt": "?", "answer": ground_truth}


def grade_batch(data_sources, texts, ground_truths, extra_infos) -> list[float]:
    """Scores of many samples in one call per domain (the grader's pools work on them in parallel)."""
    rows = [row_of(ds, gt, info) for ds, gt, info in zip(data_sources, ground_truths, extra_infos, strict=True)]
    graded = list(texts)
    scores = [0.0] * len(rows)
    with _lock:
        for domain in sorted({r.get("domain") for r in rows}, key=str):  # another domain: the grader refuses it
            idx = [i for i, r in enumerate(rows) if r.get("domain") == domain]
            if idx:
                verdicts = _shared_grader().grade([graded[i] for i in idx], [rows[i] for i in idx])
                for i, ok in zip(idx, verdicts, strict=True):
                    scores[i] = float(ok)
    return scores


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, **_) -> dict:
    row = row_of(data_source, ground_truth, extra_info)
    with _lock:
        ok = _shared_grader().grade([solution_str], [row])[0]
    return {"score": float(ok), "acc": bool(ok)}
