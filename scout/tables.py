"""Cached records -> the paper's tables, as one model that ``scout.render`` writes as LaTeX and HTML.

Which tables exist follows the config's experiments, so the paper grid and the toy grid go through
the same code: one main table per teacher->student pair of ``experiments.main`` (its settings side by
side), one per-run table per main setting, per-domain tables for the prefix-0 control and OPTR, their
summaries, the f-sweep table, and the hyperparameter, learning-rate and benchmark tables.

Numbers are accuracies in percent. The ``±`` term is the cross-run SD for aggregates of two or more
runs, the SEM over repeats for a single run in the per-run tables, and the SD over repeats for
single-run rows in the summary tables (as the paper prints its base models). A missing value is
``--``; an aggregate over fewer runs than the grid has says how many it used. Tables hold plain
text and ``render.Entry`` values, never markup: bold, underline, ± and shading are the renderers'.
"""

from __future__ import annotations

import math

from scout import grid, stats
from scout import render as renderers
from scout.config_tables import DOMAIN_TITLES, benchmark_table, hyper_table, lr_table, spans
from scout.grid import Grid
from scout.methods import METHODS
from scout.render import Entry, label, num, ok, p_entry
from scout.results import AVG, Cache, Row

# ------------------------------------------------------------------------------------------------
# Formatting
# ------------------------------------------------------------------------------------------------


_ok = ok


def value(mean: float | None, pm: float | None = None, decimals: int = 1, style: str = "") -> Entry:
    """One table entry: ``mean`` with a small ``±pm`` term, bold for best, underlined for second."""
    return num(mean, pm, decimals, style)


def _runs_used(row: Row) -> tuple[int, int]:
    """(runs with any result, runs in the grid)."""
    return max(row.agg(c).n for c in [*row.y.columns, AVG]), len(row.seeds)


def ranked_means(cache: Cache, setting: str, variants: list[str], col: str) -> dict[str, float]:
    """Means (%) that compete for best and second best: only aggregates over every run the grid
    has (a mean of 1 of 3 runs is not comparable, and its row says how many it used)."""
    out = {}
    for v in variants:
        if cache.has_variant(setting, v):
            row = cache.row(setting, v)
            a = row.agg(col)
            if a.n == len(row.seeds):
                out[v] = a.mean * 100
    return out


def _runs_note(row: Row) -> str:
    """Say so when an aggregate uses fewer runs than the grid has (and more than none)."""
    n, m = _runs_used(row)
    return f"({n}/{m} runs)" if 0 < n < m else ""


# ------------------------------------------------------------------------------------------------
# Table models (dicts the templates lay out)
# ------------------------------------------------------------------------------------------------


def _columns(g: Grid, benches: list[str], avg_label: Entry = label("Mean", bold=True)) -> list[dict]:
    cols = [{"key": b, "label": g.benchmarks[b].heading, "sub": f"Avg@{g.benchmarks[b].repeats}"} for b in benches]
    return cols + [{"key": AVG, "label": avg_label, "sub": ""}]


def _summary_cells(cache: Cache, setting: str, variants: list[str], decimals: int, rank: list[str]) -> dict:
    """{variant: [entry per column]} with best/second among ``rank`` per column."""
    cols = cache.benchmarks(setting) + [AVG]
    out = {v: [] for v in variants}
    for col in cols:
        means = {v: cache.row(setting, v).agg(col).mean * 100 for v in variants}
        best, second = stats.best_two(ranked_means(cache, setting, rank, col), decimals)
        for v in variants:
            style = "best" if v in best else "second" if v in second else ""
            row = cache.row(setting, v)
            out[v].append(value(means[v], row.pm(col) * 100, decimals, style))
    return out


def _row_colour(cache: Cache, variant: str) -> str | None:
    if variant == cache.baseline:
        return "summarygray"
    if variant == "scout":
        return "scoutsummary"
    return None


def _groups(cache: Cache, variants: list[str]) -> list[list[str]]:
    """Row groups separated by rules: base rows | non-distillation | OPD-based | SCOUT."""
    bases = [v for v in variants if v in grid.BASE_VARIANTS]
    refs = [v for v in variants if v not in grid.BASE_VARIANTS and not cache.opd_based(v)]
    ours = [v for v in variants if cache.method_of(v) == "scout"]
    opd = [v for v in variants if v not in bases + refs + ours]
    return [g for g in (bases, refs, opd, ours) if g]


def _row_name(cache: Cache, setting: str, variant: str, note: str = "") -> Entry:
    s = cache.grid.settings[setting]
    if variant == "base-student":
        return label(s.student, note=note)
    if variant == "base-teacher":
        return label(s.teacher, note=note)
    notes = " ".join(n for n in (note, cache.shared_note(setting, variant)) if n)
    return label(cache.label(variant), bold=cache.method_of(variant) == "scout", note=notes)


def _main_row_name(cache: Cache, settings: list[str], variant: str) -> Entry:
    """Row name, noting per domain when an aggregate uses fewer runs than the grid has."""
    short = []
    for s in settings:
        if cache.has_variant(s, variant):
            n, m = _runs_used(cache.row(s, variant))
            if 0 < n < m:
                domain = cache.grid.settings[s].domain
                short.append(f"{domain}: {n}/{m}" if len(settings) > 1 else f"{n}/{m}")
    return _row_name(cache, settings[0], variant, f"({', '.join(short)} runs)" if short else "")


def main_tables(cache: Cache) -> list[dict]:
    """One table per teacher->student pair of the main experiment, its domains side by side."""
    g = cache.grid
    exp = g.experiments.get("main")
    if not exp:
        return []
    pairs: dict[tuple[str, str], list[str]] = {}
    for s in exp.settings:
        pairs.setdefault((g.settings[s].teacher, g.settings[s].student), []).append(s)
    out = []
    for (teacher, student), settings in pairs.items():
        variants = ["base-student", "base-teacher"] + cache.experiment_variants("main", settings[0])
        blocks, rows = [], {v: [] for v in variants}
        for s in settings:
            vs = ["base-student", "base-teacher"] + cache.experiment_variants("main", s)
            rank = [v for v in vs if cache.opd_based(v)]
            cells = _summary_cells(cache, s, vs, 1, rank)
            cols = _columns(g, cache.benchmarks(s))
            blocks.append({"title": DOMAIN_TITLES.get(g.settings[s].domain, s), "columns": cols})
            for v in variants:
                if v in cells:
                    rows[v] += cells[v]
                else:  # variant not run in this setting (e.g. skipped on code)
                    rows[v] += [value(None)] * len(cols)
        groups = [
            [{"name": _main_row_name(cache, settings, v), "colour": _row_colour(cache, v), "cells": rows[v]} for v in g]
            for g in _groups(cache, variants)
        ]
        domains = ", ".join(g.settings[s].domain for s in settings)
        out.append(
            {
                "name": f"main_{settings[0]}",
                "template": "main",
                "label": f"tab:main-{settings[0]}",
                "caption": f"Main results for {teacher} → {student} ({domains}): mean "
                "± SD over training runs (base models: SD over evaluation repeats). Bold and underlined: "
                "best and second best among OPD-based methods." + cache.evaluation_note(settings),
                "blocks": blocks,
                "groups": groups,
            }
        )
    return out


def _per_run_block(cache: Cache, setting: str, variant: str, rank: list[str], show_p: bool) -> dict:
    row = cache.row(setting, variant)
    cols = cache.benchmarks(setting) + [AVG]
    runs = []
    for i, seed in enumerate(row.seeds, start=1):
        cells = [value(row.y.loc[seed, b] * 100, row.e.loc[seed, b] * 100, 2) for b in cols[:-1]]
        avg = row.run_avg.loc[seed]
        runs.append({"label": label(f"Run {i}"), "cells": cells + [value(avg * 100, None, 2)], "colour": None})
    mean_cells = []
    for col in cols:
        best, second = stats.best_two(ranked_means(cache, setting, rank, col), 2)
        style = "best" if variant in best else "second" if variant in second else ""
        a = row.agg(col)
        mean_cells.append(value(a.mean * 100, a.sd * 100 if a.n >= 2 else None, 2, style))
    colour = "scoutsummary" if cache.method_of(variant) == "scout" else "summarygray"
    mean_label = label("Mean", note=_runs_note(row))
    rows = runs + [{"label": mean_label, "cells": mean_cells, "colour": colour}]
    if show_p:
        base = cache.row(setting, cache.baseline)
        p_cells = []
        for col in cols:
            p = cache.p(setting, variant, col)
            hl = stats.significant(p, row.agg(col).mean, base.agg(col).mean, cache.alpha)
            p_cells.append(p_entry(p, hl))
        rows.append({"label": label(f"p vs. {cache.label(cache.baseline)}"), "cells": p_cells, "colour": None})
    return {"name": _row_name(cache, setting, variant), "nruns": len(runs), "rows": rows}


def per_run_table(cache: Cache, name: str, caption: str, sections: list[tuple[str, list[str]]]) -> dict:
    """Per-run appendix table: blocks of Run rows (± SEM), a Mean row (± SD) and a p row per variant."""
    g = cache.grid
    setting0 = sections[0][0]
    out_sections = []
    for setting, variants in sections:
        rank = [v for v in variants if cache.opd_based(v)]
        blocks = [
            _per_run_block(
                cache,
                setting,
                v,
                rank,
                show_p=v in rank and v != cache.baseline and cache.has_variant(setting, cache.baseline),
            )
            for v in variants
        ]
        s = g.settings[setting]
        title = f"{s.teacher} → {s.student} ({s.domain})" if len(sections) > 1 else None
        out_sections.append({"title": title, "blocks": blocks})
    return {
        "name": name,
        "template": "per_run",
        "label": f"tab:{name}",
        "caption": caption,
        "columns": _columns(g, cache.benchmarks(setting0), label("Avg", bold=True)),
        "sections": out_sections,
    }


def per_run_tables(cache: Cache) -> list[dict]:
    g = cache.grid
    test = "Welch's t-test" if cache.test == "welch" else "the random-effects z-test"
    note = (
        f"Runs: mean ± SEM over evaluation repeats; Mean: ± SD over runs. p: one-sided, per benchmark "
        f"by {test}, Avg by Welch's t-test on run-level macro-averages; shaded: p < {cache.alpha:g} with a higher mean."
    )
    out = []
    for s in g.experiments["main"].settings if "main" in g.experiments else ():
        sc = g.settings[s]
        out.append(
            per_run_table(
                cache,
                f"per_run_{s}",
                f"Complete results for {sc.teacher} → {sc.student} ({sc.domain}). {note}"
                + cache.evaluation_note([s]),
                [(s, cache.experiment_variants("main", s))],
            )
        )
    for exp, title, refs in (
        ("prefix0", "Prefix-0 control (OPD + Teacher GRPO: teacher rollouts start from the problem)", ["opd"]),
        ("optr", "OPTR and OPTR + SCOUT", ["opd"]),
    ):
        if exp not in g.experiments:
            continue
        by_domain: dict[str, list[str]] = {}
        for s in g.experiments[exp].settings:
            by_domain.setdefault(g.settings[s].domain, []).append(s)
        for domain, settings in by_domain.items():
            sections = []
            for s in settings:
                own = cache.experiment_variants(exp, s)
                # reference rows from the main grid: prefix-0 sits between OPD and SCOUT; OPTR follows both
                extra = [v for v in refs + ["scout"] if cache.has_variant(s, v) and v not in own]
                sections.append((s, extra[:1] + own + extra[1:] if exp == "prefix0" else extra + own))
            caption = f"{title}, {domain}. {note}" + cache.evaluation_note(settings)
            out.append(per_run_table(cache, f"per_run_{exp}_{domain}", caption, sections))
    return out


def prefix0_summary(cache: Cache) -> dict | None:
    g = cache.grid
    exp = g.experiments.get("prefix0")
    if not exp:
        return None
    settings = exp.settings
    variants = ["opd", *cache.experiment_variants("prefix0", settings[0]), "scout"]
    cols, cells = [], {v: [] for v in variants}
    for s in settings:
        sc = g.settings[s]
        cols.append({"group": sc.teacher, "label": sc.domain.capitalize()})
        means = {v: cache.row(s, v).agg(AVG).mean * 100 for v in variants if cache.has_variant(s, v)}
        best, second = stats.best_two(ranked_means(cache, s, variants, AVG), 1)
        for v in variants:
            style = "best" if v in best else "second" if v in second else ""
            cells[v].append(value(means.get(v), None, 1, style))
    groups = [
        [v for v in variants if cache.method_of(v) != "scout"],
        [v for v in variants if cache.method_of(v) == "scout"],
    ]
    return {
        "name": "prefix0_summary",
        "template": "summary",
        "label": "tab:prefix0-summary",
        "caption": "Prefix-0 control: mean accuracy (Avg) of OPD, OPD + Teacher GRPO (the same teacher updates "
        "from the original problem) and SCOUT (teacher updates from student prefixes)." + cache.evaluation_note(settings),
        "columns": cols,
        "col_groups": spans([c["group"] for c in cols]),
        "groups": [[{"name": _row_name(cache, settings[0], v), "cells": cells[v]} for v in g] for g in groups if g],
    }


def optr_summary(cache: Cache) -> dict | None:
    g = cache.grid
    exp = g.experiments.get("optr")
    if not exp:
        return None
    tasks = []
    for s in exp.settings:
        pairs = [("opd", "scout"), ("optr", "optr_scout")]
        means = {}
        for a, b in pairs:
            for v in (a, b):
                if cache.has_variant(s, v):
                    means[v] = cache.row(s, v).agg(AVG).mean * 100
        best, second = stats.best_two(ranked_means(cache, s, list(means), AVG), 1)
        rows = []
        for a, b in pairs:
            ma, mb = means.get(a, math.nan), means.get(b, math.nan)
            style = "best" if b in best else "second" if b in second else ""
            colour = "scoutsummary" if b == "optr_scout" else "summarygray"
            gain = f"{mb - ma:+.1f}" if _ok(ma) and _ok(mb) else "--"
            rows.append(
                {
                    "base": METHODS[a].label,
                    "without": value(ma, None, 1),
                    "with": value(mb, None, 1, style),
                    "gain": gain,
                    "colour": colour,
                }
            )
        tasks.append({"task": f"{g.settings[s].domain.capitalize()} ({s})", "rows": rows})
    return {
        "name": "optr_summary",
        "template": "optr_summary",
        "label": "tab:optr-summary",
        "caption": "SCOUT on top of OPD and OPTR: mean accuracy (Avg) without and with SCOUT, and the gain."
        + cache.evaluation_note(list(exp.settings)),
        "tasks": tasks,
    }


def fsweep_tables(cache: Cache) -> list[dict]:
    g = cache.grid
    exp = g.experiments.get("interval")
    if not exp:
        return []
    out = []
    for s in exp.settings:
        sweep = cache.interval_variants(s)
        variants = ["base-student", "base-teacher", "opd"] + [v for _, v in sweep]
        rank = [v for _, v in sweep]
        cells = _summary_cells(cache, s, variants, 1, rank)
        names = {v: _row_name(cache, s, v) for v in variants}
        for f, v in sweep:
            names[v] = label(f"SCOUT (f={f})")
        groups = [["base-student", "base-teacher"], ["opd"], rank]
        out.append(
            {
                "name": f"fsweep_{s}",
                "template": "main",
                "label": f"tab:fsweep-{s}",
                "caption": f"Teacher update interval f on {s}: mean ± SD over runs (single runs: SD over "
                "repeats). Bold and underlined: best and second best among the SCOUT variants."
                + cache.evaluation_note([s]),
                "blocks": [
                    {
                        "title": DOMAIN_TITLES.get(g.settings[s].domain, s),
                        "columns": _columns(g, cache.benchmarks(s)),
                    }
                ],
                "groups": [[{"name": names[v], "colour": None, "cells": cells[v]} for v in g] for g in groups],
            }
        )
    return out


def all_tables(cache: Cache) -> list[dict]:
    """Every table the config's experiments call for, in the paper's order."""
    tables = main_tables(cache) + per_run_tables(cache)
    tables += [t for t in (prefix0_summary(cache), optr_summary(cache)) if t]
    tables += fsweep_tables(cache)
    tables += [hyper_table(cache.grid), lr_table(cache.grid), benchmark_table(cache.grid)]
    return tables


def render(table: dict, fmt: str = "tex") -> str:
    """A table as LaTeX (``tex``) or HTML (``html``): ``scout.render``."""
    return renderers.render(table, fmt)
