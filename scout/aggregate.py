"""Collect evaluation records into summary tables: one row per run, and per method over seeds.

The per-method table carries the macro-average over benchmarks ("avg", computed within each run
first, as the paper does) and the number of runs each aggregate uses.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scout.behaviour import behaviour_table
from scout.results import read_record, with_shared
from scout.stats import avg_sem

RUN_COLUMNS = ["setting", "variant", "method", "seed", "checkpoint", "benchmark", "mean", "sem", "repeats", "rows"]


def load_records(paths: list[str | Path]) -> pd.DataFrame:
    rows = [{c: rec.get(c) for c in RUN_COLUMNS} for rec in map(read_record, map(Path, paths))]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def per_run(records: pd.DataFrame) -> pd.DataFrame:
    """Benchmark rows plus each run's macro-average over its benchmarks ("avg"), whose ``sem`` is
    its evaluation standard error (``stats.avg_sem``)."""
    keys = ["setting", "variant", "method", "seed", "checkpoint"]
    avg = records.astype({"sem": float}).groupby(keys, as_index=False).agg(mean=("mean", "mean"), sem=("sem", avg_sem))
    avg = avg.assign(benchmark="avg", repeats=pd.NA, rows=pd.NA)
    out = pd.concat([records, avg[RUN_COLUMNS]], ignore_index=True)
    return out.sort_values(keys + ["benchmark"], kind="stable").reset_index(drop=True)


def per_method(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample SD (ddof=1) over runs, with the number of runs used."""
    keys = ["setting", "variant", "method", "checkpoint", "benchmark"]
    g = runs.groupby(keys, as_index=False)
    out = g.agg(mean=("mean", "mean"), sd=("mean", lambda s: s.std(ddof=1)), runs=("seed", "nunique"))
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def generations_of(record: str | Path) -> Path:
    """The generations file beside an evaluation record (``{benchmark}.generations.jsonl``)."""
    return Path(record).with_name(Path(record).name.removesuffix(".json") + ".generations.jsonl")


def summarize(
    record_paths: list[str | Path], out_dir: str | Path, config: dict | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """With ``config``, cells that share another cell's run get its records under their own labels
    (``shared_with`` names the run). Beside runs.csv and methods.csv, behaviour.csv: each run's
    reflection words and accuracy with and without them (``scout.behaviour``), from the final
    evaluations' generations."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = load_records(record_paths)
    behaviour = behaviour_table(records.to_dict("records"), [generations_of(p) for p in record_paths])
    behaviour = behaviour.assign(checkpoint="final")
    if config is not None:
        records = with_shared(config, records.astype({"seed": int}))
        behaviour = with_shared(config, behaviour)
    runs = per_run(records)
    methods = per_method(runs)
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    methods.to_csv(out / "methods.csv", index=False, float_format="%.6g")
    behaviour.to_csv(out / "behaviour.csv", index=False, float_format="%.6g")
    return runs, methods
