"""The results cache: per-run evaluation records, from our own evaluations or imported from a CSV.

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
from pathlib import Path

import pandas as pd

from scout import grid
from scout.io import DamagedInput

COLUMNS = ["setting", "variant", "method", "seed", "checkpoint", "benchmark", "mean", "sem", "repeats", "source"]
# records that stand for another unit too (a shared run) appear under it with `shared_with` set
IMPORT_COLUMNS = ["setting", "method", "run", "benchmark", "mean", "sem"]
_REQUIRED = ("setting", "variant", "seed", "checkpoint", "benchmark", "mean", "sem")


class ImportRefused(ValueError):
    """A CSV that cannot be imported; the message lists every offending line."""


def results_dir(config: dict) -> Path:
    return Path(config.get("results", "results"))


def _record_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*/s*/*/*.json")) if root.is_dir() else []


def read_record(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedInput(path, f"unreadable evaluation record ({exc})") from exc
    missing = [k for k in _REQUIRED if k not in rec] if isinstance(rec, dict) else list(_REQUIRED)
    if missing:
        raise DamagedInput(path, f"not an evaluation record (missing {', '.join(missing)})")
    return rec


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


def load(config: dict, damaged: list[DamagedInput] | None = None) -> pd.DataFrame:
    """Every cached record: own evaluations plus imports, one row per run x checkpoint x benchmark.
    Damaged records are left out and, with ``damaged`` given, listed there (else they raise)."""
    root = results_dir(config)
    own = records_frame(_record_files(root / "eval"), "eval", damaged)
    imported = records_frame(_record_files(root / "imported"), "imported", damaged)
    frames = [f for f in (own, imported) if len(f)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(frames, ignore_index=True)
    keys = ["setting", "variant", "seed", "checkpoint", "benchmark"]
    return with_shared(config, df.drop_duplicates(keys, keep="first").reset_index(drop=True))


def with_shared(config: dict, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus the rows of every reported unit whose records are another run's (a shared run, or
    the shorter run a longer one continues: ``grid.record_source``), under the unit's own labels;
    ``shared_with`` names the run they come from."""
    if not len(df):
        return df
    df = df.assign(shared_with=df["shared_with"] if "shared_with" in df else None)
    have = set(zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, strict=True))
    methods = {(c.setting, c.variant): c.method for c in grid.cells(config)}
    extra = []
    for unit in grid.report_units(config):
        source = grid.record_source(config, *unit)
        if source == unit or unit in have:
            continue
        s, v, seed, ck = source
        rows = df[(df.setting == s) & (df.variant == v) & (df.seed == int(seed)) & (df.checkpoint == ck)]
        extra.append(rows.assign(setting=unit[0], variant=unit[1], method=methods[unit[:2]], seed=int(unit[2]),
                                 checkpoint=unit[3], shared_with=f"{s}/{v}/s{seed}/{ck}"))  # fmt: skip
    out = pd.concat([df, *extra], ignore_index=True) if extra else df
    search = {(c.setting, c.variant) for c in grid.search_cells(config)}  # reported as the grid cells they are
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


def parse_import(config: dict, csv_path: str | Path, scale: str = "fraction") -> list[dict]:
    """Validate a long CSV (setting,method,run,benchmark,mean,sem) into records; refuse it whole.

    ``method`` is a variant id of the grid (``opd``, ``scout-f5``, ``base-student``); ``run`` counts
    the variant's runs from 1 (base rows have one run). ``scale`` says whether accuracies are
    fractions in [0, 1] or percentages in [0, 100]."""
    if scale not in ("fraction", "percent"):
        raise ValueError(f"scale must be 'fraction' or 'percent', not {scale!r}")
    path = Path(csv_path)
    top = 1.0 if scale == "fraction" else 100.0
    runs = grid.variant_seeds(config)
    cell_methods = {(c.setting, c.variant): c.method for c in grid.cells(config)}
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
                rec = _import_row(config, row, runs, cell_methods, top, scale)
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


def _import_row(config, row, runs, cell_methods, top, scale) -> dict:
    setting, variant, bench = (row.get(k, "").strip() for k in ("setting", "method", "benchmark"))
    if setting not in config["settings"]:
        raise ValueError(f"unknown setting {setting!r} (known: {', '.join(config['settings'])})")
    if (setting, variant) not in runs:
        known = sorted(v for s, v in runs if s == setting)
        raise ValueError(f"unknown method {variant!r} for setting {setting!r} (known: {', '.join(known)})")
    domain = config["settings"][setting]["domain"]
    if bench not in grid.benchmarks_for(config, domain):
        raise ValueError(
            f"unknown benchmark {bench!r} for the {domain} setting {setting!r} "
            f"(known: {', '.join(grid.benchmarks_for(config, domain))})"
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
    b = config["benchmarks"][bench]
    return {
        "setting": setting,
        "variant": variant,
        "method": cell_methods.get((setting, variant), variant),
        "seed": seeds[int(run_text) - 1],
        "checkpoint": "final",
        "benchmark": bench,
        "mean": mean / top,
        "sem": sem / top,
        "repeats": b["repeats"],
        "rows": b["rows"],
        "source": "imported",
    }


def _record_path(root: Path, rec: dict) -> Path:
    return root / rec["setting"] / rec["variant"] / f"s{rec['seed']}" / rec["checkpoint"] / f"{rec['benchmark']}.json"


def write_imported(config: dict, records: list[dict], replace: bool = False) -> list[Path]:
    """Write all records or none: staged in a temp dir, then moved into place, rolled back on error."""
    root = results_dir(config) / "imported"
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
