"""Teacher continuation from prefixes: the paper's probe of the off-policy teacher.

Keep the first ``ratio`` of a response's tokens and let a teacher continue it ``k`` times; the
continuation accuracy (prefix + continuation graded like any answer) says how well the teacher
recovers from that context. Responses come from the evaluation stage's generations (every repeat
is one response), so nothing is sampled twice:

- the initial teacher on the initial student's prefixes, and on its **own** prefixes at the same
  ratios (the reference: the same teacher on contexts from its own distribution);
- each SCOUT run's trained teacher on the same initial-student prefixes (the fixed-prefix
  comparison: did SCOUT make the teacher better at continuing a student?);
- the prefix-0 control's trained teacher and every LoRA teacher's (``jobs.compared_teachers``) on
  the same initial-student prefixes, labelled ``control`` and by their variant;
- the initial and the trained teacher on the SCOUT student's prefixes at the same checkpoint (matched
  checkpoints: the final one, and any intermediate ``analysis.checkpoints``; labelled
  ``student@step{N}`` and ``scout@step{N}``).

Every teacher probed (initial, SCOUT-trained, the prefix-0 control's; not the LoRA ones) also gives its probability of a
reflection word after each step of the initial student's responses (``reflection.csv``,
``scout.behaviour``): does training teach it to reflect where the student went wrong, or everywhere?

The teacher's token entropy along student responses against along its own says how uncertain it
is there. Generation runs behind ``scout.generation``'s interface, so the same probes run on the
embedded engine (toy world, CPU) and on vLLM.
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pandas as pd
import torch

from scout import algorithms as alg
from scout import behaviour, jobs
from scout.embedded import sampling
from scout.generation import make_generator
from scout.grading import Grader
from scout.io import read_jsonl
from scout.prepare import load_rows
from scout.schema import default
from scout.workflow import spec_digest

CONTINUATION = ["setting", "teacher", "seed", "prefixes", "prefix_ratio", "accuracy", "n", "prefix_tokens",
                "continuation_tokens", "committed"]  # fmt: skip
ENTROPY = ["setting", "teacher", "seed", "context", "position", "entropy", "count"]
ENTROPY_RESPONSES = ["setting", "teacher", "seed", "context", "response", "question", "entropy"]
# one row per probed prefix: the unit of the claims' tests is the question, with its responses and
# their continuations nested in it
ITEMS = ["setting", "teacher", "seed", "prefixes", "prefix_ratio", "question", "response", "correct", "k", "committed"]


def split_point(length: int, ratio: float) -> int:
    """Tokens kept of a response of ``length`` tokens at prefix ``ratio`` (as SCOUT cuts them)."""
    return int(alg.split_points(torch.tensor([length]), ratio)[0])


def cut(tok, ids: list[int], ratio: float, split: str = "response", marker: str | None = None) -> tuple[list[int], bool]:
    """The prefix of a response's tokens at ``ratio`` (of the whole response, or of its reasoning
    before the final-answer line), and whether it already reaches into that line."""
    reasoning = alg.reasoning_length([tok.decode([t]) for t in ids], marker)
    kept = ids[: split_point(reasoning if split == "reasoning" else len(ids), ratio)]
    return kept, len(kept) > reasoning


def responses(path: str | Path, rows_by_id: dict[str, dict], per_row: int | None = None,
              probed: set[str] | None = None) -> list[tuple[dict, str]]:  # fmt: skip
    """(row, response) for the samples of an evaluation's generations file (the first ``per_row``
    repeats of each row, or all; only the ``probed`` rows, when given)."""
    out = []
    for g in read_jsonl(path):
        if per_row is not None and g["repeat"] >= per_row:
            continue
        if g["id"] not in rows_by_id:
            raise ValueError(f"{path}: sample id {g['id']!r} is not a row of the benchmark")
        if probed is None or g["id"] in probed:
            out.append((rows_by_id[g["id"]], g["response"]))
    return out


def continuation_accuracy(
    engine, grader: Grader, pairs: list[tuple[dict, str]], ratios: list[float], k: int, sampling: dict, seed: int,
    split: str = "response", marker: str | None = None,
) -> list[dict]:  # fmt: skip
    """Per ratio: accuracy of ``k`` continuations of every response's prefix, mean lengths, the share
    of prefixes that already hold the final-answer line (``committed``), and ``items``: per prefix,
    its question, its response's index and how many of its continuations were right."""
    tok = engine.tokenizer
    out = []
    for i, ratio in enumerate(ratios):
        prompts, prefixes, graded, committed, flags = [], [], [], 0, []
        for row, text in pairs:
            prefix, done = cut(tok, tok.encode(text, add_special_tokens=False), ratio, split, marker)
            committed += done
            flags.append(done)
            prompts.append(engine.render(row["prompt"]) + prefix)
            prefixes.append(prefix)
            graded.append(row)
        conts = engine.complete(prompts, k, sampling, seed * 1009 + i)
        texts = [tok.decode(p + list(c.token_ids)) for p, cs in zip(prefixes, conts, strict=True) for c in cs]
        verdicts = grader.grade(texts, [r for r in graded for _ in range(k)])
        out.append(
            {
                "prefix_ratio": ratio,
                "accuracy": sum(verdicts) / max(1, len(verdicts)),
                "n": len(verdicts),
                "prefix_tokens": sum(map(len, prefixes)) / max(1, len(prefixes)),
                "continuation_tokens": sum(len(c.token_ids) for cs in conts for c in cs) / max(1, len(verdicts)),
                "committed": committed / max(1, len(pairs)),
                "items": [
                    {"question": row["id"], "response": j, "correct": sum(verdicts[j * k : (j + 1) * k]), "k": k,
                     "committed": flags[j]}
                    for j, (row, _) in enumerate(pairs)
                ],  # fmt: skip
            }
        )
    return out


def entropy_along(engine, pairs: list[tuple[dict, str]], max_tokens: int) -> list[list[float]]:
    """The engine's next-token entropy at every token of each response (first ``max_tokens``)."""
    tok = engine.tokenizer
    prompts = [engine.render(row["prompt"]) for row, _ in pairs]
    resp = [tok.encode(text, add_special_tokens=False)[:max_tokens] for _, text in pairs]
    return engine.entropies(prompts, resp)


def reflection_after_steps(engine, pairs: list[tuple[dict, str]], verdicts: list[bool]) -> list[dict]:
    """At every paragraph boundary after a step of each response, the engine's probability that the
    next token is a reflection word (Relay-OPD's list), with whether the step was right
    (``scout.behaviour.reflection_points``)."""
    tok = engine.tokenizer
    reflect = sampling.vocab_flags(tok, len(tok))[0].nonzero().squeeze(1).tolist()
    prompts, resp, points = [], [], []
    for (row, text), ok in zip(pairs, verdicts, strict=True):
        ids = tok.encode(text, add_special_tokens=False)
        prompts.append(engine.render(row["prompt"]))
        resp.append(ids)
        points.append(behaviour.reflection_points([tok.decode([t]) for t in ids], row["prompt"], ok))
    mass = engine.next_token_mass(prompts, resp, [[p[0] for p in pts] for pts in points], reflect)
    return [
        {"question": row["id"], "response": j, "paragraph": paragraph, "after": after, "judged": judged, "p_reflect": m}
        for j, ((row, _), pts, ms) in enumerate(zip(pairs, points, mass, strict=True))
        for (_, paragraph, after, judged), m in zip(pts, ms, strict=True)
    ]


def by_position(curves: list[list[float]]) -> list[tuple[int, float, int]]:
    """(position, mean entropy, responses reaching it) over curves of different lengths."""
    out = []
    for pos in range(max(map(len, curves), default=0)):
        vals = [c[pos] for c in curves if len(c) > pos]
        out.append((pos, sum(vals) / len(vals), len(vals)))
    return out


def provenance(spec: dict) -> dict:
    """The spec these probes ran (its digest) and the spec each probed run was trained with, so that
    a changed config or a retrained run shows the analysis as stale (``scout.freshness``)."""
    trained = {}
    for r in [*spec["runs"], *spec.get("controls", [])]:
        run = Path(r["teacher"]).parent.parent / "train.json"
        if run.exists():
            trained[str(run.parent)] = spec_digest(json.loads(run.read_text())["spec"])
    return {"spec_digest": spec_digest(spec), "trained": trained}


def run(spec: dict, out_dir: str | Path, log=print) -> tuple[int, int]:
    """Every probe of one setting; writes continuation.csv, continuation_items.csv, entropy.csv,
    entropy_responses.csv and reflection.csv."""
    import torch

    torch.set_num_threads(spec.get("threads", default("training.threads")))
    rows_by_id = {r["id"]: r for r in load_rows(spec["benchmark_path"])}
    per_row = spec.get("responses")
    probed = set(list(rows_by_id)[: spec["questions"]]) if spec.get("questions") else None
    initial_student = responses(spec["student_generations"], rows_by_id, per_row, probed)
    own = responses(spec["teacher_generations"], rows_by_id, per_row, probed)
    sampling = {**spec["sampling"], "max_new_tokens": spec["max_new_tokens"]}
    ratios, k, setting = spec["ratios"], spec["k"], spec["setting"]
    cont, ent, ent_resp, items, reflect = [], [], [], [], []

    def probe(engine, grader, teacher, seed, prefixes, pairs):
        points = continuation_accuracy(engine, grader, pairs, ratios, k, sampling, seed, spec.get("split", default("methods.scout.split")),
                                       spec.get("answer_marker"))  # fmt: skip
        for point in points:
            label = {"setting": setting, "teacher": teacher, "seed": seed, "prefixes": prefixes}
            items.extend({**label, "prefix_ratio": point["prefix_ratio"], **it} for it in point.pop("items"))
            cont.append({**label, **point})
            log(f"{teacher} teacher (seed {seed}) on {prefixes} prefixes at {point['prefix_ratio']:.0%}: "
                f"continuation accuracy {point['accuracy']:.3f} ({point['n']} continuations; "
                f"{point['committed']:.0%} of the prefixes hold the final answer)")  # fmt: skip

    def entropy(engine, teacher, seed, context, pairs):
        curves = entropy_along(engine, pairs, spec["max_new_tokens"])
        ent.extend({"setting": setting, "teacher": teacher, "seed": seed, "context": context, "position": p,
                    "entropy": e, "count": n} for p, e, n in by_position(curves))  # fmt: skip
        ent_resp.extend({"setting": setting, "teacher": teacher, "seed": seed, "context": context, "response": i,
                         "question": pairs[i][0]["id"], "entropy": sum(c) / len(c)}
                        for i, c in enumerate(curves) if c)  # fmt: skip

    def reflection(engine, teacher, seed):
        rows = reflection_after_steps(engine, initial_student, student_right)
        reflect.extend({"setting": setting, "teacher": teacher, "seed": seed, **r} for r in rows)
        by = pd.DataFrame(rows)
        if len(by):
            means = by.groupby("after").p_reflect.mean()
            log(f"{teacher} teacher (seed {seed}): P(reflection word) after the initial student's steps: "
                + ", ".join(f"{k} {v:.3f}" for k, v in means.items()) + f" ({by.judged.iloc[0]}-level)")  # fmt: skip

    with Grader() as grader:
        student_right = grader.grade([t for _, t in initial_student], [r for r, _ in initial_student])
        # a run's student (and teacher) at each matched checkpoint: "final", or an intermediate one
        students = {(r["seed"], r.get("checkpoint", "final")): responses(r["generations"], rows_by_id, per_row, probed)
                    for r in spec["runs"]}  # fmt: skip
        with closing(_engine(spec, spec["teacher"])) as engine:
            reflection(engine, "initial", 0)
            probe(engine, grader, "initial", 0, "initial-student", initial_student)
            probe(engine, grader, "initial", 0, "own", own)
            entropy(engine, "initial", 0, "own", own)
            entropy(engine, "initial", 0, "student", initial_student)
            for (seed, ckpt), pairs in students.items():
                probe(engine, grader, "initial", seed, jobs.probe_labels(ckpt)[1], pairs)
        for r in spec["runs"]:
            ckpt = r.get("checkpoint", "final")
            name, prefixes = jobs.probe_labels(ckpt)
            with closing(_engine(spec, r["teacher"])) as engine:
                probe(engine, grader, name, r["seed"], "initial-student", initial_student)
                probe(engine, grader, name, r["seed"], prefixes, students[r["seed"], ckpt])
                if ckpt == "final":  # entropy after training: the trained teacher's own responses vs the student's
                    reflection(engine, "scout", r["seed"])
                    asked = [row for q, row in rows_by_id.items() if probed is None or q in probed]
                    entropy(engine, "scout", r["seed"], "own", _own_responses(engine, asked, sampling, r["seed"]))
                    entropy(engine, "scout", r["seed"], "student", students[r["seed"], ckpt])
        for r in spec.get("controls", []):  # other trained teachers (the prefix-0 control's, LoRA ones): the same prefixes
            with closing(_engine(spec, r["teacher"])) as engine:
                label = r.get("label", "control")
                probe(engine, grader, label, r["seed"], "initial-student", initial_student)
                if label == "control":  # the behaviour figure sets the control's reflection beside SCOUT's
                    reflection(engine, label, r["seed"])
    _write(Path(out_dir), spec, {"continuation": (cont, CONTINUATION), "entropy": (ent, ENTROPY),
                                 "entropy_responses": (ent_resp, ENTROPY_RESPONSES), "continuation_items": (items, ITEMS),
                                 "reflection": (reflect, behaviour.REFLECTION_COLUMNS)})  # fmt: skip
    return len(cont), len(ent)


def _own_responses(engine, rows: list[dict], sampling: dict, seed: int) -> list[tuple[dict, str]]:
    """One response of the teacher's own to each row, paired with it."""
    gens = engine.generate([row["prompt"] for row in rows], 1, sampling, seed=seed)
    return [(row, cs[0].text) for row, cs in zip(rows, gens, strict=True)]


def _engine(spec: dict, teacher: str):
    """A teacher's generator, as the spec's engine, chat template, options and device make it."""
    return make_generator(teacher, spec.get("engine", default("evaluation.engine")), spec.get("chat"),
                          spec.get("engine_options"), spec.get("device", default("evaluation.device")))  # fmt: skip


def _write(out: Path, spec: dict, tables: dict[str, tuple[list, list]]) -> None:
    """Each probe table as ``{name}.csv`` with its columns, and the analysis's provenance."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (rows, columns) in tables.items():
        pd.DataFrame(rows, columns=columns).to_csv(out / f"{name}.csv", index=False)
    (out / "analysis.json").write_text(json.dumps(provenance(spec), indent=1))
