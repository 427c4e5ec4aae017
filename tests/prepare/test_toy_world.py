"""The toy world's tasks and worked-solution styles, checked by hand."""

from __future__ import annotations

import random

import pytest

from scout.grading import Grader
from scout.toy.tasks import (
    Split,
    code_solution,
    generate_split,
    math_solution,
    training_segments,
    worked_solution,
)

STEPS = [(9, "+", 3, 12), (12, "-", 5, 7), (7, "+", 3, 10)]  # Compute 9+3-5+3.


class Scripted(random.Random):
    """random() answers from a script (then 0.99), randint its lower bound, choice the first item: a
    style draw made visible."""

    def __init__(self, draws):
        super().__init__(0)
        self.draws = list(draws)

    def random(self):
        return self.draws.pop(0) if self.draws else 0.99

    def randint(self, a, b):
        return a

    def choice(self, seq):
        return seq[0]


def test_careful_math_solution_by_hand():
    assert math_solution(STEPS, Scripted([]), hasty=0.0) == ("9+3=12\n\n12-5=7\n\n7+3=10\n\nThe answer is \\boxed{10}.")


def test_hasty_math_solution_states_the_answer_part_way():
    # first draw 0.1 < hasty 0.5: stop after randint(1, 2) = 1 written step, then the answer
    assert math_solution(STEPS, Scripted([0.1]), hasty=0.5) == "9+3=12\n\nThe answer is \\boxed{10}."


def test_a_late_caught_slip_by_hand():
    """checks: the second draw (after the hasty one), 0.1 < 0.5, makes a late check; randint gives its
    lower bounds: the slip at the first step, carried no further; choice picks the first of -2, -1, 1,
    2 (12 - 2 = 10). The slip is context only (a model learns the restart, not the slip), then the
    solution starts again from the problem."""
    got = training_segments(math_solution(STEPS, Scripted([0.99, 0.1]), hasty=0.0, checks=0.5))
    assert got == [
        ("9+3=10", False),
        ("\n\nWait, let me start again.\n\n9+3=12\n\n12-5=7\n\n7+3=10\n\nThe answer is \\boxed{10}.", True),
    ]
    no_check = math_solution(STEPS, Scripted([0.99, 0.7]), hasty=0.0, checks=0.5)
    assert no_check == math_solution(STEPS, Scripted([])) and training_segments(no_check) == [(no_check, True)]


def test_code_solutions_by_hand():
    ops = [("+", 3), ("+", 5), ("-", 10), ("*", 2), ("+", 1)]
    careful = "```python\ndef f(x):\n    x += 3\n    x += 5\n    x -= 10\n    x *= 2\n    x += 1\n    return x\n```"
    assert code_solution(ops, Scripted([]), hasty=0.0) == careful
    # hasty: the first run of additions folds into one constant (3 + 5 - 10 = -2); multiplication
    # is never folded; the last run draws 0.99 and stays as it is
    hasty = "```python\ndef f(x):\n    x -= 2\n    x *= 2\n    x += 1\n    return x\n```"
    assert code_solution(ops, Scripted([0.1]), hasty=0.5) == hasty


@pytest.mark.parametrize("domain", ["math", "code"])
def test_every_style_of_worked_solution_is_graded_right(domain):
    """Careful or hasty, slips and all, a worked solution is a correct answer by the real graders."""
    rows = generate_split(Split("t", domain, 24, 1, 5), seed=1)
    rng = random.Random(0)
    with Grader() as grader:
        for hasty in (0.0, 0.6, 1.0):
            verdicts = grader.grade([worked_solution(r, rng, hasty) for r in rows], rows)
            assert all(verdicts), (domain, hasty)


def test_worked_solution_refuses_a_foreign_prompt():
    with pytest.raises(ValueError, match="not a toy math prompt"):
        worked_solution({"domain": "math", "prompt": "What is 2+2?"}, random.Random(0))
