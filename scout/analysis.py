"""Teacher continuation from student prefixes: the paper's probe of the off-policy teacher.

For each student response, keep the first ``ratio`` of its tokens and let a teacher continue it;
the continuation accuracy (graded like any answer) says how well the teacher recovers from
student-generated contexts.
"""

from __future__ import annotations

import torch

from scout.embedded import lm
from scout.grading import Grader


@torch.no_grad()
def continuation_accuracy(
    teacher_path: str,
    rows: list[dict],
    responses: list[str],
    ratio: float,
    k: int = 4,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
) -> float:
    """Mean accuracy of ``k`` teacher continuations per (row, student response) prefix."""
    device = lm.pick_device("auto")
    tok = lm.load_tokenizer(teacher_path)
    teacher = lm.load_model(teacher_path, device).eval()
    prompts, prefixes, graded_rows = [], [], []
    for row, resp in zip(rows, responses, strict=True):
        ids = tok.encode(resp, add_special_tokens=False)
        cut = ids[: int(ratio * len(ids))]
        for _ in range(k):
            prompts.append(lm.prompt_ids(tok, row["prompt"]) + cut)
            prefixes.append(cut)
            graded_rows.append(row)
    g = torch.Generator().manual_seed(seed)
    conts = lm.sample(teacher, prompts, lm.Sampling(max_new_tokens, temperature), tok.eos_token_id, tok.pad_token_id, g)
    texts = [tok.decode([t for t in p + c if t != tok.eos_token_id]) for p, c in zip(prefixes, conts, strict=True)]
    with Grader() as grader:
        verdicts = grader.grade(texts, graded_rows)
    return sum(verdicts) / max(1, len(verdicts))
