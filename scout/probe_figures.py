"""Figures of the teacher probes (the analysis stage) and of the runs' reflection behaviour.

Inputs: ``analysis/{setting}/continuation.csv`` (teacher continuation accuracy per prefix ratio),
``entropy.csv`` (the teacher's token entropy along responses, with ``count`` responses a position),
``reflection.csv`` (each teacher's probability of a reflection word after the student's steps), and
``summary/behaviour.csv`` (each run's reflection words per response, accuracy with and without).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scout import jobs
from scout.plotting import band, legend, plt, save, style
from scout.results import Cache

CONTINUATION_COLUMNS = ["setting", "teacher", "prefixes", "prefix_ratio", "accuracy", "prefix_tokens"]
ENTROPY_COLUMNS = ["setting", "teacher", "context", "position", "entropy"]



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
    band(ax, per_seed.index.to_numpy() * 100, per_seed.mean(axis=1).to_numpy(), sd, style, f"{label} (n={n})")
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
        _curve(ax, student[student.teacher == "initial"], "initial teacher, student prefixes", style(1))
        _curve(ax, d[(d.teacher == "initial") & (d.prefixes == "own")], "initial teacher, own prefixes", style(6))
        seeds = _curve(ax, student[student.teacher == "scout"], "SCOUT teacher, student prefixes", style(0))
        _curve(ax, student[student.teacher == "control"], "prefix-0 control's teacher", style(2))
        ax.set_title(str(setting), fontsize=9)
        legend(ax)
        committed = ""
        if "committed" in d:
            share = (
                d[(d.teacher == "initial") & (d.prefixes == "initial-student")].groupby("prefix_ratio").committed.mean()
            )
            committed = "; prefixes that already hold the final answer: " + ", ".join(
                f"{r:.0%}: {c:.0%}" for r, c in share.items()
            )  # fmt: skip
        out.append(save(fig, out_dir, f"continuation_{setting}",
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
                _curve(ax, at[at.teacher == "initial"], f"initial teacher, {ckpt} student", style(i))
                _curve(ax, at[at.teacher == trained], f"SCOUT teacher at {ckpt}", style(i + 1))
                i += 2
            ax.set_title(f"{setting}: matched checkpoints", fontsize=9)
            legend(ax)
            out.append(save(fig, out_dir, f"continuation_matched_{setting}",
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
                st = {**style(i), "marker": None}
                band(ax, g.index.to_numpy(), mean.to_numpy(), spread.to_numpy(), st,
                      f"{context} responses (n={int(g['count'].max())})")  # fmt: skip
                counts.append(f"{teacher}/{context}: {int(g['count'].max())}")
            ax.set_title(f"teacher: {teacher}", fontsize=9)
            ax.set_xlabel("response position (tokens)")
        axes[0][0].set_ylabel("teacher token entropy (nats)")
        legend(axes[0][-1])
        out.append(save(fig, out_dir, f"entropy_{setting}",
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
            st = style(i)
            right.plot(mean.loc[order, col] * 100, y, ls="none", marker=st["marker"], color=st["color"], ms=5,
                       label=f"responses {name}")  # fmt: skip
        right.set_xlabel("accuracy (%)")
        right.set_title(str(setting), fontsize=9)
        legend(right)
        responses = int(d.responses.max())
        out.append(save(fig, out_dir, f"behaviour_{setting}",
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
            colour = style(i)["color"]
            ax.bar(np.arange(len(teachers)) + (i - (len(afters) - 1) / 2) * width, m, width, yerr=e,
                   color=colour if after == "wrong" else "white", edgecolor=colour, hatch="" if after == "wrong" else "//",
                   label=f"after a {after} {'step' if judged == 'step' else 'response'}", error_kw={"lw": 0.8})  # fmt: skip
        seeds = {t: len(per_seed.loc[t]) for t in teachers}
        ax.set_xticks(np.arange(len(teachers)), [f"{names[t]} (n={seeds[t]})" for t in teachers], fontsize=7)
        ax.set_ylabel("P(next token is a reflection word) (%)")
        ax.set_title(str(setting), fontsize=9)
        legend(ax)
        points = d[(d.teacher == "initial")].groupby("after").size().to_dict()
        where = ("after each step of the initial student's responses, right (on the problem's worked path) or wrong"
                 if judged == "step" else "at each paragraph boundary of the initial student's responses, by whether "
                 "the response's final answer is right (steps cannot be judged on this benchmark)")  # fmt: skip
        out.append(save(fig, out_dir, f"reflection_{setting}",
                         f"How likely each teacher is to reflect (Wait, But, Hmm, ...) {where}, on {setting}: mean ± SD "
                         f"over n trained seeds ({', '.join(f'{k}: {v}' for k, v in points.items())} positions). "
                         "A teacher that learned to catch the student's errors reflects more after wrong steps; one "
                         "that learned a habit reflects more everywhere.", ))  # fmt: skip
    return out
