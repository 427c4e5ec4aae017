"""How the claims page reads: each row's effect and interval, the effect it can detect, its test and
p as text, a strip of its runs, the sentence on the families of tests, the caveats of the settings,
the view across settings, and the page itself as LaTeX (``templates/claims.tex.j2``). The HTML page
and the console summary (``scout.report``) use the same texts."""

from __future__ import annotations

import html

from scout import render, tuning, verdicts
from scout.across import across_records
from scout.grid import Grid

_VERDICT_TEX = {
    verdicts.HOLDS: r"\textcolor{green!45!black}{holds}",
    verdicts.SMALLER: r"\textcolor{green!35!orange!80!black}{holds, smaller than the paper's}",
    verdicts.BELOW: r"\textcolor{red!50!orange}{below the paper's effect}",
    verdicts.FAILS: r"\textcolor{red!70!black}{does not hold}",
    verdicts.INCONCLUSIVE: r"\textcolor{orange!80!black}{inconclusive}",
    verdicts.UNMEASURED: r"\textcolor{gray}{not measured}",
}


def effect_text(c) -> str:
    """The effect with its interval, e.g. ``+2.1 [-0.4, 4.6]``; -- when not measured."""
    if c.effect != c.effect:
        return "--"
    return (
        f"{c.effect:+.1f} [{c.low:+.1f}, {c.high:+.1f}]"
        if abs(c.effect) >= 0.1 or c.unit == verdicts.SEEDS_UNIT
        else f"{c.effect:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"
    )


def detectable_text(c) -> str:
    """The smallest effect the row's test detects (an on-a-par row: the narrowest margin it shows),
    with a dagger where the paper's effect (the margin) is smaller (two significant digits below
    0.1, so that a small one never reads as 0.0)."""
    if c.detectable != c.detectable:
        return "--"
    text = f"{c.detectable:.1f}" if c.detectable >= 0.095 else f"{c.detectable:.2g}"
    if c.kind == "on_par" and c.margin is not None:
        text = f"\u00b1{text} (margin \u00b1{c.margin:.1f})"
    return text + ("" if c.resolvable else " \u2020")


def p_text(c) -> str:
    """The row's p in the paper's direction (TOST's for an on-a-par row), adjusted for its family."""
    if c.p != c.p:
        return ""
    name = "TOST p" if c.kind == "on_par" else "p"
    return f"{name} = {_p(c.p)}, adjusted {_p(c.p_adj)}" if c.p_adj == c.p_adj else f"{name} = {_p(c.p)}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def scope_text(g: Grid) -> str:
    """What the page covers: the whole toy or paper grid, or the selection a run made of it."""
    return g.report.scope or f"the {g.paths.world} grid"


def strip_svg(arms: tuple, width: int = 200, height: int = 34) -> str:
    """The run-level points of a claim's two arms on one axis (means as ticks), as inline SVG: the
    evidence behind the row, without leaving it."""
    if not arms or not all(values for _, values in arms):
        return ""
    values = [v for _, vs in arms for v in vs]
    lo, hi = min(values), max(values)
    pad = max(0.5, 0.08 * (hi - lo))
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return 6 + (width - 12) * (v - lo) / (hi - lo)

    parts, colours = [], ("#1f5fa8", "#888")
    for i, ((_, vs), colour) in enumerate(zip(arms, colours, strict=True)):
        y = 9 + i * 15
        mean = sum(vs) / len(vs)
        parts.append(
            f'<line x1="{x(mean):.1f}" x2="{x(mean):.1f}" y1="{y - 6}" y2="{y + 6}" stroke="{colour}" stroke-width="2"/>'
        )
        parts += [f'<circle cx="{x(v):.1f}" cy="{y}" r="3.6" fill="{colour}" fill-opacity="0.55"/>' for v in vs]
    title = "; ".join(f"{label}: {', '.join(f'{v:.1f}' for v in vs)}" for label, vs in arms)
    return (f'<svg class="strip" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f"<title>{html.escape(title)} (range {lo + pad:.1f}-{hi - pad:.1f})</title>{''.join(parts)}</svg>")  # fmt: skip


def family_text(found: list, alpha: float, primary_on: tuple[str, ...] = ()) -> str:
    """How many tests the page makes, in which families, at which levels, and what the page as a
    whole guarantees (``primary_on``: the settings the primary family is tested on)."""
    f = verdicts.page_summary(found, alpha)
    if not f["tests"]:
        return "Nothing is measured yet, so the page makes no test."
    tail = ("Each interval is two-sided at 1 - 2L (L its row's level), so each end is a one-sided bound at L; each p "
            "is one-sided in the paper's direction (an on-a-par row's is TOST's) and shown adjusted for its family "
            f"(Bonferroni). Detectable: the smallest effect a test finds with {f['power']:.0%} power at its level and "
            "the measured spread (noncentral t), for an on-a-par row the narrowest margin its TOST shows when the "
            f"arms are equal; \u2020 marks the {f['unresolvable']} rows whose paper effect (or margin) is smaller, "
            "which this grid cannot resolve.")  # fmt: skip
    if len(f["families"]) == 1:
        return (f"This page makes {f['tests']} tests. So that the chance of any wrong verdict on it is at most "
                f"{alpha:g} (family-wise, Bonferroni), each is made at L = {alpha:g}/{f['tests']} = {f['level']:.4f}. "
                + tail)  # fmt: skip
    where = f" on {', '.join(primary_on)}" if primary_on else ""
    names = {verdicts.PRIMARY: f"the primary family, the paper's headline comparisons{where}",
             verdicts.SECONDARY: "the secondary family, every other row"}  # fmt: skip
    parts = [f"{names[g['name']]} ({g['tests']} tests, each at {alpha:g}/{g['tests']} = {g['level']:.4f})"
             if g["tests"] != 1 else f"{names[g['name']]} (1 test, at {alpha:g})" for g in f["families"]]  # fmt: skip
    return (f"This page makes {f['tests']} tests in {len(parts)} families, each holding its chance of any wrong "
            f"verdict at most {alpha:g} (family-wise, Bonferroni within the family): {'; '.join(parts)}. The page as "
            f"a whole holds at most {f['page_alpha']:g} (the families' sum). " + tail)  # fmt: skip


def test_text(c) -> str:
    """The row's unit, the test that decided, its family and level, its p, and for a paired row the
    paper's Welch test beside it (interval and p at the same level)."""
    text = f"{c.unit}; {c.test}" if c.test else c.unit
    if c.level == c.level:
        text += f"; {c.family}, at L = {c.level:.4f}"
        if c.kind == "on_par" and c.margin is not None:
            text += f"; TOST at \u00b1{c.margin:.1f}"
        text += f"; {p_text(c)}"
        if c.power == c.power:
            what = f"the margin \u00b1{c.margin:.1f} when the arms are equal" if c.kind == "on_par" else "the paper's effect"
            text += f"; power {c.power:.2f} at {what}"
    if c.welch_low == c.welch_low:
        text += f"; Welch beside it: [{c.welch_low:+.1f}, {c.welch_high:+.1f}], p = {_p(c.welch_p)}"
    return text


def caveats(g: Grid, found: list) -> list[tuple[str, str]]:
    """(setting, caveat) for each setting on the claims page whose config says what to know first,
    and for each tuned one, what its tuning gave SCOUT that OPD did not have."""
    shown = [s for s in dict.fromkeys(c.setting for c in found) if s in g.settings]
    out = [(s, g.settings[s].caveat) for s in shown if g.settings[s].caveat]
    return out + [(s, tuning_note(g.config, s)) for s in shown if tuning.tuned_params(g.config["settings"][s])]


def tuning_note(config: dict, setting: str) -> str:
    """How a tuned setting's LRs were chosen, said on the claims page."""
    params = tuning.tuned_settings(config).get(setting, [])
    lr = {p: tuning.lr(config, setting, p) for p in params}
    said = {p: (f"{lr[p]:g}" if lr[p] != tuning.TUNED else "not chosen yet") for p in params}
    parts = []
    if "student_lr" in params:
        n = len(tuning.search_grid(config, "student_lr"))
        parts.append(f"the student LR was searched on OPD over {n} values ({said['student_lr']})")
    if "teacher_lr" in params:
        parts.append(f"SCOUT's teacher LR over {len(tuning.search_grid(config, 'teacher_lr'))} values at that student LR "
                     f"({said['teacher_lr']})")  # fmt: skip
    if "teacher_lora_lr" in params:
        parts.append(f"the LoRA teacher's LR over {len(tuning.search_grid(config, 'teacher_lora_lr'))} values at that "
                     f"student LR ({said['teacher_lora_lr']})")  # fmt: skip
    extra = (" So SCOUT had one more tuned hyperparameter than OPD, as in the paper." if "teacher_lr" in params
             else "")  # fmt: skip
    return ("its learning rates were chosen on a validation set held out from training and test (the "
            f"sensitivity figure): {'; '.join(parts)}.{extra} The chosen points' seed-1 runs are the search's own "
            "winners, so their scores lean a little high (a winner's curse on the validation set, not the test); "
            "the other seeds are fresh draws.")  # fmt: skip


def across_rows(across: list) -> list[dict]:
    """The across-settings view as text: each comparison's probability of improvement, its interval,
    and what it is over (``across`` holds scout.across.Across objects or their manifest records)."""
    out = []
    for r in across:
        r = r if isinstance(r, dict) else across_records([r])[0]
        if r["point"] is None:
            continue
        runs = r["runs"]
        over = (f"{len(runs)} setting{'s' if len(runs) != 1 else ''}, "
                f"{sum(len(a) for a, _ in runs.values())} and {sum(len(b) for _, b in runs.values())} runs")  # fmt: skip
        per = "; ".join(f"{t}: {v:.2f}" for t, v in r["tasks"].items())
        interval = f"[{r['low']:.2f}, {r['high']:.2f}]" if r["low"] is not None else "[no interval: one run each]"
        out.append({"label": r["label"], "point": f"{r['point']:.2f}", "interval": interval, "over": over,
                    "settings": per, "level": f"{100 * r['level']:.0f}%"})  # fmt: skip
    return out


def claims_page(env, found: list, alpha: float, notes: list[tuple[str, str]] = (), primary_on: tuple[str, ...] = (),
                across: list = ()) -> str:  # fmt: skip
    """The first page: what to know first, then one row per claim with its effect, bounds, the
    paper's number and verdict."""
    rows = [
        {
            "claim": render.tex(c.claim),
            "setting": render.tex(c.setting),
            "statistic": render.tex(c.statistic or c.why),
            "effect": render.tex(effect_text(c)),
            "paper": "--" if c.paper is None else f"{c.paper:+.1f}",
            "detectable": render.tex(detectable_text(c)).replace("\u2020", r"$\dagger$"),
            "test": render.tex(test_text(c)),
            "note": render.tex(c.note),
            "verdict": _VERDICT_TEX[c.verdict],
        }
        for c in found
    ]
    counts = verdicts.summary(found)
    return env.get_template("claims.tex.j2").render(
        claims=rows,
        across=[{k: render.tex(v) for k, v in r.items()} for r in across_rows(across)],
        caveats=[{"setting": render.tex(k), "text": render.tex(v)} for k, v in notes],
        family=render.tex(family_text(found, alpha, primary_on)).replace("\u2020", r"$\dagger$"),
        counts=", ".join(f"{counts[v]} {render.tex(v)}" for v in verdicts.VERDICTS),
    )
