"""What the models do, read from their text: reflection words per response, and where a teacher
reflects on a student's steps.

Two measures, generic over the toy grid and the paper grid:

- per run (``summary/behaviour.csv``, from the final evaluations' generations): reflection words
  per response (Relay-OPD's trigger words: Wait, But, Hmm, ...), the share of responses with one,
  and accuracy with and without them. A student that learns to say "Wait" without learning to
  check its work shows more of them and no gain in accuracy where it says them;
- per teacher (``analysis/{setting}/reflection.csv``, by the analysis stage): the probability that
  the teacher's next token is a reflection word at each paragraph boundary of the initial
  student's responses, after a right and after a wrong step. In the toy world a step's
  correctness is known (its equation against the problem's worked steps); on real benchmarks it
  is not, and the boundaries are labelled by whether the response's final answer is right
  (``judged: response``): a coarser question, whether the teacher reflects more in responses
  that go wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from scout.algorithms import REFLECTION_WORDS, reflection_variants
from scout.io import read_jsonl
from scout.toy.tasks import worked_steps

RUN_COLUMNS = ["setting", "variant", "method", "seed", "responses", "reflections_per_response", "with_reflection",
               "accuracy", "accuracy_with", "accuracy_without"]  # fmt: skip
REFLECTION_COLUMNS = ["setting", "teacher", "seed", "question", "response", "paragraph", "after", "judged", "p_reflect"]
_WORDS = re.compile(r"\b(" + "|".join(sorted({v.strip() for v in reflection_variants(REFLECTION_WORDS)})) + r")\b")
_TOY_STEP = re.compile(r"(\d+)([+-])(\d+)=(-?\d+)")
PARAGRAPH = "\n\n"


def reflection_count(text: str) -> int:
    """Reflection words in a text, as whole words (Relay-OPD's list with its case variants)."""
    return len(_WORDS.findall(text))


def run_behaviour(samples: Iterable[dict]) -> dict:
    """One run's behaviour from its samples (``response`` and ``correct`` each): responses, reflection
    words per response, the share with at least one, and accuracy overall, with and without."""
    n = words = with_ = right = right_with = 0
    for s in samples:
        k = reflection_count(s["response"])
        n += 1
        words += k
        with_ += k > 0
        right += bool(s["correct"])
        right_with += bool(s["correct"]) and k > 0
    nan = float("nan")
    return {
        "responses": n,
        "reflections_per_response": words / n if n else nan,
        "with_reflection": with_ / n if n else nan,
        "accuracy": right / n if n else nan,
        "accuracy_with": right_with / with_ if with_ else nan,
        "accuracy_without": (right - right_with) / (n - with_) if n > with_ else nan,
    }


def behaviour_table(records: Sequence[dict], generations: Sequence[Path]) -> pd.DataFrame:
    """Per run (final checkpoints): ``run_behaviour`` over every benchmark's generations, keyed by
    the record beside each generations file."""
    runs: dict[tuple, list[Path]] = {}
    for rec, gen in zip(records, generations, strict=True):
        if rec.get("checkpoint") != "final" or not Path(gen).exists():
            continue
        key = (rec["setting"], rec["variant"], rec.get("method", rec["variant"]), int(rec["seed"]))
        runs.setdefault(key, []).append(Path(gen))
    rows = []
    for (setting, variant, method, seed), paths in runs.items():
        samples = (s for p in paths for s in read_jsonl(p))
        rows.append({"setting": setting, "variant": variant, "method": method, "seed": seed, **run_behaviour(samples)})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


# ------------------------------------------------------------------------------------------------
# Where a teacher reflects on a student's steps
# ------------------------------------------------------------------------------------------------


def toy_step_verdicts(prompt: str, paragraphs: Sequence[str]) -> list[bool | None] | None:
    """Per paragraph of a toy math response: True for a step on the problem's worked path, False for
    a step off it (a wrong result, a miscopied operand or running value, or a step carried on from
    one), None for anything else (a reflection, the answer line). None for a prompt that is not a
    toy math problem: its steps cannot be judged."""
    steps = worked_steps(prompt)
    if steps is None:
        return None
    path = {(a, op, b, c) for a, op, b, c in steps}
    out: list[bool | None] = []
    for p in paragraphs:
        m = _TOY_STEP.fullmatch(p.strip())
        out.append(None if m is None else (int(m[1]), m[2], int(m[3]), int(m[4])) in path)
    return out


def boundaries(pieces: Sequence[str]) -> list[tuple[int, int]]:
    """(token index, paragraph index) of every token that starts a paragraph after the first: the
    token after one whose text holds a blank line. Paragraph i is the text before that boundary."""
    out, paragraph = [], 0
    for i, piece in enumerate(pieces[:-1]):
        if PARAGRAPH in piece:
            paragraph += piece.count(PARAGRAPH)
            out.append((i + 1, paragraph - 1))
    return out


def reflection_points(pieces: Sequence[str], prompt: str, correct: bool) -> list[tuple[int, int, str, str]]:
    """(token index, paragraph index, after, judged) for each boundary after a step of a response:
    ``after`` is "right" or "wrong", ``judged`` says by what: the step itself ("step", toy math) or
    the response's final answer ("response", where steps cannot be judged)."""
    text = "".join(pieces)
    paragraphs = text.split(PARAGRAPH)
    steps = toy_step_verdicts(prompt, paragraphs)
    out = []
    for token, paragraph in boundaries(pieces):
        if steps is None:
            out.append((token, paragraph, "right" if correct else "wrong", "response"))
        elif paragraph < len(steps) and steps[paragraph] is not None:
            out.append((token, paragraph, "right" if steps[paragraph] else "wrong", "step"))
    return out
