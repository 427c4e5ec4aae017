"""The paper's figures, and training curves, from cached records, the runs' logs and the analysis;
``all_figures`` makes every one the config and the cache allow (the probes' are ``scout.probe_figures``,
the look of all of them ``scout.plotting``).

A figure whose data is absent is skipped with a notice that says which file or records it needed.
Bands are the spread over seeds (or the standard error over responses), and each caption says the n
behind it. Captions are plain text (``scout.render`` writes them for each format). Inputs besides
the records: ``train/{setting}/{variant}/s{seed}/metrics.jsonl``, per-step training metrics (the
student's reward every ``reward_every`` steps, its reverse KL to the teacher every step; SCOUT's
teacher reward and prefix ratio at each update).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from scout import jobs, tuning
from scout.plotting import band, legend, plt, save, style
from scout.probe_figures import behaviour_figures, continuation_figures, entropy_figures, reflection_figures
from scout.results import AVG, Cache

# ------------------------------------------------------------------------------------------------
# From the records
# ------------------------------------------------------------------------------------------------


def interval_figure(cache: Cache, setting: str, out_dir: Path) -> dict | None:
    """Avg accuracy vs teacher update interval f, against OPD and the untrained student."""
    points = []
    for f, v in cache.interval_variants(setting):
        a = cache.row(setting, v).agg(AVG)
        if a.n:
            points.append((f, a.mean * 100, (a.sd * 100) if a.n > 1 else 0.0, a.n))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    xs = [p[0] for p in points]
    ax.errorbar(xs, [p[1] for p in points], yerr=[p[2] for p in points], capsize=3, label="SCOUT", **style(0))
    for f, m, _, n in points:
        ax.annotate(f"n={n}", (f, m), textcoords="offset points", xytext=(4, -10), fontsize=7)
    for variant, i, label in (("opd", 1, "OPD"), ("base-student", 6, "untrained student")):
        a = cache.row(setting, variant).agg(AVG)
        if a.n:
            st = style(i)
            ax.axhline(a.mean * 100, ls=st["ls"], color=st["color"], label=f"{label} (n={a.n})")
            if a.n > 1:
                ax.axhspan((a.mean - a.sd) * 100, (a.mean + a.sd) * 100, color=st["color"], alpha=0.12, lw=0)
    ax.set_xlabel("teacher update interval f (student steps)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.set_xticks(xs)
    ax.set_title(setting, fontsize=9)
    legend(ax)
    n = ", ".join(f"f={f}: {k}" for f, _, _, k in points)
    return save(fig, out_dir, f"interval_{setting}",
                 f"Accuracy (Avg over benchmarks, mean ± SD over runs) vs the teacher update interval f on {setting} "
                 f"(runs: {n}); OPD with its ± SD band, and the untrained student.")  # fmt: skip


def _step(ckpt: str, total_steps: int) -> int:
    return int(ckpt[4:]) if ckpt.startswith("step") else total_steps


def compute_matched_figure(cache: Cache, setting: str, out_dir: Path) -> dict | None:
    """Avg accuracy vs training step for the compute-matched runs: mean over seeds with a ± SD band."""
    df = cache.df
    benches = cache.benchmarks(setting)
    fig, ax = plt.subplots(figsize=(4.4, 3.0))
    ns = []
    for i, v in enumerate(cache.experiment_variants("compute_matched", setting)):
        d = df[(df.setting == setting) & (df.variant == v)] if len(df) else df
        if not len(d):
            continue
        wide = d.pivot_table(index=["seed", "checkpoint"], columns="benchmark", values="mean").reindex(columns=benches)
        run_avg = wide.mean(axis=1, skipna=False).dropna().reset_index(name="avg")
        if not len(run_avg):
            continue
        cell = next(c for c in cache.cell_list if (c.setting, c.variant) == (setting, v))
        total = cache.grid.spec(cell)["total_steps"]
        run_avg["step"] = [_step(c, total) for c in run_avg.checkpoint]
        by_step = run_avg.groupby("step")["avg"]
        mean, sd, n = by_step.mean() * 100, by_step.std(ddof=1) * 100, int(run_avg.seed.nunique())
        band(ax, mean.index.to_numpy(), mean.to_numpy(), sd.to_numpy() if n > 1 else None, style(i),
              f"{cache.label(v)} (n={n})")  # fmt: skip
        ns.append(f"{cache.label(v)}: {n} run(s)")
    if not ns:
        plt.close(fig)
        return None
    ax.set_xlabel("training step (student)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.set_title(setting, fontsize=9)
    legend(ax)
    return save(fig, out_dir, f"compute_matched_{setting}",
                 f"Compute-matched comparison on {setting}: accuracy (Avg) at every evaluated checkpoint vs training "
                 f"step, mean over runs with a ± SD band ({'; '.join(ns)}).")  # fmt: skip


# ------------------------------------------------------------------------------------------------
# From the training runs' logs
# ------------------------------------------------------------------------------------------------

CURVES = (
    ("reward", "student reward (% of rollouts right)", 100),
    ("reverse_kl_k1", "student-teacher reverse KL (K1, nats/token)", 1),
)


def _metrics(cache: Cache, train_dir: Path, setting: str, variant: str, key: str) -> pd.DataFrame:
    """One metric of a variant's runs, from the folders of the runs they are (a cell that shares a
    run, a tuning run's for instance, reads that run's log)."""
    rows = []
    for seed in cache.seeds.get((setting, variant), []):
        run = jobs.run_owner(cache.grid, setting, variant, seed)
        path = train_dir / run.setting / run.variant / f"s{run.seed}" / "metrics.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = json.loads(line)
            if key in m and m[key] is not None:
                rows.append((f"s{seed}", m["step"], m[key]))
    return pd.DataFrame(rows, columns=["run", "step", "value"])


def training_curves(cache: Cache, train_dir: Path, out_dir: Path) -> list[dict]:
    """Per setting and key metric: every variant of the main grid overlaid, the mean over seeds with a
    ± SD band, from the runs' metrics.jsonl."""
    out = []
    for setting in cache.grid.settings:
        variants = cache.experiment_variants("main", setting)
        for key, ylabel, scale in CURVES:
            fig, ax = plt.subplots(figsize=(4.6, 3.0))
            drawn = []
            for i, v in enumerate(variants):
                d = _metrics(cache, train_dir, setting, v, key)
                if not len(d):
                    continue
                by = d.groupby("step")["value"]
                n = d.run.nunique()
                mean, sd = by.mean() * scale, by.std(ddof=1) * scale
                band(ax, mean.index.to_numpy(), mean.to_numpy(), sd.to_numpy() if n > 1 else None,
                      {**style(i), "ms": 2}, f"{cache.label(v)} (n={n})")  # fmt: skip
                drawn.append(f"{cache.label(v)}: {n}")
            if not drawn:
                plt.close(fig)
                continue
            ax.set_xlabel("training step")
            ax.set_ylabel(ylabel)
            ax.set_title(setting, fontsize=9)
            legend(ax)
            what = "reward" if key == "reward" else "reverse KL"
            out.append(save(fig, out_dir, f"training_{what.replace(' ', '_')}_{setting}",
                             f"Training curves on {setting}: the student's {ylabel} per step, mean over seeds with a "
                             f"± SD band (runs: {'; '.join(drawn)}). Distillation methods grade their rollouts only "
                             "every few steps (training.reward_every); GRPO every step.", ))  # fmt: skip
    return out


def teacher_update_figures(cache: Cache, train_dir: Path, settings: list[str], out_dir: Path) -> list[dict]:
    """SCOUT's teacher phase: the teacher's continuation reward at each update (mean over seeds, ±
    SD band), and the prefix ratio of the update on its own axis (the curriculum lengthens them)."""
    out = []
    for setting in settings:
        reward = _metrics(cache, train_dir, setting, "scout", "teacher_reward")
        if not len(reward):
            continue
        ratio = _metrics(cache, train_dir, setting, "scout", "teacher_prefix_ratio").groupby("step")["value"].mean()
        n = reward.run.nunique()
        fig, ax = plt.subplots(figsize=(4.6, 3.0))
        by = reward.groupby("step")["value"]
        band(ax, by.mean().index.to_numpy(), by.mean().to_numpy() * 100,
              by.std(ddof=1).to_numpy() * 100 if n > 1 else None, style(0), f"teacher reward (n={n})")  # fmt: skip
        ratio_ax = ax.twinx()
        st = style(1)
        ratio_ax.plot(ratio.index, ratio.values * 100, color=st["color"], ls=st["ls"], label="prefix ratio")
        ratio_ax.set_ylabel("prefix ratio of the update (%)")
        ax.set_xlabel("student step of the teacher update")
        ax.set_ylabel("teacher continuation reward (%)")
        ax.set_title(setting, fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ratio_ax.get_legend_handles_labels()
        legend(ax, h1 + h2, l1 + l2)
        out.append(save(fig, out_dir, f"teacher_updates_{setting}",
                         f"SCOUT's teacher phase on {setting}: the reward of the teacher's continuations of student "
                         f"prefixes at each update, mean over {n} run(s) with a ± SD band, and the prefix ratio of "
                         "the update (right axis).", ))  # fmt: skip
    return out


def _lr(x: float) -> str:
    return f"{x:.1e}".replace("e-0", "e-")


def tuning_figure(results: Path, setting: str, out_dir: Path) -> dict | None:
    """The tuning stage of a setting: validation accuracy against each learning rate searched (the
    student LR on OPD, then the teacher LR on SCOUT, full and LoRA), the chosen one marked."""
    found = [json.loads(p.read_text()) for param in tuning.PARAMS
             if (p := results / "tuning" / setting / f"{param}.json").exists()]  # fmt: skip
    if not found:
        return None
    fig, axes = plt.subplots(1, len(found), figsize=(3.6 * len(found), 2.9), squeeze=False, sharey=True)
    parts = []
    for i, (ax, f) in enumerate(zip(axes[0], found, strict=True)):
        lrs = [p["lr"] for p in f["points"]]
        scores = [100 * p["score"] for p in f["points"]]
        st = style(0)
        sems = [100 * p.get("sem", float("nan")) for p in f["points"]]  # choices written before it: no bars
        ax.errorbar(lrs, scores, yerr=sems, color=st["color"], marker="o", ms=4, capsize=2, elinewidth=0.8)
        best = next(p for p in f["points"] if p["lr"] == f["chosen"])
        ax.plot([best["lr"]], [100 * best["score"]], marker="*", ms=13, color=style(1)["color"], ls="none",
                label=f"chosen: {_lr(best['lr'])}")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks(lrs, [_lr(x) for x in lrs], fontsize=7, rotation=30)
        ax.minorticks_off()
        name = {"student_lr": "student LR (OPD)", "teacher_lr": "teacher LR (SCOUT)",
                "teacher_lora_lr": "LoRA teacher LR (SCOUT)"}[f["param"]]  # fmt: skip
        ax.set_xlabel(name)
        if i == 0:  # every panel scores the student on the same validation set: one axis
            ax.set_ylabel(f"student's validation accuracy,\n{f['validation']['data']} (%)")
        ax.legend(fontsize=7, frameon=False)
        fixed = ", ".join(f"{k.replace('_', ' ')} {_lr(v)}" for k, v in f.get("fixed", {}).items() if v != tuning.TUNED)
        parts.append(f"{name}: {len(lrs)} points, chosen {_lr(f['chosen'])}" + (f" ({fixed})" if fixed else ""))
    fig.suptitle(setting, fontsize=9)
    v = found[0]["validation"]
    return save(fig, out_dir, f"tuning_{setting}",
                 f"Learning-rate sensitivity on {setting}: validation accuracy (avg@{v['repeats']} over the "
                 f"{v['rows']} questions of {v['data']}, held out from training and test) of one run per point, "
                 f"± one evaluation standard error, the chosen point starred. {'; '.join(parts)}. The tables and claims use the test benchmarks "
                 "only.")  # fmt: skip


def all_figures(cache: Cache, analysis_dir: Path, out_dir: Path) -> tuple[list[dict], list[str]]:
    """Every figure the config and the cache allow, and a notice for each one skipped."""
    g = cache.grid
    figs: list[dict] = []
    notices: list[str] = []
    for exp, make, what in (
        ("interval", interval_figure, "accuracy vs update interval"),
        ("compute_matched", compute_matched_figure, "accuracy vs training step"),
    ):
        for s in g.experiments[exp].settings if exp in g.experiments else ():
            fig = make(cache, s, out_dir)
            if fig:
                figs.append(fig)
            else:
                notices.append(f"figure {what} ({s}) skipped: no cached records for its runs")
    train_dir = analysis_dir.parent / "train"
    curves = training_curves(cache, train_dir, out_dir)
    figs += curves
    if not curves:
        notices.append(f"training curves skipped: no training logs ({train_dir}/*/*/s*/metrics.jsonl)")
    scout_settings = [s for s in g.settings if cache.seeds.get((s, "scout"))]
    made = teacher_update_figures(cache, train_dir, scout_settings, out_dir)
    figs += made
    if scout_settings and not made:
        notices.append("figure teacher updates skipped: no SCOUT training logs (train/*/scout/s*/metrics.jsonl)")
    for setting in tuning.tuned_settings(g.config):
        fig = tuning_figure(analysis_dir.parent, setting, out_dir)
        if fig:
            figs.append(fig)
        else:
            notices.append(f"figure learning-rate sensitivity ({setting}) skipped: its searches have not chosen")
    behaviour = cache.grid.paths.summary_dir() / "behaviour.csv"
    if behaviour.exists():
        figs += behaviour_figures(behaviour, cache, out_dir)
    else:
        notices.append(f"figure behaviour skipped: no {behaviour} (the report writes it)")
    for name, make in (("continuation", continuation_figures), ("entropy", entropy_figures),
                       ("reflection", reflection_figures)):  # fmt: skip
        paths = sorted(analysis_dir.glob(f"*/{name}.csv")) + sorted(analysis_dir.glob(f"{name}.csv"))
        if not paths:
            notices.append(f"figure {name} skipped: no {analysis_dir}/*/{name}.csv (the analysis stage has not run)")
            continue
        made = make(paths, out_dir)
        figs += made
        if not made:
            notices.append(f"figure {name} skipped: {', '.join(map(str, paths))} hold no rows")
    return figs, notices


def improvement_figure(across: list, out_dir: Path) -> dict | None:
    """rliable's probability-of-improvement plot: per comparison, P(a run of the first beats a run
    of the second on the same setting) with its stratified-bootstrap interval, each setting's own
    value as a dot; 0.5 is no difference. ``across``: scout.across.Across rows."""
    rows = [r for r in across if r.measured]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.75 * len(rows)))
    settings = sorted({t for r in rows for t in r.improvement.tasks})
    for i, r in enumerate(rows):
        imp = r.improvement
        y = len(rows) - 1 - i
        if imp.low == imp.low:
            ax.barh(y, imp.high - imp.low, left=imp.low, height=0.5, color="#1f5fa8", alpha=0.25, edgecolor="#1f5fa8")
        ax.plot([imp.point], [y], marker="|", ms=18, mew=2.5, color="#1f5fa8")
        for j, t in enumerate(settings):
            if t in imp.tasks:
                st = style(j + 1)
                ax.plot([imp.tasks[t]], [y + 0.34], marker=st["marker"], color=st["color"], ms=5, ls="none",
                        label=t if i == 0 else None)  # fmt: skip
    ax.axvline(0.5, color="#888", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), [r.label for r in reversed(rows)], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_xlabel("P(a run of the first beats a run of the second on the same setting)")
    legend(ax)
    n = "; ".join(f"{r.label}: {len(r.improvement.tasks)} settings, "
                  f"{sum(len(a) for a, _ in r.improvement.runs.values())} and "
                  f"{sum(len(b) for _, b in r.improvement.runs.values())} runs" for r in rows)  # fmt: skip
    return save(fig, out_dir, "improvement",
                 "Probability of improvement across settings (rliable; Agarwal et al., 2021): the chance that a run of "
                 "the first method scores a higher final Avg than a run of the second on the same setting, averaged "
                 "over settings; bar: its 95% stratified-bootstrap interval (runs resampled within each method and "
                 f"setting); marks above it: each setting's own value; dashed: no difference ({n}).")  # fmt: skip
