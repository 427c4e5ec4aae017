"""Evaluate one checkpoint on every benchmark of its domain: avg@k records plus raw generations.

Record (one per checkpoint x benchmark, ``{bench}.json``): the k repeat-level accuracies, their
mean and the SEM over repeats. Beside it, ``{bench}.generations.jsonl`` holds one line per sample,
``{"id", "repeat", "response", "finish_reason", "correct"}``, written before grading starts, so a
record can always be regraded (``scout grade``) without regenerating.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from contextlib import closing
from pathlib import Path

from scout.algorithms import sem
from scout.catalogue import DataError
from scout.generation import make_generator
from scout.grading import Grader
from scout.grading.sandbox import isolation, run_program, sandbox_python
from scout.io import read_jsonl, write_jsonl
from scout.prepare import load_rows
from scout.schema import default
from scout.tracking import Tracker
from scout.tuning import overlap
from scout.workflow import spec_digest

META = ("setting", "variant", "method", "seed", "checkpoint")


def _grader() -> Grader:
    """As many code workers as the job has cores: each runs one sandboxed program at a time."""
    cores = len(os.sched_getaffinity(0))
    return Grader(code_workers=max(2, cores), math_workers=max(1, min(4, cores)))


def make_record(benchmark: str, model: str, verdicts: list[list[bool]], meta: dict | None = None) -> dict:
    """verdicts[row][repeat] -> record with repeat-level accuracies, mean and SEM."""
    k = len(verdicts[0]) if verdicts else 0
    accs = [sum(v[r] for v in verdicts) / len(verdicts) for r in range(k)]
    return {
        "benchmark": benchmark,
        "model": model,
        "rows": len(verdicts),
        "repeats": k,
        "accuracies": accs,
        "mean": sum(accs) / k if k else float("nan"),
        "sem": sem(accs),
        **(meta or {}),
    }


def grade_samples(grader: Grader, rows: list[dict], samples: list[dict], k: int) -> list[list[bool]]:
    """verdicts[row][repeat] for samples ordered row by row, k per row."""
    flat = grader.grade([s["response"] for s in samples], [r for r in rows for _ in range(k)])
    return [flat[j * k : (j + 1) * k] for j in range(len(rows))]


def _truncated(samples: list[dict]) -> float:
    return sum(s.get("finish_reason") == "length" for s in samples) / max(1, len(samples))


def _sandboxed_text(tests: dict) -> str:
    """The part of a row's tests that runs in the sandbox (a ``calls`` check runs outside it)."""
    return json.dumps([tests.get("setup", ""), tests.get("calls", [])])


def check_sandbox(data: dict[str, list[dict]]) -> None:
    """Fail before generating if the code the tests run in the sandbox imports numpy and the
    sandbox's interpreter lacks it. HumanEval+'s comparisons import numpy too, but run here, in the
    grader's own environment, which has it."""
    needs = {
        b for b, rows in data.items() for r in rows[:50] if "numpy" in _sandboxed_text(r.get("tests") or {})
    }
    if needs and not run_program("import numpy").ok:
        raise DataError(
            f"the tests of {', '.join(sorted(needs))} run code that imports numpy in the sandbox, whose "
            f"interpreter {sandbox_python()} lacks it (as root that is the system Python: apt install python3-numpy)"
        )


def check_disjoint(validation: dict[str, list[dict]], tests: dict[str, list[dict]]) -> None:
    """Refuse a validation set that shares a prompt with a test benchmark: choosing on it would
    choose on the test."""
    for name, rows in validation.items():
        hits = overlap(rows, tests)
        if hits:
            where = "; ".join(f"{b}: {len(ids)} (e.g. {ids[0]})" for b, ids in hits.items())
            raise DataError(f"{name}: validation prompts that are also test prompts ({where}); hold out other rows")


def provenance(spec: dict) -> dict:
    """What a record was made from: its job's spec (``spec_digest``) and, for a trained checkpoint,
    the spec its run was trained with (``trained``), so that a changed config or a retrained run
    shows its records as stale (``scout.freshness``)."""
    out = {"spec_digest": spec_digest(spec)}
    run = Path(spec["run_dir"]) / "train.json" if spec.get("run_dir") else None
    if run is not None and run.exists():
        out["trained"] = spec_digest(json.loads(run.read_text())["spec"])
    return out


def evaluate(spec: dict, out_dir: str | Path, engine: str | None = None, log=print) -> dict[str, dict]:
    import torch

    torch.set_num_threads(spec.get("threads", default("training.threads")))
    engine = engine or spec.get("engine", default("evaluation.engine"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # every benchmark file is checked before the model is loaded
    data = {bench: load_rows(b["path"], b["rows"], bench, log) for bench, b in spec["benchmarks"].items()}
    if spec.get("disjoint_from"):  # a validation set: none of its prompts may be a test prompt
        check_disjoint(data, {b: load_rows(path, name=b, log=log) for b, path in spec["disjoint_from"].items()})
    check_sandbox(data)
    meta = {key: spec[key] for key in META if key in spec} | {"sampling": spec["sampling"], "engine": engine}
    meta |= provenance(spec)
    records = {}
    gen = make_generator(spec["model"], engine, spec.get("chat"), spec.get("engine_options"), spec.get("device", default("evaluation.device")))
    with closing(gen), _grader() as grader:
        if spec.get("domain") == "code":
            log(isolation())
        n_bench = len(spec["benchmarks"])
        for i, (bench, b) in enumerate(spec["benchmarks"].items()):
            rows, k = data[bench], b["repeats"]
            t0 = time.perf_counter()
            log(f"{bench} ({i + 1}/{n_bench}): generating {len(rows)} x {k} samples")
            completions = gen.generate([r["prompt"] for r in rows], k, spec["sampling"], seed=spec["seed"] * 7919 + i)
            samples = [
                {"id": r["id"], "repeat": j, "response": c.text, "finish_reason": c.finish_reason}
                for r, cs in zip(rows, completions, strict=True)
                for j, c in enumerate(cs)
            ]
            write_jsonl(out / f"{bench}.generations.jsonl", samples)
            t1 = time.perf_counter()
            log(
                f"{bench}: generated {len(rows)} x {k} in {t1 - t0:.1f}s ({len(samples) / max(t1 - t0, 1e-9):.0f} samples/s); grading"
            )
            verdicts = grade_samples(grader, rows, samples, k)
            rec = make_record(bench, spec["model"], verdicts, meta | {"truncated": _truncated(samples)})
            _write(out, bench, samples, verdicts, rec)
            records[bench] = rec
            log(f"{bench}: avg@{k} = {rec['mean']:.3f} ± {rec['sem']:.3f} (graded in {time.perf_counter() - t1:.1f}s)")
    if spec.get("run_dir"):  # into the training run this checkpoint comes from
        means = {b: r["mean"] for b, r in records.items()}
        with Tracker(spec["run_dir"], spec) as tracker:
            tracker.log({**means, "avg": sum(means.values()) / len(means)}, spec["step"], prefix="eval/")
    return records


def _write(out: Path, bench: str, samples: list[dict], verdicts: list[list[bool]], rec: dict) -> None:
    flat = [v for row in verdicts for v in row]
    write_jsonl(out / f"{bench}.generations.jsonl", [s | {"correct": c} for s, c in zip(samples, flat, strict=True)])
    tmp = out / f".{bench}.json.tmp"  # the record last: a killed job leaves the old one or none, never half
    tmp.write_text(json.dumps(rec, indent=1))
    tmp.replace(out / f"{bench}.json")


def regrade(data_path: str | Path, generations: str | Path, out_dir: str | Path | None = None, log=print) -> dict:
    """Grade saved generations again (new grader, changed data) and rewrite record and verdicts.

    The generations must cover every row of the data file with the same number of repeats."""
    gen_path = Path(generations)
    if not gen_path.name.endswith(".generations.jsonl"):
        raise DataError(f"{gen_path}: expected a file named BENCHMARK.generations.jsonl")
    bench = gen_path.name.removesuffix(".generations.jsonl")
    rows = load_rows(data_path)
    by_id: dict[str, dict[int, dict]] = defaultdict(dict)
    for n, s in enumerate(read_jsonl(gen_path), 1):
        if not {"id", "repeat", "response"} <= set(s):
            raise DataError(f"{gen_path}:{n}: a sample needs 'id', 'repeat' and 'response'")
        by_id[s["id"]][int(s["repeat"])] = s
    known = {r["id"] for r in rows}
    unknown = sorted(set(by_id) - known)
    if unknown:
        raise DataError(f"{gen_path}: {len(unknown)} sample id(s) not in {data_path}, e.g. {unknown[0]!r}")
    missing = [r["id"] for r in rows if r["id"] not in by_id]
    if missing:
        raise DataError(f"{gen_path}: no samples for {len(missing)} row(s) of {data_path}, e.g. {missing[0]!r}")
    k = max(len(v) for v in by_id.values())
    ragged = [i for i, v in by_id.items() if sorted(v) != list(range(k))]
    if ragged:
        raise DataError(f"{gen_path}: row {ragged[0]!r} has repeats {sorted(by_id[ragged[0]])}, expected 0..{k - 1}")
    samples = [by_id[r["id"]][j] for r in rows for j in range(k)]
    out = Path(out_dir) if out_dir else gen_path.parent
    out.mkdir(parents=True, exist_ok=True)
    old = gen_path.with_name(f"{bench}.json")
    meta = {}
    if old.exists():
        fresh = ("benchmark", "rows", "repeats", "accuracies", "mean", "sem", "truncated")
        meta = {key: v for key, v in json.loads(old.read_text()).items() if key not in fresh}
    t0 = time.perf_counter()
    with _grader() as grader:
        verdicts = grade_samples(grader, rows, samples, k)
    rec = make_record(bench, meta.pop("model", "unknown"), verdicts, meta | {"truncated": _truncated(samples)})
    _write(out, bench, samples, verdicts, rec)  # new verdicts replace the saved ones
    log(
        f"{bench}: regraded {len(samples)} samples in {time.perf_counter() - t0:.1f}s: avg@{k} = {rec['mean']:.3f} ± {rec['sem']:.3f}"
    )
    return rec
