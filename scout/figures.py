"""The paper's figures, and training curves, from cached records, the runs' logs and the analysis.

Each figure is written as PDF (for the LaTeX report) and PNG (for the HTML page). A figure whose
data is absent is skipped with a notice that says which file or records it needed. Every curve
can be told apart in greyscale (its own marker and line style, not only its colour), legends sit
outside the data, bands are the spread over seeds (or the standard error over responses), and each
caption says the n behind it. Captions are plain text (``scout.render`` writes them for each format).

Inputs besides the records:
- ``train/{setting}/{variant}/s{seed}/metrics.jsonl``: per-step training metrics (the student's
  reward every ``reward_every`` steps, its reverse KL to the teacher every step; SCOUT's teacher
  reward and prefix ratio at each update);
- ``analysis/{setting}/continuation.csv``: teacher continuation accuracy per prefix ratio,
  ``entropy.csv``: the teacher's token entropy along responses, with ``count`` responses a position,
  and ``reflection.csv``: each teacher's probability of a reflection word after the student's steps;
- ``summary/behaviour.csv``: each run's reflection words per response, accuracy with and without.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scout import grid, jobs, tuning  # noqa: E402
from scout.results import AVG, Cache, summary_dir  # noqa: E402

CONTINUATION_COLUMNS = ["setting", "teacher", "prefixes", "prefix_ratio", "accuracy", "prefix_tokens"]
ENTROPY_COLUMNS = ["setting", "teacher", "context", "position", "entropy"]
# (colour, marker, line style): distinguishable in colour and in greyscale
STYLES = [
    ("#1f5fa8", "o", "-"),
    ("#b5651d", "s", "--"),
    ("#2e8b57", "^", "-."),
    ("#7b3fa0", "D", ":"),
    ("#444444", "v", (0, (5, 1))),
    ("#c23b22", "P", (0, (3, 1, 1, 1))),
    ("#888888", "X", (0, (1, 1))),
]


def _style(i: int) -> dict:
    colour, marker, ls = STYLES[i % len(STYLES)]
    return {"color": colour, "marker": marker, "ls": ls, "ms": 4}


def _save(fig, out_dir: Path, name: str, caption: str, legend_outside: bool = True) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{name}.pdf", bbox_inches="tight")
    fig.savefig(out_dir / f"{name}.png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return {"name": name, "pdf": f"{name}.pdf", "png": f"{name}.png", "caption": caption}


def _legend(ax, handles=None, labels=None) -> None:
    """The legend beside the axes, where it never covers a curve: to the right, or below them when a
    twin axis holds the right side (its ticks and label)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    twinned = any(
        other is not ax and other.get_position().bounds == ax.get_position().bounds for other in ax.figure.axes
    )
    if twinned:
        ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    else:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)


def _band(ax, x, mean, spread, style: dict, label: str) -> None:
    ax.plot(x, mean, label=label, **style)
    if spread is not None and np.isfinite(spread).any():
        ax.fill_between(x, mean - spread, mean + spread, color=style["color"], alpha=0.15, lw=0)


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
    ax.errorbar(xs, [p[1] for p in points], yerr=[p[2] for p in points], capsize=3, label="SCOUT", **_style(0))
    for f, m, _, n in points:
        ax.annotate(f"n={n}", (f, m), textcoords="offset points", xytext=(4, -10), fontsize=7)
    for variant, i, label in (("opd", 1, "OPD"), ("base-student", 6, "untrained student")):
        a = cache.row(setting, variant).agg(AVG)
        if a.n:
            st = _style(i)
            ax.axhline(a.mean * 100, ls=st["ls"], color=st["color"], label=f"{label} (n={a.n})")
            if a.n > 1:
                ax.axhspan((a.mean - a.sd) * 100, (a.mean + a.sd) * 100, color=st["color"], alpha=0.12, lw=0)
    ax.set_xlabel("teacher update interval f (student steps)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.set_xticks(xs)
    ax.set_title(setting, fontsize=9)
    _legend(ax)
    n = ", ".join(f"f={f}: {k}" for f, _, _, k in points)
    return _save(fig, out_dir, f"interval_{setting}",
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
        total = grid.cell_spec(cache.config, cell)["total_steps"]
        run_avg["step"] = [_step(c, total) for c in run_avg.checkpoint]
        by_step = run_avg.groupby("step")["avg"]
        mean, sd, n = by_step.mean() * 100, by_step.std(ddof=1) * 100, int(run_avg.seed.nunique())
        _band(ax, mean.index.to_numpy(), mean.to_numpy(), sd.to_numpy() if n > 1 else None, _style(i),
              f"{cache.label(v)} (n={n})")  # fmt: skip
        ns.append(f"{cache.label(v)}: {n} run(s)")
    if not ns:
        plt.close(fig)
        return None
    ax.set_xlabel("training step (student)")
    ax.set_ylabel("accuracy, Avg (%)")
    ax.set_title(setting, fontsize=9)
    _legend(ax)
    return _save(fig, out_dir, f"compute_matched_{setting}",
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
        run = jobs.run_owner(cache.config, setting, variant, seed)
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
    for setting in cache.config["settings"]:
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
                _band(ax, mean.index.to_numpy(), mean.to_numpy(), sd.to_numpy() if n > 1 else None,
                      {**_style(i), "ms": 2}, f"{cache.label(v)} (n={n})")  # fmt: skip
                drawn.append(f"{cache.label(v)}: {n}")
            if not drawn:
                plt.close(fig)
                continue
            ax.set_xlabel("training step")
            ax.set_ylabel(ylabel)
            ax.set_title(setting, fontsize=9)
            _legend(ax)
            what = "reward" if key == "reward" else "reverse KL"
            out.append(_save(fig, out_dir, f"training_{what.replace(' ', '_')}_{setting}",
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
        _band(ax, by.mean().index.to_numpy(), by.mean().to_numpy() * 100,
              by.std(ddof=1).to_numpy() * 100 if n > 1 else None, _style(0), f"teacher reward (n={n})")  # fmt: skip
        ratio_ax = ax.twinx()
        st = _style(1)
        ratio_ax.plot(ratio.index, ratio.values * 100, color=st["color"], ls=st["ls"], label="prefix ratio")
        ratio_ax.set_ylabel("prefix ratio of the update (%)")
        ax.set_xlabel("student step of the teacher update")
        ax.set_ylabel("teacher continuation reward (%)")
        ax.set_title(setting, fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ratio_ax.get_legend_handles_labels()
        _legend(ax, h1 + h2, l1 + l2)
        out.append(_save(fig, out_dir, f"teacher_updates_{setting}",
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
        st = _style(0)
        sems = [100 * p.get("sem", float("nan")) for p in f["points"]]  # choices written before it: no bars
        ax.errorbar(lrs, scores, yerr=sems, color=st["color"], marker="o", ms=4, capsize=2, elinewidth=0.8)
        best = next(p for p in f["points"] if p["lr"] == f["chosen"])
        ax.plot([best["lr"]], [100 * best["score"]], marker="*", ms=13, color=_style(1)["color"], ls="none",
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
    return _save(fig, out_dir, f"tuning_{setting}",
                 f"Learning-rate sensitivity on {setting}: validation accuracy (avg@{v['repeats']} over the "
                 f"{v['rows']} questions of {v['data']}, held out from training and test) of one run per point, "
                 f"± one evaluation standard error, the chosen point starred. {'; '.join(parts)}. The tables and claims use the test benchmarks "
                 "only.")  # fmt: skip


# ------------------------------------------------------------------------------------------------
# From the analysis stage
# ------------------------------------------------------------------------------------------------


def _read_analysis(paths: list[Path], columns: list[str]) -> pd.DataFrame:
    frames = []
    for path in paths:
        df = pd.read_csv(path)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(columns)}")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def _curve(ax, d: pd.DataFrame, label: str, style: dict) -> int:
    """Mean over seeds at each ratio, with a ± SD band when there are several seeds; returns n seeds."""
    per_seed = d.groupby(["seed", "prefix_ratio"])["accuracy"].mean().unstack("seed") * 100
    if per_seed.empty:
        return 0
    n = per_seed.shape[1]
    sd = per_seed.std(axis=1, ddof=1).to_numpy() if n > 1 else None
    _band(ax, per_seed.index.to_numpy() * 100, per_seed.mean(axis=1).to_numpy(), sd, style, f"{label} (n={n})")
    return n


def _continuation_axes(d: pd.DataFrame, prefixes: str):
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    bars = ax.twinx()
    tokens = d[d.prefixes == prefixes].groupby("prefix_ratio")["prefix_tokens"].mean()
    xs = tokens.index.to_numpy() * 100
    width = 0.6 * (min(pd.Series(xs).diff().dropna(), default=25.0) or 25.0)
    bars.bar(xs, tokens.values, width=width, color="#e3e3e3", zorder=0)
    bars.set_ylabel("student prefix length (tokens)", color="#888888")
    ax.set_zorder(bars.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.set_xticks(xs)
    ax.set_xlabel("prefix (% of the student's reasoning)")
    ax.set_ylabel("teacher continuation accuracy (%)")
    return fig, ax


def continuation_figures(paths: list[Path], out_dir: Path) -> list[dict]:
    """Per setting: (1) the initial teacher on student prefixes and on its own, beside the SCOUT-
    trained and the control's teachers on the same initial-student prefixes; (2) each probed
    checkpoint's teachers on that checkpoint's student (matched checkpoints)."""
    df = _read_analysis(paths, CONTINUATION_COLUMNS)
    if "seed" not in df.columns:
        df["seed"] = 0
    out = []
    for setting, d in df.groupby("setting", sort=False):
        fig, ax = _continuation_axes(d, "initial-student")
        student = d[d.prefixes == "initial-student"]
        n = d[(d.teacher == "initial") & (d.prefixes == "initial-student")].n.max() if "n" in d else None
        _curve(ax, student[student.teacher == "initial"], "initial teacher, student prefixes", _style(1))
        _curve(ax, d[(d.teacher == "initial") & (d.prefixes == "own")], "initial teacher, own prefixes", _style(6))
        seeds = _curve(ax, student[student.teacher == "scout"], "SCOUT teacher, student prefixes", _style(0))
        _curve(ax, student[student.teacher == "control"], "prefix-0 control's teacher", _style(2))
        ax.set_title(str(setting), fontsize=9)
        _legend(ax)
        committed = ""
        if "committed" in d:
            share = (
                d[(d.teacher == "initial") & (d.prefixes == "initial-student")].groupby("prefix_ratio").committed.mean()
            )
            committed = "; prefixes that already hold the final answer: " + ", ".join(
                f"{r:.0%}: {c:.0%}" for r, c in share.items()
            )  # fmt: skip
        out.append(_save(fig, out_dir, f"continuation_{setting}",
                         f"Teacher continuation accuracy on {setting} from prefixes of the initial student's responses "
                         f"and of the teacher's own, at the same ratios ({n or '?'} continuations a point), and of the "
                         f"trained teachers on the same student prefixes (mean ± SD over {seeds} seed(s)). Bars: mean "
                         f"student prefix length{committed}.", ))  # fmt: skip
        ckpts = [str(p).split("@", 1)[1] for p in dict.fromkeys(d.prefixes) if str(p).startswith("student@")]
        ckpts += ["final"] if (d.prefixes == "final-student").any() else []
        if ckpts:
            fig, ax = _continuation_axes(d, jobs.probe_labels(ckpts[-1])[1])
            i = 0
            for ckpt in ckpts:
                trained, prefixes = jobs.probe_labels(ckpt)
                at = d[d.prefixes == prefixes]
                _curve(ax, at[at.teacher == "initial"], f"initial teacher, {ckpt} student", _style(i))
                _curve(ax, at[at.teacher == trained], f"SCOUT teacher at {ckpt}", _style(i + 1))
                i += 2
            ax.set_title(f"{setting}: matched checkpoints", fontsize=9)
            _legend(ax)
            out.append(_save(fig, out_dir, f"continuation_matched_{setting}",
                             f"Matched checkpoints on {setting}: the initial teacher and the SCOUT-trained teacher of "
                             "the same checkpoint continuing prefixes of that checkpoint's student (mean ± SD over "
                             "seeds; each curve its own marker and line).", ))  # fmt: skip
    return out


def entropy_figures(paths: list[Path], out_dir: Path, smooth: int = 5) -> list[dict]:
    """Teacher entropy along its own responses vs along student responses, per teacher state: a
    running mean over positions with a band of ± one standard error over responses, where at least
    five responses reach the position."""
    df = _read_analysis(paths, ENTROPY_COLUMNS)
    if "count" not in df:
        df["count"] = 1
    out = []
    for setting, d in df.groupby("setting", sort=False):
        teachers = list(dict.fromkeys(d.teacher))
        fig, axes = plt.subplots(1, len(teachers), figsize=(3.4 * len(teachers), 3.0), sharey=True, squeeze=False)
        counts = []
        for ax, teacher in zip(axes[0], teachers, strict=True):
            for i, (context, g) in enumerate(d[d.teacher == teacher].groupby("context", sort=False)):
                g = g.groupby("position").agg(entropy=("entropy", "mean"), count=("count", "max"))
                g = g[g["count"] >= 5]
                if g.empty:
                    continue
                mean = g.entropy.rolling(smooth, center=True, min_periods=1).mean()
                spread = g.entropy.rolling(smooth, center=True, min_periods=2).std() / np.sqrt(g["count"].clip(lower=1))
                st = {**_style(i), "marker": None}
                _band(ax, g.index.to_numpy(), mean.to_numpy(), spread.to_numpy(), st,
                      f"{context} responses (n={int(g['count'].max())})")  # fmt: skip
                counts.append(f"{teacher}/{context}: {int(g['count'].max())}")
            ax.set_title(f"teacher: {teacher}", fontsize=9)
            ax.set_xlabel("response position (tokens)")
        axes[0][0].set_ylabel("teacher token entropy (nats)")
        _legend(axes[0][-1])
        out.append(_save(fig, out_dir, f"entropy_{setting}",
                         f"Teacher entropy on its own responses vs on student responses on {setting}, before and after "
                         f"training: a running mean over {smooth} positions with a band of ± 1 SE over responses, where "
                         f"at least 5 responses reach the position (responses: {', '.join(counts)}).", ))  # fmt: skip
    return out


def behaviour_figures(path: Path, cache: Cache, out_dir: Path) -> list[dict]:
    """Per setting: reflection words per response of each variant's final student (mean ± SD over
    seeds), and its accuracy on responses with and without one."""
    df = pd.read_csv(path)
    out = []
    for setting, d in df.groupby("setting", sort=False):
        order = [v for v in ("base-student", "base-teacher") if v in set(d.variant)]
        order += [c.variant for c in cache.cell_list if c.setting == setting and c.variant in set(d.variant)]
        order = list(dict.fromkeys(order))
        g = d.groupby("variant")
        mean, sd = g[["reflections_per_response", "accuracy_with", "accuracy_without"]].mean(), g.std(numeric_only=True)
        n = g.size()
        labels = [f"{cache.label(v) if v in cache.cells else v.replace('-', ' ')} (n={n[v]})" for v in order]
        y = np.arange(len(order))
        fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 0.32 * len(order) + 1.2), sharey=True)
        left.barh(y, mean.loc[order, "reflections_per_response"], xerr=sd.reindex(order)["reflections_per_response"],
                  color="#c9d6ea", edgecolor="#1f5fa8", hatch="//", error_kw={"lw": 0.8})  # fmt: skip
        left.set_yticks(y, labels, fontsize=7)
        left.invert_yaxis()
        left.set_xlabel("reflection words per response")
        for i, (col, name) in enumerate((("accuracy_with", "with a reflection word"),
                                         ("accuracy_without", "without"))):  # fmt: skip
            st = _style(i)
            right.plot(mean.loc[order, col] * 100, y, ls="none", marker=st["marker"], color=st["color"], ms=5,
                       label=f"responses {name}")  # fmt: skip
        right.set_xlabel("accuracy (%)")
        right.set_title(str(setting), fontsize=9)
        _legend(right)
        responses = int(d.responses.max())
        out.append(_save(fig, out_dir, f"behaviour_{setting}",
                         f"What the students say on {setting}: Relay-OPD's reflection words (Wait, But, Hmm, ...) per "
                         f"response of each final model (bars: mean ± SD over its n seeds), and its accuracy on the "
                         f"responses that hold one against those that do not (mean over seeds; {responses} responses a "
                         "run, every benchmark's evaluation samples). A student that copies the habit without the "
                         "skill says more of them and is no more accurate where it does.", ))  # fmt: skip
    return out


def reflection_figures(paths: list[Path], out_dir: Path) -> list[dict]:
    """Per setting: each teacher's probability of a reflection word after the initial student's right
    and wrong steps (mean ± SD over seeds)."""
    df = _read_analysis(paths, ["setting", "teacher", "seed", "after", "judged", "p_reflect"])
    out = []
    names = {
        "initial": "initial\nteacher",
        "scout": "SCOUT's\ntrained teacher",
        "control": "prefix-0\ncontrol's teacher",
    }
    for setting, d in df.groupby("setting", sort=False):
        judged = "step" if (d.judged == "step").any() else "response"
        d = d[d.judged == judged]
        per_seed = d.groupby(["teacher", "seed", "after"]).p_reflect.mean().unstack("after") * 100
        teachers = [t for t in names if t in per_seed.index.get_level_values(0)]
        afters = [a for a in ("right", "wrong") if a in per_seed.columns]
        if not teachers or not afters:
            continue
        fig, ax = plt.subplots(figsize=(4.8, 3.0))
        width = 0.8 / len(afters)
        for i, after in enumerate(afters):
            m = [per_seed.loc[t, after].mean() for t in teachers]
            e = [per_seed.loc[t, after].std(ddof=1) if len(per_seed.loc[t]) > 1 else 0.0 for t in teachers]
            colour = _style(i)["color"]
            ax.bar(np.arange(len(teachers)) + (i - (len(afters) - 1) / 2) * width, m, width, yerr=e,
                   color=colour if after == "wrong" else "white", edgecolor=colour, hatch="" if after == "wrong" else "//",
                   label=f"after a {after} {'step' if judged == 'step' else 'response'}", error_kw={"lw": 0.8})  # fmt: skip
        seeds = {t: len(per_seed.loc[t]) for t in teachers}
        ax.set_xticks(np.arange(len(teachers)), [f"{names[t]} (n={seeds[t]})" for t in teachers], fontsize=7)
        ax.set_ylabel("P(next token is a reflection word) (%)")
        ax.set_title(str(setting), fontsize=9)
        _legend(ax)
        points = d[(d.teacher == "initial")].groupby("after").size().to_dict()
        where = ("after each step of the initial student's responses, right (on the problem's worked path) or wrong"
                 if judged == "step" else "at each paragraph boundary of the initial student's responses, by whether "
                 "the response's final answer is right (steps cannot be judged on this benchmark)")  # fmt: skip
        out.append(_save(fig, out_dir, f"reflection_{setting}",
                         f"How likely each teacher is to reflect (Wait, But, Hmm, ...) {where}, on {setting}: mean ± SD "
                         f"over n trained seeds ({', '.join(f'{k}: {v}' for k, v in points.items())} positions). "
                         "A teacher that learned to catch the student's errors reflects more after wrong steps; one "
                         "that learned a habit reflects more everywhere.", ))  # fmt: skip
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
    train_dir = analysis_dir.parent / "train"
    curves = training_curves(cache, train_dir, out_dir)
    figs += curves
    if not curves:
        notices.append(f"training curves skipped: no training logs ({train_dir}/*/*/s*/metrics.jsonl)")
    scout_settings = [s for s in cfg["settings"] if cache.seeds.get((s, "scout"))]
    made = teacher_update_figures(cache, train_dir, scout_settings, out_dir)
    figs += made
    if scout_settings and not made:
        notices.append("figure teacher updates skipped: no SCOUT training logs (train/*/scout/s*/metrics.jsonl)")
    for setting in tuning.tuned_settings(cfg):
        fig = tuning_figure(analysis_dir.parent, setting, out_dir)
        if fig:
            figs.append(fig)
        else:
            notices.append(f"figure learning-rate sensitivity ({setting}) skipped: its searches have not chosen")
    behaviour = summary_dir(cfg) / "behaviour.csv"
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
                st = _style(j + 1)
                ax.plot([imp.tasks[t]], [y + 0.34], marker=st["marker"], color=st["color"], ms=5, ls="none",
                        label=t if i == 0 else None)  # fmt: skip
    ax.axvline(0.5, color="#888", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), [r.label for r in reversed(rows)], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_xlabel("P(a run of the first beats a run of the second on the same setting)")
    _legend(ax)
    n = "; ".join(f"{r.label}: {len(r.improvement.tasks)} settings, "
                  f"{sum(len(a) for a, _ in r.improvement.runs.values())} and "
                  f"{sum(len(b) for _, b in r.improvement.runs.values())} runs" for r in rows)  # fmt: skip
    return _save(fig, out_dir, "improvement",
                 "Probability of improvement across settings (rliable; Agarwal et al., 2021): the chance that a run of "
                 "the first method scores a higher final Avg than a run of the second on the same setting, averaged "
                 "over settings; bar: its 95% stratified-bootstrap interval (runs resampled within each method and "
                 f"setting); marks above it: each setting's own value; dashed: no difference ({n}).")  # fmt: skip
