"""Collect evaluation records into summary tables: one row per run, and per method over seeds.

The per-method table carries the macro-average over benchmarks ("avg", computed within each run
first, as the paper does) and the number of runs each aggregate uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

RUN_COLUMNS = ["setting", "variant", "method", "seed", "checkpoint", "benchmark", "mean", "sem", "repeats", "rows"]


def load_records(paths: list[str | Path]) -> pd.DataFrame:
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        missing = [k for k in ("setting", "variant", "seed", "checkpoint", "benchmark", "mean", "sem") if k not in rec]
        if missing:
            raise ValueError(f"{p}: not an evaluation record (missing {', '.join(missing)})")
        rows.append({c: rec.get(c) for c in RUN_COLUMNS})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def per_run(records: pd.DataFrame) -> pd.DataFrame:
    """Benchmark rows plus each run's macro-average over its benchmarks ("avg")."""
    keys = ["setting", "variant", "method", "seed", "checkpoint"]
    avg = records.groupby(keys, as_index=False).agg(mean=("mean", "mean"), n=("benchmark", "size"))
    avg = avg.assign(benchmark="avg", sem=float("nan"), repeats=pd.NA, rows=pd.NA).drop(columns="n")
    out = pd.concat([records, avg[RUN_COLUMNS]], ignore_index=True)
    return out.sort_values(keys + ["benchmark"], kind="stable").reset_index(drop=True)


def per_method(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample SD (ddof=1) over runs, with the number of runs used."""
    keys = ["setting", "variant", "method", "checkpoint", "benchmark"]
    g = runs.groupby(keys, as_index=False)
    out = g.agg(mean=("mean", "mean"), sd=("mean", lambda s: s.std(ddof=1)), runs=("seed", "nunique"))
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def summarize(record_paths: list[str | Path], out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = per_run(load_records(record_paths))
    methods = per_method(runs)
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    methods.to_csv(out / "methods.csv", index=False, float_format="%.6g")
    return runs, methods
