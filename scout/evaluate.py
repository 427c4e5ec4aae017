"""Evaluate one checkpoint on every benchmark of its domain: avg@k records plus raw generations.

Record (one per checkpoint x benchmark): the k repeat-level accuracies, their mean and the SEM over
repeats, with the generations and verdicts beside it so a record can be regraded without
regenerating.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from scout.algorithms import sem
from scout.generation import make_generator
from scout.grading import Grader
from scout.io import read_jsonl, write_jsonl


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


def evaluate(spec: dict, out_dir: str | Path, engine: str = "transformers", log=print) -> dict[str, dict]:
    torch.set_num_threads(spec.get("threads", 1))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = make_generator(spec["model"], engine)
    records = {}
    with Grader() as grader:
        for i, (bench, b) in enumerate(spec["benchmarks"].items()):
            t0 = time.perf_counter()
            rows = read_jsonl(b["path"])
            if len(rows) != b["rows"]:
                raise ValueError(f"{b['path']}: benchmark {bench} has {len(rows)} rows, expected {b['rows']}")
            k = b["repeats"]
            texts = gen.generate([r["prompt"] for r in rows], k, spec["sampling"], seed=spec["seed"] * 7919 + i)
            flat_rows = [r for r in rows for _ in range(k)]
            flat = grader.grade([t for ts in texts for t in ts], flat_rows)
            verdicts = [flat[j * k : (j + 1) * k] for j in range(len(rows))]
            meta = {k: spec[k] for k in ("setting", "variant", "method", "seed", "checkpoint") if k in spec}
            rec = make_record(bench, spec["model"], verdicts, {**meta, "sampling": spec["sampling"]})
            write_jsonl(
                out / f"{bench}.generations.jsonl",
                [
                    {"id": r["id"], "repeat": j, "response": texts[n][j], "correct": verdicts[n][j]}
                    for n, r in enumerate(rows)
                    for j in range(k)
                ],
            )
            (out / f"{bench}.json").write_text(json.dumps(rec, indent=1))
            records[bench] = rec
            log(f"{bench}: avg@{k} = {rec['mean']:.3f} ± {rec['sem']:.3f} ({time.perf_counter() - t0:.1f}s)")
    return records
