"""The results cache: per-run evaluation records, from our own evaluations or imported from a CSV,
and the model the tables and the claims read them through (``Cache``: one ``Row`` per setting and
variant, run by benchmark).

Own records live where the evaluation rules write them (``eval/{setting}/{variant}/s{seed}/{ckpt}/
{benchmark}.json``); imported ones under ``imported/`` in the same layout, outside the DAG, so that
no rule ever overwrites them. When both exist for one run, our own evaluation wins.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from scout import io, jobs, stats
from scout.grid import Cell, Grid
from scout.io import DamagedInput
from scout.methods import METHODS
from scout.paths import Paths

COLUMNS = [
    "setting",
    "variant",
    "method",
    "seed",
    "checkpoint",
    "benchmark",
    "mean",
    "sem",
    "repeats",
    "rows",
    "source",
]
# records that stand for another unit too (a shared run) appear under it with `shared_with` set
IMPORT_COLUMNS = ["setting", "method", "run", "benchmark", "mean", "sem"]
_REQUIRED = ("setting", "variant", "seed", "checkpoint", "benchmark", "mean", "sem")


class ImportRefused(ValueError):
    """A CSV that cannot be imported; the message lists every offending line."""


def _record_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*/s*/*/*.json")) if root.is_dir() else []


def read_record(path: Path) -> dict:
    return io.read_record(path, _REQUIRED, "evaluation record")


def records_frame(paths: list[Path], source: str, damaged: list[DamagedInput] | None = None) -> pd.DataFrame:
    """The records as a frame; with ``damaged`` given, unreadable ones are collected there and left
    out instead of stopping the whole read."""
    rows = []
    for p in paths:
        try:
            rec = read_record(p)
        except DamagedInput as exc:
            if damaged is None:
                raise
            damaged.append(exc)
            continue
        rows.append({**{c: rec.get(c) for c in COLUMNS}, "source": rec.get("source", source)})
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"seed": int, "mean": float, "sem": float}) if len(df) else df


def load(grid: Grid, damaged: list[DamagedInput] | None = None) -> pd.DataFrame:
    """Every cached record of a grid: own evaluations plus imports, one row per run x checkpoint x
    benchmark. Damaged records are left out and, with ``damaged`` given, listed there (else they raise)."""
    root = Path(grid.paths.root)
    own = records_frame(_record_files(root / "eval"), "eval", damaged)
    imported = records_frame(_record_files(root / "imported"), "imported", damaged)
    frames = [f for f in (own, imported) if len(f)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(frames, ignore_index=True)
    keys = ["setting", "variant", "seed", "checkpoint", "benchmark"]
    return with_shared(grid, df.drop_duplicates(keys, keep="first").reset_index(drop=True))


def with_shared(grid: Grid, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus the rows of every reported unit whose records are another run's (a shared run, or
    the shorter run a longer one continues: ``jobs.record_source``), under the unit's own labels;
    ``shared_with`` names the run they come from."""
    if not len(df):
        return df
    df = df.assign(shared_with=df["shared_with"] if "shared_with" in df else None)
    have = set(zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, strict=True))
    methods = {(c.setting, c.variant): c.method for c in grid.cells}
    extra = []
    for unit in jobs.report_units(grid):
        source = jobs.record_source(grid, *unit)
        if source == unit or unit in have:
            continue
        s, v, seed, ck = source
        rows = df[(df.setting == s) & (df.variant == v) & (df.seed == int(seed)) & (df.checkpoint == ck)]
        extra.append(rows.assign(setting=unit[0], variant=unit[1], method=methods[unit[:2]], seed=int(unit[2]),
                                 checkpoint=unit[3], shared_with=f"{s}/{v}/s{seed}/{ck}"))  # fmt: skip
    out = pd.concat([df, *extra], ignore_index=True) if extra else df
    search = {(c.setting, c.variant) for c in grid.search_cells}  # reported as the grid cells they are
    return out[[k not in search for k in zip(out.setting, out.variant, strict=True)]].reset_index(drop=True)


# ------------------------------------------------------------------------------------------------
# Import
# ------------------------------------------------------------------------------------------------


def _number(text: str, name: str) -> float:
    try:
        x = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} {text!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} {text!r} is not a finite number")
    return x


def parse_import(grid: Grid, csv_path: str | Path, scale: str = "fraction") -> list[dict]:
    """Validate a long CSV (setting,method,run,benchmark,mean,sem) into records; refuse it whole.

    ``method`` is a variant id of the grid (``opd``, ``scout-f5``, ``base-student``); ``run`` counts
    the variant's runs from 1 (base rows have one run). ``scale`` says whether accuracies are
    fractions in [0, 1] or percentages in [0, 100]."""
    if scale not in ("fraction", "percent"):
        raise ValueError(f"scale must be 'fraction' or 'percent', not {scale!r}")
    path = Path(csv_path)
    top = 1.0 if scale == "fraction" else 100.0
    runs = grid.seeds
    cell_methods = {(c.setting, c.variant): c.method for c in grid.cells}
    errors: list[str] = []
    records: list[dict] = []
    seen: dict[tuple, int] = {}
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise ImportRefused(f"{path}: cannot read ({exc.strerror})") from exc
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in IMPORT_COLUMNS if c not in header]
        if missing:
            raise ImportRefused(
                f"{path}:1: missing column(s) {', '.join(missing)}; expected header {','.join(IMPORT_COLUMNS)}"
            )
        reader.fieldnames = header
        for row in reader:
            line = reader.line_num
            try:
                rec = _import_row(grid, row, runs, cell_methods, top, scale)
            except ValueError as exc:
                errors.append(f"{path}:{line}: {exc}")
                continue
            key = (rec["setting"], rec["variant"], rec["seed"], rec["benchmark"])
            if key in seen:
                errors.append(f"{path}:{line}: duplicate of line {seen[key]} ({', '.join(map(str, key))})")
                continue
            seen[key] = line
            rec["origin"] = f"{path.name}:{line}"
            records.append(rec)
    if errors:
        shown = errors[:20] + ([f"... and {len(errors) - 20} more"] if len(errors) > 20 else [])
        raise ImportRefused("nothing imported:\n" + "\n".join(shown))
    if not records:
        raise ImportRefused(f"{path}: no data rows")
    return records


def _import_row(grid: Grid, row, runs, cell_methods, top, scale) -> dict:
    setting, variant, bench = (row.get(k, "").strip() for k in ("setting", "method", "benchmark"))
    if setting not in grid.settings:
        raise ValueError(f"unknown setting {setting!r} (known: {', '.join(grid.settings)})")
    if (setting, variant) not in runs:
        known = sorted(v for s, v in runs if s == setting)
        raise ValueError(f"unknown method {variant!r} for setting {setting!r} (known: {', '.join(known)})")
    domain = grid.settings[setting].domain
    if bench not in grid.benchmarks_for(domain):
        raise ValueError(
            f"unknown benchmark {bench!r} for the {domain} setting {setting!r} "
            f"(known: {', '.join(grid.benchmarks_for(domain))})"
        )
    run_text = row.get("run", "").strip()
    if not run_text.isdigit() or int(run_text) < 1:
        raise ValueError(f"run {run_text!r} is not a positive integer")
    seeds = runs[(setting, variant)]
    if int(run_text) > len(seeds):
        raise ValueError(f"run {run_text}: {variant} on {setting} has {len(seeds)} run(s) in the grid")
    mean, sem = _number(row.get("mean"), "mean"), _number(row.get("sem"), "sem")
    if not 0.0 <= mean <= top:
        hint = " (percentages? use --scale percent)" if scale == "fraction" and mean <= 100 else ""
        raise ValueError(f"mean {mean} is outside [0, {top:g}]{hint}")
    if not 0.0 <= sem <= top:
        raise ValueError(f"sem {sem} is outside [0, {top:g}]")
    b = grid.benchmarks[bench]
    return {
        "setting": setting,
        "variant": variant,
        "method": cell_methods.get((setting, variant), variant),
        "seed": seeds[int(run_text) - 1],
        "checkpoint": "final",
        "benchmark": bench,
        "mean": mean / top,
        "sem": sem / top,
        "repeats": b.repeats,
        "rows": b.rows,
        "source": "imported",
    }


def _record_path(root: Path, rec: dict) -> Path:
    return root / rec["setting"] / rec["variant"] / f"s{rec['seed']}" / rec["checkpoint"] / f"{rec['benchmark']}.json"


def write_imported(at: Paths, records: list[dict], replace: bool = False) -> list[Path]:
    """Write all records or none: staged in a temp dir, then moved into place, rolled back on error."""
    root = at.imported_dir()
    targets = [_record_path(root, r) for r in records]
    existing = [t for t in targets if t.exists()]
    if existing and not replace:
        raise ImportRefused(
            f"nothing imported: {len(existing)} record(s) were imported before, e.g. {existing[0]}; "
            "pass --replace to overwrite them"
        )
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    backups: list[tuple[Path, Path]] = []
    created: list[Path] = []
    try:
        for i, rec in enumerate(records):
            (stage / f"{i}.json").write_text(json.dumps(rec, indent=1))
        for i, target in enumerate(targets):
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                backup = stage / f"{i}.bak"
                os.replace(target, backup)
                backups.append((backup, target))
            os.replace(stage / f"{i}.json", target)
            created.append(target)
    except BaseException:
        for t in created:
            t.unlink(missing_ok=True)
        for backup, target in backups:
            os.replace(backup, target)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return targets


# ------------------------------------------------------------------------------------------------
# The results model: each row (setting x variant) of final checkpoints, for the tables and claims
# ------------------------------------------------------------------------------------------------

AVG = "avg"  # a run's macro-average over its benchmarks


@dataclass
class Row:
    """Run-level means ``y`` and SEMs ``e`` (seeds x benchmarks, NaN = missing) of one variant."""

    setting: str
    variant: str
    seeds: list[int]
    y: pd.DataFrame
    e: pd.DataFrame
    repeats: dict[str, int]

    @cached_property
    def run_avg(self) -> pd.Series:
        """Macro-average within each run; a run missing any benchmark has no average."""
        return self.y.mean(axis=1, skipna=False)

    def agg(self, col: str) -> stats.Aggregate:
        return stats.aggregate(list(self.run_avg if col == AVG else self.y[col]))

    def pm(self, col: str) -> float:
        """Cross-run SD, or for a single run the SD over evaluation repeats (benchmarks only)."""
        a = self.agg(col)
        if a.n >= 2:
            return a.sd
        if a.n == 1 and col != AVG:
            e = self.e[col].dropna()
            return float(e.iloc[0]) * math.sqrt(self.repeats[col]) if len(e) else math.nan
        return math.nan

    def pair(self, col: str) -> tuple[list[float], list[float]]:
        if col == AVG:
            v = self.run_avg.dropna()
            return list(v), [math.nan] * len(v)
        ok = self.y[col].notna()
        return list(self.y[col][ok]), list(self.e[col][ok])  # an unknown error stays unknown (NaN)


@dataclass
class Cache:
    """The records of final checkpoints, indexed for table building."""

    grid: Grid
    df: pd.DataFrame
    test: str = "welch"
    alpha: float = 0.1
    baseline: str = "opd"
    _rows: dict = field(default_factory=dict)

    @cached_property
    def final(self) -> pd.DataFrame:
        d = self.df[self.df.checkpoint == "final"] if len(self.df) else self.df
        return d.set_index(["setting", "variant", "seed", "benchmark"]).sort_index() if len(d) else d

    @property
    def seeds(self) -> dict[tuple[str, str], list[int]]:
        return self.grid.seeds

    @property
    def cell_list(self) -> list[Cell]:
        return self.grid.cells

    @property
    def cells(self) -> dict[str, Cell]:
        """The first cell of each variant: a variant's method and overrides are the same everywhere."""
        return self.grid.variants

    def method_of(self, variant: str) -> str:
        cell = self.cells.get(variant)
        return cell.method if cell else variant

    def opd_based(self, variant: str) -> bool:
        cell = self.cells.get(variant)
        return cell is not None and METHODS[cell.method].opd_based

    def f_of(self, setting: str, variant: str) -> int:
        """The teacher update interval a SCOUT-family variant's runs on a setting train with: read
        from the cell's spec, so a setting's own ``overrides.scout.interval`` counts."""
        cell = next(c for c in self.cell_list if (c.setting, c.variant) == (setting, variant))
        return self.grid.method_settings(cell)["scout"].interval

    def interval_variants(self, setting: str) -> list[tuple[int, str]]:
        """(f, variant) of the plain SCOUT variants on a setting (the f-sweep and the main SCOUT),
        sorted by f."""
        out = []
        for s, v in self.seeds:
            cell = self.cells.get(v)
            if (
                s == setting
                and cell
                and cell.method == "scout"
                and not {k for k, _ in cell.overrides} - {"interval", "teacher_lr"}
            ):
                out.append((self.f_of(s, v), v))
        return sorted(out)

    def label(self, variant: str) -> str:
        """Display name: the method's label plus the variant's overrides (f, epochs)."""
        cell = self.cells.get(variant)
        if cell is None:
            return variant
        over = dict(cell.overrides)
        extras = [f"f={over['interval']}"] if "interval" in over else []
        extras += [f"{over['epochs']} ep."] if "epochs" in over else []
        label = METHODS[cell.method].label
        return f"{label} ({', '.join(extras)})" if extras else label

    def benchmarks(self, setting: str) -> list[str]:
        return self.grid.benchmarks_for(self.grid.settings[setting].domain)

    def row(self, setting: str, variant: str) -> Row:
        key = (setting, variant)
        if key not in self._rows:
            seeds = self.seeds.get(key, [])
            benches = self.benchmarks(setting)
            y = pd.DataFrame(np.nan, index=seeds, columns=benches)
            e = y.copy()
            for s in seeds:
                for b in benches:
                    k = (setting, variant, s, b)
                    if len(self.final) and k in self.final.index:
                        rec = self.final.loc[k]
                        y.loc[s, b], e.loc[s, b] = float(rec["mean"]), float(rec["sem"])
            reps = {b: self.grid.benchmarks[b].repeats for b in benches}
            self._rows[key] = Row(setting, variant, seeds, y, e, reps)
        return self._rows[key]

    def p(self, setting: str, variant: str, col: str) -> float:
        """One-sided p of variant > baseline: the configured test per benchmark, Welch for Avg."""
        m, b = self.row(setting, variant), self.row(setting, self.baseline)
        (y, e), (y0, e0) = m.pair(col), b.pair(col)
        return stats.welch_test(y, y0).p if col == AVG else stats.p_value(self.test, y, e, y0, e0)

    @cached_property
    def shared(self) -> dict[tuple[str, str], tuple[str, str]]:
        return jobs.shared_runs(self.grid)

    def shared_note(self, setting: str, variant: str) -> str:
        """Say so when a row reports another cell's runs (the same training spec, trained once)."""
        source = self.shared.get((setting, variant))
        if source is None:
            return ""
        other = (
            source[0]
            if source[1] == variant
            else self.label(source[1]) + ("" if source[0] == setting else f", {source[0]}")
        )
        return f"(the runs of {other})"

    def has_variant(self, setting: str, variant: str) -> bool:
        return (setting, variant) in self.seeds

    def evaluation_se(self, settings: list[str]) -> list[float]:
        """Each final run's evaluation standard error of its Avg on these settings (points,
        ``stats.avg_sem``; questions held fixed)."""
        if not len(self.final):
            return []
        d = self.final.reset_index()
        d = d[d.setting.isin(settings)].astype({"sem": float})
        se = d.groupby(["setting", "variant", "seed"])["sem"].agg(stats.avg_sem).dropna() * 100
        return sorted(se.tolist())

    def evaluation_note(self, settings: list[str]) -> str:
        """The caption's sentence on how precise each run's evaluation is."""
        se = self.evaluation_se(settings)
        if not se:
            return ""
        return (f" Evaluation standard error of each run's Avg (questions fixed, over repeats): at most {se[-1]:.2f} "
                f"points, median {float(np.median(se)):.2f} ({len(se)} runs).")  # fmt: skip

    def experiment_variants(self, exp: str, setting: str) -> list[str]:
        """Variants an experiment runs on a setting, in config order."""
        cells = self.cell_list
        return list(dict.fromkeys(c.variant for c in cells if exp in c.experiments and c.setting == setting))
