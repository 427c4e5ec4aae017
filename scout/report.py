"""Cached results -> every table and figure of the paper -> one compiled PDF.

Reads only the cache (``results.load``): it never trains or evaluates, so it can run on a laptop
from imported numbers as well as after the grid. Whatever is missing renders as ``--`` and is
listed at the end of the PDF and in ``manifest.json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from scout import claims, grid, results, tables
from scout.figures import all_figures

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


def missing_evaluations(config: dict, df) -> list[str]:
    """Evaluation units of the grid without a full set of cached records, as readable lines."""
    have = set()
    if len(df):
        have = set(zip(df.setting, df.variant, df.seed.astype(str), df.checkpoint, df.benchmark, strict=True))
    out = []
    for setting, variant, seed, ckpt in grid.report_units(config):
        benches = grid.benchmarks_for(config, config["settings"][setting]["domain"])
        gone = [b for b in benches if (setting, variant, str(seed), ckpt, b) not in have]
        if gone:
            what = "all benchmarks" if len(gone) == len(benches) else ", ".join(gone)
            out.append(f"{setting}/{variant}/s{seed}/{ckpt}: {what}")
    return out


_VERDICT_TEX = {
    claims.HOLDS: r"\textcolor{green!45!black}{holds}",
    claims.FAILS: r"\textcolor{red!70!black}{does not hold}",
    claims.UNMEASURED: r"\textcolor{gray}{not measured}",
}


def claims_page(env, found: list, alpha: float) -> str:
    """The first page: one row per claim with its statistic, test, p and verdict."""
    rows = [
        {
            "claim": tables.tex(c.claim),
            "setting": tables.tex(c.setting),
            "statistic": tables.tex(c.statistic or c.why),
            "test": tables.tex(c.test),
            "p": tables.p_text(c.p),
            "verdict": _VERDICT_TEX[c.verdict],
        }
        for c in found
    ]
    counts = claims.summary(found)
    return env.get_template("claims.tex.j2").render(
        claims=rows,
        alpha=f"{alpha:g}",
        counts={"holds": counts[claims.HOLDS], "fails": counts[claims.FAILS], "unmeasured": counts[claims.UNMEASURED]},
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


def build(config: dict, out_dir: str | Path | None = None, pdf: bool | str | None = None, log=print) -> dict:
    """Render the report into ``out_dir`` (default ``{results}/report``); returns the manifest.

    ``pdf``: True compiles the PDF (and fails without TeX), False does not, ``"auto"`` compiles it
    where pdflatex is installed and otherwise says what to install, in the log and the manifest."""
    t0 = time.perf_counter()
    opts = settings(config)
    pdf = opts["pdf"] if pdf is None else pdf
    root = results.results_dir(config)
    out = Path(out_dir) if out_dir else root / "report"
    (out / "tables").mkdir(parents=True, exist_ok=True)
    damaged: list = []
    df = results.load(config, damaged)
    for d in damaged:  # left out, each named with the command that remakes it
        log(f"damaged: {d}")
    cache = tables.Cache(config, df, test=opts["test"], alpha=opts["alpha"], baseline=opts["baseline"])

    env = tables.environment()
    made = tables.all_tables(cache)
    for t in made:
        (out / "tables" / f"{t['name']}.tex").write_text(tables.render(t, env))
    figs, notices = all_figures(cache, root / "analysis", out / "figures")
    found = claims.all_claims(cache, root / "analysis", opts["alpha"])
    for n in notices:
        log(f"notice: {n}")
    missing = missing_evaluations(config, df)
    n_expected = sum(
        len(grid.benchmarks_for(config, config["settings"][s]["domain"])) for s, *_ in grid.report_units(config)
    )
    sources = df.source.value_counts().to_dict() if len(df) else {}
    items = [{"kind": "table", "name": t["name"]} for t in made] + [{"kind": "figure", **f} for f in figs]
    doc = env.get_template("report.tex.j2").render(
        r={
            "world": tables.tex(config["world"]),
            "records": len(df),
            "sources": ", ".join(f"{n} {s}" for s, n in sources.items()) or "none",
            "expected": n_expected,
            "missing_units": len(missing),
            "missing": [tables.tex(m) for m in missing],
            "test": "Welch $t$-test" if opts["test"] == "welch" else "random-effects $z$-test",
            "baseline": tables.tex(cache.label(opts["baseline"])),
            "alpha": f"{opts['alpha']:g}",
            "n_tables": len(made),
            "n_figures": len(figs),
            "notices": [tables.tex(n) for n in notices],
            "entries": items,
            "claims": claims_page(env, found, opts["alpha"]),
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
        "claims": claims.as_records(found),
        "pdf": None,
    }
    if pdf == "auto" and missing_tex():
        manifest["pdf_skipped"] = f"{missing_tex()}; tables and figures are written, the PDF is not"
        log(f"warning: {manifest['pdf_skipped']}")
    elif pdf:
        manifest["pdf"] = str(compile_pdf(tex_path, log))
    manifest["seconds"] = round(time.perf_counter() - t0, 2)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log(
        f"report: {len(made)} tables, {len(figs)} figures from {len(df)} records "
        f"({len(missing)} evaluations missing) -> {out} in {manifest['seconds']:.1f}s"
    )
    return manifest
