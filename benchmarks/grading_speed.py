"""Grading throughput on this machine: math (short and 16k-token responses) and code
(HumanEval+-style programs: the values of 50 calls computed in the sandbox, evalplus's check run
on them outside), the sandbox's overhead per program (alone, and in the batches the code grader
runs), and SCOUT's teacher phase on verl: 1,024
continuations graded one by one (as before) against as one batch (``scout.verl.reward.grade_batch``).

    python -m benchmarks.grading_speed [--n-math 400] [--n-long 40] [--n-code 120] [--n-phase 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

from scout import catalogue
from scout.grading.code import CodeGrader
from scout.grading.math import MathGrader
from scout.grading.sandbox import (
    BATCH_PROGRAMS,
    Limits,
    _launch,
    isolation,
    namespaces_available,
    run_programs,
    sandbox_python,
)

ANSWERS = ["13", "\\frac{3}{4}", "2\\sqrt{2}", "[1,3)", "\\{1,2\\}", "x^2+1", "0.25", "\\pi/6"]
FILLER = "We expand the expression and collect like terms, checking each step carefully. "


def math_items(n: int, tokens: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """Responses of about ``tokens`` tokens (~4 characters each) ending in a boxed answer."""
    body = (FILLER * (tokens * 4 // len(FILLER) + 1))[: tokens * 4]
    # distinct golds (math-verify caches parses): a template with fresh numbers
    golds = [rng.choice(ANSWERS).replace("3", str(rng.randint(3, 10**6))) for _ in range(n)]
    answers = [g if rng.random() < 0.5 else rng.choice(ANSWERS) for g in golds]
    # distinct texts: nothing is served from a cache
    return [f"{body} (attempt {i}) so the answer is \\boxed{{{a}}}." for i, a in enumerate(answers)], golds


def humaneval_like(n: int, rng: random.Random) -> tuple[list[str], list[dict]]:
    inputs = [[list(range(k))] for k in range(50)]
    test = (
        "def assertion(out, exp, atol):\n    assert out == exp\n\n"
        "def check(candidate):\n"
        f"    inputs = {inputs!r}\n"
        f"    results = {[sum(x * x for x in xs) for (xs,) in inputs]!r}\n"
        "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
        "        assertion(candidate(*inp), exp, 0)\n"
    )
    row = catalogue.humaneval_plus(
        {"task_id": "HumanEval/0", "prompt": "", "entry_point": "sum_squares", "test": test}, 0
    )
    tests = {**row["tests"], "timeout": 10}
    right = "def sum_squares(xs):\n    return sum(x * x for x in xs)"
    wrong = "def sum_squares(xs):\n    return sum(xs)"
    responses = [f"```python\n{right if rng.random() < 0.5 else wrong}\n# sample {i}\n```" for i in range(n)]
    return responses, [tests] * n


def rate(label: str, n: int, seconds: float, unit: str) -> None:
    print(f"{label:<46} {n:>5} in {seconds:6.2f}s  = {n / seconds:7.1f} {unit}/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n-math", type=int, default=400)
    p.add_argument("--n-long", type=int, default=400)
    p.add_argument("--n-code", type=int, default=120)
    p.add_argument("--n-phase", type=int, default=1024, help="continuations of one teacher phase (0: skip)")
    args = p.parse_args()
    rng = random.Random(0)
    print(isolation())
    with MathGrader(workers=2) as g:
        g.grade(*math_items(4, 50, rng))  # warm the workers
        for label, n, tokens in [
            ("math, ~300-token responses (2 workers)", args.n_math, 300),
            ("math, 16k-token responses (2 workers)", args.n_long, 16384),
        ]:
            responses, golds = math_items(n, tokens, rng)
            t0 = time.perf_counter()
            g.grade(responses, golds)
            rate(label, n, time.perf_counter() - t0, "responses")

    responses, tests = humaneval_like(args.n_code, rng)
    grader = CodeGrader(Limits(), workers=2)
    try:
        grader.grade(responses[:2], tests[:2])
        t0 = time.perf_counter()
        grader.grade(responses, tests)
        rate("code, HumanEval-style programs (2 workers)", len(responses), time.perf_counter() - t0, "programs")
    finally:
        grader.close()

    reps = 40
    python = sandbox_python()
    t0 = time.perf_counter()
    for _ in range(reps):
        subprocess.run([python, "-I", "-c", "pass"], check=True)
    bare = (time.perf_counter() - t0) / reps
    timings = {"no sandbox (python -I -c pass)": bare}
    for label, isolate in [("sandbox, rlimits only", False), ("sandbox, namespaces", True)]:
        if isolate and not namespaces_available():
            continue
        t0 = time.perf_counter()
        for _ in range(reps):
            _launch("pass", "", Limits(), isolate=isolate)
        timings[label] = (time.perf_counter() - t0) / reps
    if namespaces_available():  # what the code grader uses: one sandbox per batch of programs
        t0 = time.perf_counter()
        for _ in range(reps // BATCH_PROGRAMS + 1):
            list(run_programs([("pass", "", Limits())] * BATCH_PROGRAMS))
        timings[f"sandbox, namespaces, batches of {BATCH_PROGRAMS}"] = (time.perf_counter() - t0) / (
            (reps // BATCH_PROGRAMS + 1) * BATCH_PROGRAMS
        )
    for label, seconds in timings.items():
        extra = "" if seconds is bare else f"  ({(seconds - bare) * 1000:+.1f} ms)"
        print(f"{label:<46} {seconds * 1000:6.1f} ms per empty program{extra}")
    print(f"python {sys.version.split()[0]}, sandbox interpreter {python}")
    if args.n_phase:
        teacher_phase(args.n_phase, rng)


def teacher_phase(n: int, rng: random.Random) -> None:
    """SCOUT's teacher phase on verl grades K continuations of every prefix of a batch (1,024 for
    the paper's 128 x 8): math answers of ~4k tokens, and TACO-style stdin programs of 5 cases."""
    from scout.verl import reward

    body = (FILLER * 250)[:16000]
    golds = [str(rng.randint(1, 10**6)) for _ in range(n)]
    math_rows = [{"id": str(i), "domain": "math", "prompt": "?", "answer": g} for i, g in enumerate(golds)]
    math_texts = [f"{body} (try {i}) \\boxed{{{g if i % 2 else 0}}}" for i, g in enumerate(golds)]
    cases = [{"input": f"{k}\n", "output": f"{2 * k}\n"} for k in range(5)]
    code_rows = [{"id": str(i), "domain": "code", "prompt": "?", "tests": {"type": "stdin", "cases": cases, "timeout": 6}}
                 for i in range(n)]  # fmt: skip
    code_texts = [f"```python\nn = int(input())\nprint({2 if i % 2 else 3} * n)  # {i}\n```" for i in range(n)]
    for label, rows, texts in (("math, ~4k-token continuations", math_rows, math_texts),
                               ("TACO-style stdin programs, 5 cases", code_rows, code_texts)):  # fmt: skip
        infos = [{"row": json.dumps(r)} for r in rows]
        truths = [r.get("answer") or json.dumps(r["tests"]) for r in rows]
        sources = [f"scout/{r['domain']}" for r in rows]
        reward.grade_batch(sources[:2], texts[:2], truths[:2], infos[:2])  # start the pools
        reward._grader._cache.clear()
        t0 = time.perf_counter()
        one_by_one = [
            reward.compute_score(s, t, g, i)["score"] for s, t, g, i in zip(sources, texts, truths, infos, strict=True)
        ]
        serial = time.perf_counter() - t0
        reward._grader._cache.clear()
        t0 = time.perf_counter()
        batched = reward.grade_batch(sources, texts, truths, infos)
        batch = time.perf_counter() - t0
        assert one_by_one == batched
        print(f"teacher phase, {label:<36} {n} one by one {serial:6.1f}s ({n / serial:6.1f}/s), "
              f"as one batch {batch:6.1f}s ({n / batch:6.1f}/s) on {len(os.sched_getaffinity(0))} cores")  # fmt: skip


if __name__ == "__main__":
    main()
