"""Synthetic verifiable tasks of the toy world, generated deterministically from a seed.

Toy math: chains of single-digit additions and subtractions, solved one step per paragraph and
ending in a boxed answer. A small share of worked solutions makes a slip and corrects it with a
reflection word ("Wait, ..."), so the tiny models learn to emit the tokens Relay-OPD watches for.

Toy code: write ``f(x)`` applying a described chain of arithmetic operations; graded by running
asserts in the sandbox, exactly as the real code benchmarks are.

Rows follow the common dataset schema used for real benchmarks too:
``{"id", "domain", "prompt", "answer"}`` for math and ``{"id", "domain", "prompt", "tests"}`` for
code, where ``tests = {"type": "assert", "setup": str, "asserts": [str]}``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SLIP_RATE = 0.15


@dataclass(frozen=True)
class Split:
    """One file of the toy world: a train split or an eval benchmark."""

    name: str
    domain: str
    rows: int
    min_ops: int
    max_ops: int
    repeats: int = 1


def _math_problem(rng: random.Random, n_ops: int) -> tuple[str, list[tuple[int, str, int, int]]]:
    value = rng.randint(1, 9)
    expr = str(value)
    steps = []
    for _ in range(n_ops):
        b = rng.randint(1, 9)
        op = "-" if (b <= value and rng.random() < 0.5) else "+"
        new = value + b if op == "+" else value - b
        steps.append((value, op, b, new))
        expr += f"{op}{b}"
        value = new
    return expr, steps


def math_solution(steps: list[tuple[int, str, int, int]], rng: random.Random | None = None) -> str:
    """Worked solution: one step per paragraph, optional slip-and-correct, boxed answer."""
    paras = []
    for a, op, b, c in steps:
        if rng is not None and rng.random() < SLIP_RATE:
            wrong = c + rng.choice([-2, -1, 1, 2])
            paras.append(f"{a}{op}{b}={wrong}")
            paras.append(f"Wait, {a}{op}{b}={c}")
        else:
            paras.append(f"{a}{op}{b}={c}")
    paras.append(f"The answer is \\boxed{{{steps[-1][3]}}}.")
    return "\n\n".join(paras)


def math_row(rng: random.Random, n_ops: int, idx: str, with_solution: bool) -> dict:
    expr, steps = _math_problem(rng, n_ops)
    row = {"id": idx, "domain": "math", "prompt": f"Compute {expr}.", "answer": str(steps[-1][3])}
    if with_solution:
        row["solution"] = math_solution(steps, rng)
    return row


_CODE_OPS = [("add", "+"), ("subtract", "-"), ("multiply by", "*")]


def code_row(rng: random.Random, n_ops: int, idx: str, with_solution: bool) -> dict:
    ops = []
    for _ in range(n_ops):
        word, sym = rng.choice(_CODE_OPS)
        k = rng.randint(2, 5) if sym == "*" else rng.randint(1, 19)
        ops.append((word, sym, k))
    desc = ", then ".join(f"{w} {k}" for w, _, k in ops)

    def f(x: int) -> int:
        for _, sym, k in ops:
            x = x + k if sym == "+" else x - k if sym == "-" else x * k
        return x

    asserts = [f"assert f({x}) == {f(x)}" for x in (0, 1, 2, 5, 7)]
    row = {
        "id": idx,
        "domain": "code",
        "prompt": f"Write f(x): {desc}.",
        "tests": {"type": "assert", "setup": "", "asserts": asserts},
    }
    if with_solution:
        body = "\n".join(f"    x = x {sym} {k}" for _, sym, k in ops)
        row["solution"] = f"```python\ndef f(x):\n{body}\n    return x\n```"
    return row


def generate_split(split: Split, seed: int, exclude: set[str] | None = None) -> list[dict]:
    """Rows of one split; prompts in ``exclude`` (the train prompts) are skipped so benchmarks
    never leak into training."""
    rng = random.Random(f"{seed}:{split.name}")
    make = math_row if split.domain == "math" else code_row
    rows: list[dict] = []
    seen = set(exclude or ())
    attempts = 0
    while len(rows) < split.rows:
        attempts += 1
        if attempts > 200 * split.rows:
            raise ValueError(f"toy split {split.name}: cannot draw {split.rows} distinct prompts")
        n_ops = rng.randint(split.min_ops, split.max_ops)
        row = make(rng, n_ops, f"{split.name}-{len(rows)}", with_solution=split.name.endswith("train"))
        if row["prompt"] in seen:
            continue
        seen.add(row["prompt"])
        rows.append(row)
    return rows


def sample_corpus_texts(seed: int = 0, n: int = 400) -> list[str]:
    """Prompts and solutions covering every string the generators emit (for the vocabulary)."""
    rng = random.Random(f"vocab:{seed}")
    texts = []
    for i in range(n):
        for make in (math_row, code_row):
            row = make(rng, 1 + i % 5, "v", with_solution=True)
            texts += [row["prompt"], row["solution"]]
    return texts
