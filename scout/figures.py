"""The paper's figures from cached records (and, where it exists, the analysis stage's CSVs).

Each figure is written as PDF (for the LaTeX report) and PNG (to look at). A figure whose data is
absent is skipped with a notice that says which file or records it needed.

Analysis inputs (written by the analysis stage per setting, ``analysis/{setting}/``; one row per
point, extra columns such as ``seed`` are averaged over):
- ``continuation.csv``: setting, teacher (initial / scout), prefixes (initial-student /
  final-student / own), prefix_ratio, accuracy, prefix_tokens -- teacher continuation accuracy;
- ``entropy.csv``: setting, teacher, context (own / student), position, entropy -- the
  teacher's token entropy along its own responses vs along student prefixes.

SCOUT's teacher phase is drawn from the training runs' own logs (``train/.../metrics.jsonl``):
the teacher's continuation reward at every teacher update.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from scout import grid  # noqa: E402
from scout.tables import AVG, Cache, interval_variants  # noqa: E402

CONTINUATION_COLUMNS = ["setting", "teacher", "prefixes", "prefix_ratio", "accuracy", "prefix_tokens"]
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


def _curve(ax, d: pd.DataFrame, label: str, colour: str, style: str = "-") -> None:
    """Mean over seeds at each ratio, with a +-SD band when there are several seeds."""
    per_seed = d.groupby(["seed", "prefix_ratio"])["accuracy"].mean().unstack("seed") * 100
    if per_seed.empty:
        return
    mean = per_seed.mean(axis=1)
    ax.plot(mean.index * 100, mean.values, marker="o", ms=4, ls=style, color=colour, label=label)
    if per_seed.shape[1] > 1:
        sd = per_seed.std(axis=1, ddof=1)
        ax.fill_between(mean.index * 100, mean - sd, mean + sd, color=colour, alpha=0.15, lw=0)


def _continuation_axes(d: pd.DataFrame, prefixes: str):
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    bars = ax.twinx()
    tokens = d[d.prefixes == prefixes].groupby("prefix_ratio")["prefix_tokens"].mean()
    xs = tokens.index.to_numpy() * 100
    width = 0.6 * (min(pd.Series(xs).diff().dropna(), default=25.0) or 25.0)
    bars.bar(xs, tokens.values, width=width, color="#e3e3e3", zorder=0)
    bars.set_ylabel("student prefix length (tokens)", color="#888888")
    ax.set_zorder(bars.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.set_xticks(xs)
    ax.set_xlabel("prefix (% of the response)")
    ax.set_ylabel("teacher continuation accuracy (%)")
    return fig, ax


def continuation_figures(paths: list[Path], out_dir: Path) -> list[dict]:
    """Per setting: (1) the initial teacher on student prefixes and on its own, beside the SCOUT-
    trained teacher on the same initial-student prefixes; (2) both teachers on the final SCOUT
    student's prefixes (matched checkpoints)."""
    df = _read_analysis(paths, CONTINUATION_COLUMNS)
    if "seed" not in df.columns:
        df["seed"] = 0
    out = []
    for setting, d in df.groupby("setting", sort=False):
        name = str(setting).replace("_", "-")
        fig, ax = _continuation_axes(d, "initial-student")
        _curve(
            ax,
            d[(d.teacher == "initial") & (d.prefixes == "initial-student")],
            "initial teacher, student prefixes",
            "#b5651d",
        )
        _curve(
            ax,
            d[(d.teacher == "initial") & (d.prefixes == "own")],
            "initial teacher, its own prefixes",
            "#666666",
            "--",
        )
        _curve(
            ax,
            d[(d.teacher == "scout") & (d.prefixes == "initial-student")],
            "SCOUT teacher, student prefixes",
            "#1f5fa8",
        )
        ax.legend(fontsize=7)
        ax.set_title(name, fontsize=9)
        out.append(
            {
                **_save(fig, out_dir, f"continuation_{setting}"),
                "caption": f"Teacher continuation accuracy on {name} from prefixes of the initial student's responses "
                "and of the teacher's own, at the same ratios; blue: the SCOUT-trained teacher on the same "
                "initial-student prefixes (mean $\\pm$ SD over seeds). Bars: mean student prefix length.",
            }
        )
        # the probed checkpoints, intermediate ones in order of appearance, final last
        ckpts = [str(p).split("@", 1)[1] for p in dict.fromkeys(d.prefixes) if str(p).startswith("student@")]
        ckpts += ["final"] if (d.prefixes == "final-student").any() else []
        if ckpts:
            fig, ax = _continuation_axes(d, grid.probe_labels(ckpts[-1])[1])
            colours = ["#1f5fa8", "#2e8b57", "#7b3fa0", "#b5651d"]
            for ckpt, colour in zip(ckpts, colours, strict=False):
                trained, prefixes = grid.probe_labels(ckpt)
                at = d[d.prefixes == prefixes]
                _curve(ax, at[at.teacher == "initial"], f"initial teacher, {ckpt} student", colour, "--")
                _curve(ax, at[at.teacher == trained], f"SCOUT teacher at {ckpt}", colour)
            ax.legend(fontsize=7)
            ax.set_title(f"{name}: matched checkpoints", fontsize=9)
            out.append(
                {
                    **_save(fig, out_dir, f"continuation_matched_{setting}"),
                    "caption": f"Matched checkpoints on {name}: the initial teacher (dashed) and the SCOUT-trained teacher "
                    "of the same checkpoint continuing prefixes of that checkpoint's student (mean $\\pm$ SD over seeds).",
                }
            )
    return out


def teacher_update_figures(train_dir: Path, settings: list[str], out_dir: Path) -> list[dict]:
    """SCOUT's teacher phase per run: the teacher's continuation reward at each update, with the
    prefix ratio of that update (the curriculum makes later prefixes longer)."""
    out = []
    for setting in settings:
        runs = sorted((train_dir / setting / "scout").glob("s*/metrics.jsonl"))
        points = []
        for path in runs:
            for line in path.read_text().splitlines():
                m = json.loads(line)
                if "teacher_reward" in m:
                    points.append((path.parent.name, m["step"], m["teacher_reward"], m.get("teacher_prefix_ratio")))
        if not points:
            continue
        d = pd.DataFrame(points, columns=["run", "step", "reward", "ratio"])
        fig, ax = plt.subplots(figsize=(4.6, 3.2))
        ratio_ax = ax.twinx()
        for (run, g), colour in zip(d.groupby("run"), ["#1f5fa8", "#b5651d", "#2e8b57", "#7b3fa0"], strict=False):
            ax.plot(g.step, g.reward * 100, marker="o", ms=3, color=colour, label=f"run {run}")
        ratio = d.groupby("step")["ratio"].mean()
        ratio_ax.plot(ratio.index, ratio.values * 100, ls=":", color="#888888")
        ratio_ax.set_ylabel("prefix ratio of the update (%)", color="#888888")
        ax.set_xlabel("student step of the teacher update")
        ax.set_ylabel("teacher continuation reward (%)")
        ax.legend(fontsize=7)
        ax.set_title(setting, fontsize=9)
        out.append(
            {
                **_save(fig, out_dir, f"teacher_updates_{setting}"),
                "caption": f"SCOUT's teacher phase on {setting.replace('_', '-')}: mean reward of the teacher's "
                "continuations of student prefixes at each update, per run; dotted: the prefix ratio.",
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
    scout_settings = [s for s in cfg["settings"] if cache.seeds.get((s, "scout"))]
    made = teacher_update_figures(analysis_dir.parent / "train", scout_settings, out_dir)
    figs += made
    if scout_settings and not made:
        notices.append("figure teacher updates skipped: no SCOUT training logs (train/*/scout/s*/metrics.jsonl)")
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
