"""The paper's figures from cached records (and, where it exists, the analysis stage's CSVs).

Each figure is written as PDF (for the LaTeX report) and PNG (to look at). A figure whose data is
absent is skipped with a notice that says which file or records it needed.

Analysis inputs (written by the analysis stage per setting, ``analysis/{setting}/``; one row per
point, extra columns such as ``seed`` are averaged over):
- ``continuation.csv``: setting, teacher (e.g. initial / trained), prefix_ratio, accuracy,
  prefix_tokens -- teacher continuation accuracy from student prefixes;
- ``entropy.csv``: setting, teacher, context (own / student), position, entropy -- the
  teacher's token entropy along its own responses vs along student prefixes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from scout import grid  # noqa: E402
from scout.tables import AVG, Cache, interval_variants  # noqa: E402

CONTINUATION_COLUMNS = ["setting", "teacher", "prefix_ratio", "accuracy", "prefix_tokens"]
ENTROPY_COLUMNS = ["setting", "teacher", "context", "position", "entropy"]


def _save(fig, out_dir: Path, name: str) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_dir / f"{name}.pdf")
    fig.savefig(out_dir / f"{name}.png", dpi=150)
    plt.close(fig)
    return {"name": name, "pdf": f"{name}.pdf", "png": f"{name}.png"}


def interval_figure(cache: Cache, setting: str, out_dir: Path) -> dict | None:
    """Avg accuracy vs teacher update interval f, against OPD and the untrained student."""
    points = []
    for f, v in interval_variants(cache, setting):
        a = cache.row(setting, v).agg(AVG)
        if a.n:
            points.append((f, a.mean * 100, (a.sd * 100) if a.n > 1 else 0.0, a.n))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    xs = [p[0] for p in points]
    ax.errorbar(
        xs, [p[1] for p in points], yerr=[p[2] for p in points], marker="o", capsize=3, color="#1f5fa8", label="SCOUT"
    )
    for f, m, _, n in points:
        if n == 1:
            ax.annotate("1 run", (f, m), textcoords="offset points", xytext=(4, -10), fontsize=7)
    for variant, style, colour, label in (("opd", "--", "#666666", "OPD"), ("base-student", ":", "#999999", "student")):
        a = cache.row(setting, variant).agg(AVG)
        if a.n:
            ax.axhline(a.mean * 100, ls=style, color=colour, label=label)
            if a.n > 1:
                ax.axhspan((a.mean - a.sd) * 100, (a.mean + a.sd) * 100, color=colour, alpha=0.12, lw=0)
    ax.set_xlabel("teacher update interval $f$ (student steps)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.set_xticks(xs)
    ax.legend(fontsize=8)
    ax.set_title(setting, fontsize=9)
    return {
        **_save(fig, out_dir, f"interval_{setting}"),
        "caption": f"Accuracy (Avg over benchmarks, mean $\\pm$ SD over runs) vs the teacher update interval $f$ on "
        f"{setting.replace('_', '-')}; dashed: OPD (band: $\\pm$ SD), dotted: the untrained student.",
    }


def _step(ckpt: str, total_steps: int) -> int:
    return int(ckpt[4:]) if ckpt.startswith("step") else total_steps


def compute_matched_figure(cache: Cache, setting: str, out_dir: Path) -> dict | None:
    """Avg accuracy vs training step for the compute-matched runs (every evaluated checkpoint)."""
    df = cache.df
    variants = cache.experiment_variants("compute_matched", setting)
    benches = cache.benchmarks(setting)
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    drawn = 0
    for v, colour in zip(variants, ["#666666", "#1f5fa8", "#b5651d", "#2e8b57"], strict=False):
        d = df[(df.setting == setting) & (df.variant == v)] if len(df) else df
        if not len(d):
            continue
        wide = d.pivot_table(index=["seed", "checkpoint"], columns="benchmark", values="mean")
        wide = wide.reindex(columns=benches)
        run_avg = wide.mean(axis=1, skipna=False).dropna().reset_index(name="avg")
        if not len(run_avg):
            continue
        cell = next(c for c in cache.cell_list if (c.setting, c.variant) == (setting, v))
        total = grid.cell_spec(cache.config, cell)["total_steps"]
        run_avg["step"] = [_step(c, total) for c in run_avg.checkpoint]
        curve = run_avg.groupby("step")["avg"].mean().sort_index()
        ax.plot(curve.index, curve.values * 100, marker="o", ms=3, color=colour, label=v)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("training step (student)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.legend(fontsize=8)
    ax.set_title(setting, fontsize=9)
    return {
        **_save(fig, out_dir, f"compute_matched_{setting}"),
        "caption": f"Compute-matched comparison on {setting.replace('_', '-')}: accuracy (Avg) at every evaluated "
        "checkpoint vs training step.",
    }


def _read_analysis(paths: list[Path], columns: list[str]) -> pd.DataFrame:
    frames = []
    for path in paths:
        df = pd.read_csv(path)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(columns)}")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def continuation_figures(paths: list[Path], out_dir: Path) -> list[dict]:
    """Teacher continuation accuracy vs student-prefix ratio, with the prefix length as bars."""
    df = _read_analysis(paths, CONTINUATION_COLUMNS)
    out = []
    for setting, d in df.groupby("setting", sort=False):
        fig, ax = plt.subplots(figsize=(4.2, 3.0))
        bars = ax.twinx()
        tokens = d.groupby("prefix_ratio")["prefix_tokens"].mean()
        xs = tokens.index.to_numpy() * 100
        width = 0.6 * (min(pd.Series(xs).diff().dropna(), default=25.0) or 25.0)
        bars.bar(xs, tokens.values, width=width, color="#dddddd", zorder=0)
        bars.set_ylabel("prefix length (tokens)", color="#888888")
        ax.set_zorder(bars.get_zorder() + 1)
        ax.patch.set_visible(False)
        for (teacher, g), colour in zip(
            d.groupby("teacher", sort=False), ["#666666", "#1f5fa8", "#b5651d"], strict=False
        ):
            g = g.groupby("prefix_ratio")["accuracy"].mean()
            ax.plot(g.index * 100, g.values * 100, marker="o", color=colour, label=str(teacher))
        ax.set_xticks(xs)
        ax.set_xlabel("student prefix (% of its response)")
        ax.set_ylabel("teacher continuation accuracy (%)")
        ax.legend(fontsize=8)
        ax.set_title(str(setting), fontsize=9)
        out.append(
            {
                **_save(fig, out_dir, f"continuation_{setting}"),
                "caption": f"Teacher continuation accuracy from student prefixes on {str(setting).replace('_', '-')}, "
                "by teacher; bars: mean prefix length.",
            }
        )
    return out


def entropy_figures(paths: list[Path], out_dir: Path) -> list[dict]:
    """Teacher entropy along its own responses vs along student prefixes, per teacher state."""
    df = _read_analysis(paths, ENTROPY_COLUMNS)
    out = []
    for setting, d in df.groupby("setting", sort=False):
        teachers = list(dict.fromkeys(d.teacher))
        fig, axes = plt.subplots(1, len(teachers), figsize=(3.2 * len(teachers), 3.0), sharey=True, squeeze=False)
        for ax, teacher in zip(axes[0], teachers, strict=True):
            for (context, g), colour in zip(
                d[d.teacher == teacher].groupby("context", sort=False), ["#1f5fa8", "#b5651d"], strict=False
            ):
                g = g.groupby("position")["entropy"].mean()
                ax.plot(g.index, g.values, color=colour, label=f"{context} context")
            ax.set_title(f"teacher: {teacher}", fontsize=9)
            ax.set_xlabel("response position (tokens)")
        axes[0][0].set_ylabel("teacher token entropy (nats)")
        axes[0][0].legend(fontsize=8)
        out.append(
            {
                **_save(fig, out_dir, f"entropy_{setting}"),
                "caption": f"Teacher entropy on its own responses vs on student prefixes on "
                f"{str(setting).replace('_', '-')}, before and after training.",
            }
        )
    return out


def all_figures(cache: Cache, analysis_dir: Path, out_dir: Path) -> tuple[list[dict], list[str]]:
    """Every figure the config and the cache allow, and a notice for each one skipped."""
    cfg = cache.config
    figs: list[dict] = []
    notices: list[str] = []
    for exp, make, what in (
        ("interval", interval_figure, "accuracy vs update interval"),
        ("compute_matched", compute_matched_figure, "accuracy vs training step"),
    ):
        for s in cfg["experiments"].get(exp, {}).get("settings", []):
            fig = make(cache, s, out_dir)
            if fig:
                figs.append(fig)
            else:
                notices.append(f"figure {what} ({s}) skipped: no cached records for its runs")
    for name, make in (("continuation", continuation_figures), ("entropy", entropy_figures)):
        paths = sorted(analysis_dir.glob(f"*/{name}.csv")) + sorted(analysis_dir.glob(f"{name}.csv"))
        if not paths:
            notices.append(f"figure {name} skipped: no {analysis_dir}/*/{name}.csv (the analysis stage has not run)")
            continue
        made = make(paths, out_dir)
        figs += made
        if not made:
            notices.append(f"figure {name} skipped: {', '.join(map(str, paths))} hold no rows")
    return figs, notices
