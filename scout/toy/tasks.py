"""Synthetic verifiable tasks of the toy world, generated deterministically from a seed.

Toy math: chains of single-digit additions and subtractions, solved one step per paragraph and
ending in a boxed answer. A small share of worked steps goes wrong the ways small models go wrong
(a wrong result, a miscopied operand, a miscarried running value) and is corrected at once with a
reflection word ("Wait, ..."): the tiny models learn to emit the tokens Relay-OPD watches for, and
a teacher has seen recoveries that RL on student prefixes (SCOUT) can build on.

Toy code: write ``f(x)`` applying a described chain of arithmetic operations; graded by running
asserts in the sandbox, exactly as the real code benchmarks are.

Rows follow the common dataset schema used for real benchmarks too:
``{"id", "domain", "prompt", "answer"}`` for math and ``{"id", "domain", "prompt", "tests"}`` for
code, where ``tests`` are calls of ``f`` (computed in the sandbox) and asserts over their values
(checked outside), as MBPP's asserts become when prepared.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from scout.grading.code import calls_from_asserts

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


def _slip(a: int, op: str, b: int, c: int, rng: random.Random) -> str:
    """A wrong version of the step ``a op b = c``: a wrong result, or a miscopied operand or
    running value worked through correctly."""
    kind = rng.choice(("result", "operand", "carry"))
    delta = rng.choice([-2, -1, 1, 2])
    if kind == "operand" and 1 <= b + delta <= 9 and (op == "+" or a >= b + delta):
        b2 = b + delta
        return f"{a}{op}{b2}={a + b2 if op == '+' else a - b2}"
    if kind == "carry" and a + delta >= 0 and (op == "+" or a + delta >= b):
        a2 = a + delta
        return f"{a2}{op}{b}={a2 + b if op == '+' else a2 - b}"
    return f"{a}{op}{b}={c + delta}"


def math_solution(
    steps: list[tuple[int, str, int, int]], rng: random.Random, hasty: float = 0.0, checks: float = 0.0
) -> str:
    """Worked solution: one paragraph per step, slips corrected at once, boxed answer. With
    probability ``hasty`` the solution stops writing steps part-way and states the answer
    (the rest done in the head: right in the data, out of reach for a small model that imitates it).
    With probability ``checks`` a wrong result goes unnoticed for a step or two and is then caught
    by a look back ("Wait, let me start again.") and the work redone: the delayed self-check an
    instruct model can make, and the repair a teacher needs on a student's prefix. The slipped
    paragraphs are marked (``LATE_SLIP``) for ``training_segments``."""
    stop = len(steps)
    if len(steps) > 1 and rng.random() < hasty:
        stop = rng.randint(1, len(steps) - 1)
    if checks > 0 and rng.random() < checks:
        return "\n\n".join([*_caught_late(steps, rng), f"The answer is \\boxed{{{steps[-1][3]}}}."])
    paras = []
    for a, op, b, c in steps[:stop]:
        if rng.random() < SLIP_RATE:
            paras.append(_slip(a, op, b, c, rng))
            paras.append(f"Wait, {a}{op}{b}={c}")
        else:
            paras.append(f"{a}{op}{b}={c}")
    paras.append(f"The answer is \\boxed{{{steps[-1][3]}}}.")
    return "\n\n".join(paras)


RESTART = "Wait, let me start again."
LATE_SLIP = "\u2063"  # invisible separator: marks the paragraphs of a late-caught slip for ``training_segments``


def training_segments(solution: str) -> list[tuple[str, bool]]:
    """A worked solution as (text, learned) pieces: the wrong step of a late-caught slip and the steps
    carried after it are context, not targets, so a model learns to catch and repair a slip a
    few steps back without learning to make one."""
    out = []
    for i, part in enumerate(solution.split(LATE_SLIP)):
        if part:
            out.append((part, i % 2 == 0))
    return out


def _caught_late(steps: list[tuple[int, str, int, int]], rng: random.Random) -> list[str]:
    """Paragraphs of a solution whose wrong result at one step is carried 0-2 steps, then noticed:
    the solution starts again from the problem and works every step (the wrong paragraphs between
    ``LATE_SLIP`` marks). Starting again needs no memory of which step was wrong, so even a tiny
    model can repair a prefix this way, while pinpointing the slip is beyond it."""
    j = rng.randint(0, len(steps) - 1)
    carried = rng.randint(0, min(2, len(steps) - 1 - j))
    a, op, b, c = steps[j]
    wrong = c + rng.choice([d for d in (-2, -1, 1, 2) if c + d >= 0])
    slipped = [f"{a}{op}{b}={wrong}"]
    value = wrong
    for _, o, y, _ in steps[j + 1 : j + 1 + carried]:
        new = value + y if o == "+" else value - y
        slipped.append(f"{value}{o}{y}={new}")
        value = new
    paras = [f"{x}{o}{y}={z}" for x, o, y, z in steps[:j]]
    paras.append(LATE_SLIP + "\n\n".join(slipped) + LATE_SLIP)
    paras.append(RESTART)
    return paras + [f"{x}{o}{y}={z}" for x, o, y, z in steps]


_MATH_PROMPT = re.compile(r"Compute (\d+)((?:[+-]\d)+)\.")


def _math_steps(prompt: str) -> list[tuple[int, str, int, int]]:
    m = _MATH_PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a toy math prompt: {prompt!r}")
    value, steps = int(m.group(1)), []
    for op, b in re.findall(r"([+-])(\d)", m.group(2)):
        new = value + int(b) if op == "+" else value - int(b)
        steps.append((value, op, int(b), new))
        value = new
    return steps


def worked_steps(prompt: str) -> list[tuple[int, str, int, int]] | None:
    """The worked steps (running value, op, operand, result) of a toy math prompt; None for any
    other prompt."""
    return _math_steps(prompt) if _MATH_PROMPT.fullmatch(prompt) else None


def math_row(rng: random.Random, n_ops: int, idx: str) -> dict:
    expr, steps = _math_problem(rng, n_ops)
    return {"id": idx, "domain": "math", "prompt": f"Compute {expr}.", "answer": str(steps[-1][3])}


_CODE_OPS = [("add", "+"), ("subtract", "-"), ("multiply by", "*")]
_CODE_SYMBOL = dict(_CODE_OPS)


def _apply(ops: list[tuple[str, int]], x: int) -> int:
    for sym, k in ops:
        x = x + k if sym == "+" else x - k if sym == "-" else x * k
    return x


def code_row(rng: random.Random, n_ops: int, idx: str) -> dict:
    ops = []
    for _ in range(n_ops):
        word, sym = rng.choice(_CODE_OPS)
        k = rng.randint(2, 9) if sym == "*" else rng.randint(1, 19)
        ops.append((word, sym, k))
    desc = ", then ".join(f"{w} {k}" for w, _, k in ops)
    sym_ops = [(sym, k) for _, sym, k in ops]
    asserts = [f"assert f({x}) == {_apply(sym_ops, x)}" for x in (0, 1, 2, 5, 7)]
    return {
        "id": idx,
        "domain": "code",
        "prompt": f"Write f(x): {desc}.",
        "tests": calls_from_asserts(asserts, entry="f"),
    }


def _code_ops(prompt: str) -> list[tuple[str, int]]:
    if not (prompt.startswith("Write f(x): ") and prompt.endswith(".")):
        raise ValueError(f"not a toy code prompt: {prompt!r}")
    ops = []
    for part in prompt[len("Write f(x): ") : -1].split(", then "):
        word, _, k = part.rpartition(" ")
        if word not in _CODE_SYMBOL or not k.isdigit():
            raise ValueError(f"not a toy code prompt: {prompt!r}")
        ops.append((_CODE_SYMBOL[word], int(k)))
    return ops


def code_solution(ops: list[tuple[str, int]], rng: random.Random, hasty: float = 0.0) -> str:
    """One line per operation, or with probability ``hasty`` a run of additions and
    subtractions folded into one net constant (``x += 8`` for add 3, then add 5)."""
    lines, i = [], 0
    while i < len(ops):
        j = i + 1
        if ops[i][0] != "*" and rng.random() < hasty:
            while j < len(ops) and ops[j][0] != "*":
                j += 1
        if j - i == 1:
            sym, k = ops[i]
        else:
            net = sum(k if sym == "+" else -k for sym, k in ops[i:j])
            sym, k = ("+", net) if net >= 0 else ("-", -net)
        lines.append(f"    x {sym}= {k}")
        i = j
    body = "\n".join(lines)
    return f"```python\ndef f(x):\n{body}\n    return x\n```"


def worked_segments(row: dict, rng: random.Random, hasty: float = 0.0, checks: float = 0.0) -> list[tuple[str, bool]]:
    """The worked solution a tiny model is pretrained on, in a style set by ``hasty`` and ``checks``,
    as (text, learned) pieces (``training_segments``)."""
    if row["domain"] == "math":
        return training_segments(math_solution(_math_steps(row["prompt"]), rng, hasty, checks))
    return [(code_solution(_code_ops(row["prompt"]), rng, hasty), True)]


def worked_solution(row: dict, rng: random.Random, hasty: float = 0.0, checks: float = 0.0) -> str:
    """The worked solution as plain text."""
    return "".join(text for text, _ in worked_segments(row, rng, hasty, checks))


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
        row = make(rng, n_ops, f"{split.name}-{len(rows)}")
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
            row = make(rng, 1 + i % 5, "v")
            texts += [row["prompt"], worked_solution(row, rng, hasty=0.5, checks=0.3)]
    return texts
