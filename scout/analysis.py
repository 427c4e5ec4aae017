"""Teacher continuation from student prefixes: the paper's probe of the off-policy teacher.

For each student response, keep the first ``ratio`` of its tokens and let a teacher continue it;
the continuation accuracy (graded like any answer) says how well the teacher recovers from
student-generated contexts. The teacher's token entropy along student responses, against along its
own, says how uncertain it is there. The report draws both (``scout.figures``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from scout.algorithms import token_entropy
from scout.embedded import lm
from scout.grading import Grader
from scout.io import read_jsonl


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


def entropy_by_position(logits: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Mean next-token entropy at each response position [T] over the rows that reach it."""
    ent = token_entropy(logits) * mask
    counts = mask.sum(dim=0)
    return [float(e / c) if c > 0 else float("nan") for e, c in zip(ent.sum(dim=0), counts, strict=True)]


@torch.no_grad()
def teacher_entropy(
    teacher_path: str, rows: list[dict], responses: list[str], max_new_tokens: int = 64, seed: int = 0
) -> dict[str, list[float]]:
    """The teacher's entropy along its own sampled responses vs along the student's responses."""
    device = lm.pick_device("auto")
    tok = lm.load_tokenizer(teacher_path)
    teacher = lm.load_model(teacher_path, device).eval()
    prompts = [lm.prompt_ids(tok, r["prompt"]) for r in rows]
    g = torch.Generator().manual_seed(seed)
    own = lm.sample(teacher, prompts, lm.Sampling(max_new_tokens), tok.eos_token_id, tok.pad_token_id, g)
    student = [tok.encode(r, add_special_tokens=False)[:max_new_tokens] for r in responses]
    out = {}
    for context, resp in (("own", own), ("student", student)):
        logits, _, mask = lm.response_logits(teacher, prompts, resp, tok.pad_token_id)
        out[context] = entropy_by_position(logits, mask)
    return out


def run(spec: dict, out_dir: str | Path, log=print) -> tuple[int, int]:
    """Continuation accuracy and entropy of the initial and the SCOUT-trained teacher, from the
    final SCOUT students' responses (repeat 0) on one benchmark; one CSV each."""
    torch.set_num_threads(spec.get("threads", 1))
    rows_by_id = {r["id"]: r for r in read_jsonl(spec["benchmark_path"])}
    cont, ent = [], []
    for run_ in spec["runs"]:
        gens = [g for g in read_jsonl(run_["generations"]) if g["repeat"] == 0]
        rows = [rows_by_id[g["id"]] for g in gens]
        responses = [g["response"] for g in gens]
        for teacher, path in (("initial", spec["teacher"]), ("scout", run_["teacher"])):
            tok = lm.load_tokenizer(path)
            lengths = [len(tok.encode(r, add_special_tokens=False)) for r in responses]
            for ratio in spec["ratios"]:
                acc = continuation_accuracy(
                    path, rows, responses, ratio, spec["k"], spec["max_new_tokens"], seed=run_["seed"]
                )
                tokens = sum(int(ratio * n) for n in lengths) / max(1, len(lengths))
                cont.append((spec["setting"], teacher, run_["seed"], ratio, acc, tokens))
                log(f"seed {run_['seed']} {teacher} teacher, prefix {ratio:.0%}: continuation accuracy {acc:.3f}")
            curves = teacher_entropy(path, rows, responses, spec["max_new_tokens"], seed=run_["seed"])
            for context, curve in curves.items():
                ent += [(spec["setting"], teacher, run_["seed"], context, i, e) for i, e in enumerate(curve)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["setting", "teacher", "seed"]
    pd.DataFrame(cont, columns=[*cols, "prefix_ratio", "accuracy", "prefix_tokens"]).to_csv(
        out / "continuation.csv", index=False
    )
    pd.DataFrame(ent, columns=[*cols, "context", "position", "entropy"]).to_csv(out / "entropy.csv", index=False)
    return len(cont), len(ent)
