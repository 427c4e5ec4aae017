"""Results written to order: evaluation records of a whole grid, the teacher probes' CSVs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

from scout import behaviour, jobs
from scout.grid import Grid
from scout.paths import Paths
from tests.support.toy import toy_config


def toy(tmp_path: Path) -> dict:
    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    return cfg


def fake_records(cfg: dict, skip=lambda unit: False, seed: int = 0) -> int:
    """An evaluation record for every unit of the grid (SCOUT a little better than the rest)."""
    rng = random.Random(seed)
    n = 0
    for unit in jobs.eval_units(Grid.of(cfg)):
        if skip(unit):
            continue
        setting, variant, s, ckpt = unit
        out = Path(Paths.of(cfg).eval_dir(*unit))
        out.mkdir(parents=True, exist_ok=True)
        for b in Grid.of(cfg).benchmarks_for(cfg["settings"][setting]["domain"]):
            mean = min(1.0, max(0.0, rng.gauss(0.55 if "scout" in variant else 0.5, 0.04)))
            rec = {"setting": setting, "variant": variant, "method": variant, "seed": int(s), "checkpoint": ckpt}
            rec |= {"benchmark": b, "mean": mean, "sem": 0.01, "repeats": cfg["benchmarks"][b]["repeats"]}
            (out / f"{b}.json").write_text(json.dumps(rec))
            n += 1
    return n


def write_analysis(cfg: dict) -> None:
    d = Path(cfg["results"]) / "analysis"
    d.mkdir(parents=True, exist_ok=True)
    rows = [
        ("toy-l-s-math", t, seed, prefixes, r, a, 20 * r)
        for t, seed, off in (("initial", 0, 0), ("scout", 1, 0.03), ("scout", 2, 0.05))
        for prefixes in ("initial-student", "final-student", "own")
        for r, a in ((0.25, 0.24 + off), (0.5, 0.14), (0.75, 0.09))
        if not (t == "scout" and prefixes == "own")
    ]
    columns = ["setting", "teacher", "seed", "prefixes", "prefix_ratio", "accuracy", "prefix_tokens"]
    pd.DataFrame(rows, columns=columns).to_csv(d / "continuation.csv", index=False)
    ent = [
        ("toy-l-s-math", t, c, p, 2.0 - p / 64 + (0.4 if c == "student" else 0))
        for t in ("initial", "scout")
        for c in ("own", "student")
        for p in range(0, 64, 8)
    ]
    pd.DataFrame(ent, columns=["setting", "teacher", "context", "position", "entropy"]).to_csv(
        d / "entropy.csv", index=False
    )
    reflect = [("toy-l-s-math", t, seed, f"q{q}", 0, 0, after, "step", p + (0.1 if after == "wrong" else 0))
               for t, seed, p in (("initial", 0, 0.2), ("scout", 1, 0.3), ("scout", 2, 0.35), ("control", 1, 0.1))
               for q in range(4) for after in ("right", "wrong")]  # fmt: skip
    pd.DataFrame(reflect, columns=behaviour.REFLECTION_COLUMNS).to_csv(d / "reflection.csv", index=False)
    gens = [{"id": f"q{q}", "repeat": r, "response": ("Wait, " if (q + r) % 3 == 0 else "") + "2+2=4",
             "correct": (q + r) % 2 == 0} for q in range(4) for r in range(2)]  # fmt: skip
    for v, seeds in (("base-student", (0,)), ("opd", (1, 2)), ("scout", (1, 2))):  # the summary's behaviour.csv
        for seed in seeds:
            out = Path(Paths.of(cfg).eval_dir("toy-l-s-math", v, seed, "final"))
            out.mkdir(parents=True, exist_ok=True)
            (out / "tm-easy.generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    for variant in ("scout", "opd"):
        for seed in (1, 2):  # the training logs as the trainer writes them (SCOUT's with its teacher phase)
            run = Path(Paths.of(cfg).train_dir("toy-l-s-math", variant, seed))
            run.mkdir(parents=True, exist_ok=True)
            lines = [{"step": st, "loss": 0.1, "reverse_kl_k1": 1 / st} | ({"reward": st / 100} if st % 8 == 0 else {})
                     | ({"teacher_reward": 0.4 + st / 100, "teacher_prefix_ratio": st / 60}
                        if st % 10 == 0 and variant == "scout" else {}) for st in range(1, 61)]  # fmt: skip
            (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
