"""The report's records as summary tables: one row per run and benchmark, and per method over seeds.

The report writes them (``results/summary/``) from the same records it renders, so there is one
read of the results cache and the CSVs say what the tables say. The per-method table carries the
macro-average over benchmarks ("avg", computed within each run first, as the paper does) and the
number of runs each aggregate uses; ``behaviour.csv`` each run's reflection words and accuracy with
and without them (``scout.behaviour``), from the final evaluations' generations.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from scout.behaviour import behaviour_table
from scout.paths import Paths
from scout.stats import avg_sem

RUN_COLUMNS = ["setting", "variant", "method", "seed", "checkpoint", "benchmark", "mean", "sem", "repeats", "rows"]
# where the records come from: own evaluations or imported, and the run a shared unit reports
SOURCE_COLUMNS = ["source", "shared_with"]


def per_run(records: pd.DataFrame, benchmarks: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Benchmark rows plus each run's macro-average over its benchmarks ("avg"), whose ``sem`` is
    its evaluation standard error (``stats.avg_sem``). A run missing a benchmark of its setting
    (``benchmarks``: how many the grid evaluates a setting on; else as many as other runs of its
    setting have at that checkpoint) has no average, as in the tables."""
    keys = ["setting", "variant", "method", "seed", "checkpoint"]
    avg = records.astype({"sem": float}).groupby(keys, as_index=False).agg(
        mean=("mean", "mean"), sem=("sem", avg_sem), has=("benchmark", "nunique")
    )
    wanted = records.groupby(["setting", "checkpoint"]).benchmark.nunique().rename("wanted")
    avg = avg.join(wanted, on=["setting", "checkpoint"])
    if benchmarks is not None:
        avg["wanted"] = avg.setting.map(benchmarks).fillna(avg.wanted)
    avg.loc[avg.has < avg.wanted, ["mean", "sem"]] = float("nan")
    avg = avg.assign(benchmark="avg", repeats=pd.NA, rows=pd.NA)
    out = pd.concat([records, avg[RUN_COLUMNS]], ignore_index=True)
    return out.sort_values(keys + ["benchmark"], kind="stable").reset_index(drop=True)


def per_method(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample SD (ddof=1) over runs, with the number of runs used (a run without an
    average is not among them)."""
    keys = ["setting", "variant", "method", "checkpoint", "benchmark"]
    g = runs.groupby(keys, as_index=False)
    out = g.agg(mean=("mean", "mean"), sd=("mean", lambda s: s.std(ddof=1)), runs=("mean", "count"))
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def generations_of(at: Paths, record: dict) -> Path | None:
    """The generations file of a record's evaluation (``{benchmark}.generations.jsonl``): that of the
    run it shares where it is another run's; None for an imported record (it has none)."""
    if record.get("source") == "imported":
        return None
    unit = (record["setting"], record["variant"], record["seed"], record["checkpoint"])
    if isinstance(record.get("shared_with"), str):
        setting, variant, seed, ckpt = record["shared_with"].split("/")
        unit = (setting, variant, seed.removeprefix("s"), ckpt)
    return Path(at.eval_dir(*unit)) / f"{record['benchmark']}.generations.jsonl"


def summarize(at: Paths, records: pd.DataFrame, out_dir: str | Path,
              benchmarks: Mapping[str, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """Write runs.csv, methods.csv and behaviour.csv for ``records`` (``results.load``'s frame, the
    units the report shows) into ``out_dir``; returns the per-run and per-method tables.
    ``benchmarks``: as :func:`per_run`'s."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns = RUN_COLUMNS + [c for c in SOURCE_COLUMNS if c in records]
    records = records.reindex(columns=columns)
    rows = records.to_dict("records")
    gens = [generations_of(at, r) for r in rows]
    kept = [(r, g) for r, g in zip(rows, gens, strict=True) if g is not None]
    behaviour = behaviour_table([r for r, _ in kept], [g for _, g in kept]).assign(checkpoint="final")
    runs = per_run(records, benchmarks)
    methods = per_method(runs)
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    methods.to_csv(out / "methods.csv", index=False, float_format="%.6g")
    behaviour.to_csv(out / "behaviour.csv", index=False, float_format="%.6g")
    return runs, methods
