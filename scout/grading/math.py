"""Math grading on math-verify: gold parsed first, the last boxed answer of the response wins.

math-verify's own timeouts use signals, which only work in a process's main thread, so items are
graded in worker processes; a worker that overruns its per-item deadline anyway is killed and the
item counts as wrong, so one pathological answer never stalls or stops a job. Workers come from a
fork server (a clean single-threaded process with math-verify preloaded), never by forking the
caller: forking a multi-threaded process (a Ray actor, a trainer) can deadlock the child.

Two cases are decided in the caller, without a worker: no complete boxed answer (wrong, as
math-verify is never asked), and a boxed plain integer against a plain-integer gold, where
math-verify's verdict is integer equality (``tests/evaluate/test_grading.py`` holds the two equal). Every
toy-world answer is such an integer, and the round trip to a worker cost more than the check.
"""

from __future__ import annotations

import multiprocessing as mp
import re
from collections.abc import Sequence

THINK_END = "</think>"
INTEGER = re.compile(r"\s*(-?[0-9]{1,64})\s*")  # ASCII digits: \d takes any script's, math-verify does not


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``); None if there is none.
    A box left unclosed by truncation does not count."""
    closes, opened = {}, []  # each brace's partner, in one pass (a box per brace was quadratic)
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            opened.append(m.start())
        elif opened:
            closes[opened.pop()] = m.start()
    for m in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", text))):
        if m.end() - 1 in closes:
            return text[m.end() : closes[m.end() - 1]]
    return None


def answer_of(response: str) -> str | None:
    """What a verdict depends on: the last complete boxed answer after any ``</think>``, or None."""
    if THINK_END in response:
        response = response.split(THINK_END)[-1]
    answer = last_boxed(response)
    return answer if answer is not None and answer.strip() else None


def grade_one(response: str, gold: str, timeout: int = 5) -> bool:
    """True when the last boxed answer of ``response`` equals ``gold`` by math-verify."""
    from math_verify import parse, verify

    answer = answer_of(response)
    if answer is None:
        return False
    gold_parsed = parse(f"${gold}$", parsing_timeout=timeout)
    if not gold_parsed:
        gold_parsed = parse(gold, parsing_timeout=timeout)
    pred = parse(f"$\\boxed{{{answer}}}$", parsing_timeout=timeout)
    if not gold_parsed or not pred:
        return False
    return bool(verify(gold_parsed, pred, timeout_seconds=timeout))


def quick_verdict(response: str, gold: str) -> bool | None:
    """The verdict where it needs no parser (see the module's docstring); None: ask math-verify."""
    answer = answer_of(response)
    if answer is None:
        return False
    a, g = INTEGER.fullmatch(answer), INTEGER.fullmatch(gold)
    if a and g:
        return int(a.group(1)) == int(g.group(1))
    return None


def _grade_item(item: tuple[str, str, int]) -> bool:
    try:
        return grade_one(*item)
    except Exception:  # noqa: BLE001 - any failure of the verifier is a wrong answer, not a crash
        return False


class MathGrader:
    """A small pool of grading processes with a hard per-item deadline."""

    def __init__(self, workers: int = 1, item_timeout: int = 5, deadline: float = 20.0, item_fn=None):
        self.workers, self.item_timeout, self.deadline = workers, item_timeout, deadline
        self.item_fn = item_fn or _grade_item  # what a worker runs per item (a test swaps in a slow one)
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(["scout.grading.math", "math_verify"])
        self._pool = None

    def _start(self):
        self._pool = self._ctx.Pool(self.workers)

    def grade(self, responses: Sequence[str], golds: Sequence[str]) -> list[bool]:
        quick = [quick_verdict(r, g) for r, g in zip(responses, golds, strict=True)]
        ask = [i for i, v in enumerate(quick) if v is None]
        slow = iter(self._in_workers([(responses[i], golds[i], self.item_timeout) for i in ask]))
        return [next(slow) if v is None else v for v in quick]

    def _in_workers(self, items: list[tuple[str, str, int]]) -> list[bool]:
        verdicts: list[bool] = []
        while len(verdicts) < len(items):
            if self._pool is None:
                self._start()
            it = self._pool.imap(self.item_fn, items[len(verdicts) :])
            try:
                for _ in range(len(items) - len(verdicts)):
                    verdicts.append(bool(it.next(timeout=self.deadline)))
            except mp.TimeoutError:
                verdicts.append(False)
                self.close()
        return verdicts

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
