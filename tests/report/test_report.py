"""The report: CSV import, table rendering, partial grids, figures and the compiled PDF."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scout import analysis, config_tables, jobs, results, tables
from scout.cli import main as scout_main
from scout.config import ConfigError, validate
from scout.grid import Grid
from scout.paths import Paths
from scout.report import ReportError, build
from tests.support.records import fake_records, toy, write_analysis
from tests.support.toy import REPO, tex_available


def write_csv(path: Path, rows: list[str], header: str = "setting,method,run,benchmark,mean,sem") -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


GOOD = [
    "toy-l-s-math,opd,1,tm-easy,0.50,0.01",
    "toy-l-s-math,opd,2,tm-easy,0.52,0.01",
    "toy-l-s-math,scout,1,tm-easy,0.61,0.02",
    "toy-mg-s-math,scout-f3,3,tm-hard,0.40,0.02",
    "toy-l-s-math,base-student,1,tm-long,0.10,0.03",
]


# ------------------------------------------------------------------------------------------------
# Import
# ------------------------------------------------------------------------------------------------


def imported_files(cfg: dict) -> list[Path]:
    return sorted((Path(cfg["results"]) / "imported").rglob("*.json"))


def test_import_round_trip(tmp_path):
    cfg = toy(tmp_path)
    recs = results.parse_import(Grid.of(cfg), write_csv(tmp_path / "x.csv", GOOD))
    written = results.write_imported(Grid.of(cfg).paths, recs)
    assert len(written) == 5 and all(p.exists() for p in written)
    df = results.load(Grid.of(cfg)).set_index(["variant", "seed", "benchmark"])
    assert df.loc[("scout", 1, "tm-easy"), "mean"] == pytest.approx(0.61)
    assert df.loc[("scout-f3", 3, "tm-hard"), "method"] == "scout"  # run 3 -> the variant's third seed
    assert df.loc[("base-student", 0, "tm-long"), "sem"] == pytest.approx(0.03)  # base rows: seed 0
    assert set(df.source) == {"imported"}
    rec = json.loads(written[0].read_text())
    assert rec["origin"] == "x.csv:2" and rec["repeats"] == cfg["benchmarks"]["tm-easy"]["repeats"]


def test_import_percent_scale(tmp_path):
    cfg = toy(tmp_path)
    csv = write_csv(tmp_path / "p.csv", ["toy-l-s-math,opd,1,tm-easy,51.5,0.9"])
    with pytest.raises(
        results.ImportRefused, match=r"p.csv:2: mean 51.5 is outside \[0, 1\] \(percentages\? use --scale percent\)"
    ):
        results.parse_import(Grid.of(cfg), csv)
    (rec,) = results.parse_import(Grid.of(cfg), csv, scale="percent")
    assert rec["mean"] == pytest.approx(0.515) and rec["sem"] == pytest.approx(0.009)


@pytest.mark.parametrize(
    "row, reason",
    [
        ("toy-x,opd,1,tm-easy,0.5,0.01", "unknown setting 'toy-x'"),
        ("toy-l-s-math,opd_v2,1,tm-easy,0.5,0.01", "unknown method 'opd_v2' for setting 'toy-l-s-math'"),
        ("toy-l-s-math,opd,1,tc-easy,0.5,0.01", "unknown benchmark 'tc-easy' for the math setting"),
        ("toy-l-s-math,opd,0,tm-easy,0.5,0.01", "run '0' is not a positive integer"),
        ("toy-mg-s-math,scout-f1,4,tm-easy,0.5,0.01", r"run 4: scout-f1 on toy-mg-s-math has 3 run\(s\)"),
        ("toy-l-s-math,opd,1,tm-easy,abc,0.01", "mean 'abc' is not a number"),
        ("toy-l-s-math,opd,1,tm-easy,0.5,", "sem '' is not a number"),
        ("toy-l-s-math,opd,1,tm-easy,nan,0.01", "mean 'nan' is not a finite number"),
        ("toy-l-s-math,opd,1,tm-easy,0.5,-0.1", r"sem -0.1 is outside \[0, 1\]"),
        ("toy-l-s-math,opd,1,tm-easy,0.7,0.01", r"bad.csv:7: duplicate of line 2"),
    ],
)
def test_import_refuses_bad_rows_and_writes_nothing(tmp_path, row, reason):
    cfg = toy(tmp_path)
    csv = write_csv(tmp_path / "bad.csv", GOOD + [row])
    with pytest.raises(results.ImportRefused) as err:
        results.parse_import(Grid.of(cfg), csv)
    msg = str(err.value)
    assert msg.startswith("nothing imported")
    assert re.search(reason, msg), msg
    assert re.search(r"bad\.csv:7: ", msg)  # file and line of the offending row
    assert imported_files(cfg) == []


def test_import_cli_names_file_line_and_leaves_nothing(tmp_path, capsys):
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(toy(tmp_path)))
    bad = write_csv(
        tmp_path / "bad.csv", GOOD + ["toy-l-s-math,opd,1,tm-easy,0.5"], header="setting,method,run,benchmark,mean"
    )
    with pytest.raises(SystemExit, match=r"bad.csv:1: missing column\(s\) sem"):
        scout_main(["import-results", str(bad), "--configfile", str(cfg_file)])
    good = write_csv(tmp_path / "good.csv", GOOD)
    assert scout_main(["import-results", str(good), "--configfile", str(cfg_file)]) == 0
    assert "imported 5 records (5 runs)" in capsys.readouterr().out
    # importing the same runs again needs --replace
    with pytest.raises(SystemExit, match="were imported before.*--replace"):
        scout_main(["import-results", str(good), "--configfile", str(cfg_file)])
    changed = write_csv(tmp_path / "good.csv", [GOOD[0].replace("0.50", "0.55")])
    assert scout_main(["import-results", str(changed), "--configfile", str(cfg_file), "--replace"]) == 0
    df = results.load(Grid.of(toy(tmp_path)))
    own = df[df.shared_with.isna()]  # the rest: cells that report these runs too (scout-cm s1 is scout s1)
    assert len(own) == 5 and own[(own.variant == "opd") & (own.seed == 1)]["mean"].item() == pytest.approx(0.55)


def test_write_imported_rolls_back_on_failure(tmp_path, monkeypatch):
    cfg = toy(tmp_path)
    recs = results.parse_import(Grid.of(cfg), write_csv(tmp_path / "x.csv", GOOD))
    real = results.os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(src, dst)

    monkeypatch.setattr(results.os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        results.write_imported(Grid.of(cfg).paths, recs)
    assert imported_files(cfg) == []


def test_own_evaluation_wins_over_import(tmp_path):
    cfg = toy(tmp_path)
    g = Grid.of(cfg)
    results.write_imported(g.paths, results.parse_import(g, write_csv(tmp_path / "x.csv", GOOD[:1])))
    fake_records(cfg, skip=lambda u: u[:3] != ("toy-l-s-math", "opd", "1"))
    df = results.load(Grid.of(cfg))
    row = df[(df.variant == "opd") & (df.seed == 1) & (df.benchmark == "tm-easy") & (df.checkpoint == "final")]
    assert len(row) == 1 and row.source.item() == "eval"


def test_unreadable_record_is_named(tmp_path):
    cfg = toy(tmp_path)
    bad = Path(cfg["results"]) / "eval/toy-l-s-math/opd/s1/final/tm-easy.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"setting": "toy-l-s-math"}')
    with pytest.raises(ValueError, match=r"tm-easy.json: not an evaluation record \(missing variant"):
        results.load(Grid.of(cfg))


def test_a_damaged_record_is_one_line_in_the_report_and_left_out(tmp_path):
    cfg = toy(tmp_path)
    fake_records(cfg)
    bad = Path(Paths.of(cfg).eval_dir("toy-l-s-math", "opd", 1, "final")) / "tm-easy.json"
    bad.write_text(bad.read_text()[:20])  # truncated
    lines = []
    manifest = build(cfg, pdf=False, log=lines.append)
    damaged = [line for line in lines if line.startswith("damaged: ")]
    assert damaged == [f"damaged: {bad}: unreadable evaluation record ({manifest['damaged'][0].split('(', 1)[1]}"]
    assert f"remake it: snakemake --cores 1 --force -- {bad}" in damaged[0]
    assert "toy-l-s-math/opd/s1/final: tm-easy" in manifest["missing"]


# ------------------------------------------------------------------------------------------------
# Formatting and tables
# ------------------------------------------------------------------------------------------------


def test_one_table_model_two_renderers():
    """The same entries as LaTeX and as HTML: bold for best, underline for second, a small ± term,
    shaded significant p-values, and -- for what is missing."""
    from scout.render import html, label, lr_entry, p_entry, tex

    cases = [
        (tables.value(33.8249, 3.031), r"\res{33.8}{3.0}", '33.8<span class="pm">±3.0</span>'),
        (tables.value(35.76, 2.83, 2, "best"), r"\bestres{35.76}{2.83}", '<span class="best">35.76<span class="pm">±2.83</span></span>'),
        (tables.value(73.93, None, 2, "second"), r"\secondval{73.93}", '<span class="second">73.93</span>'),
        (tables.value(float("nan"), 1.0), "--", '<span class="na">--</span>'),
        (p_entry(0.039149, shade=True), r"\cellcolor{hl}$0.0391$", '<span class="sig">0.0391</span>'),
        (p_entry(0.00042), "$<0.001$", "<span>&lt;0.001</span>"),
        (lr_entry(2.5e-6), r"$2.5{\times}10^{-6}$", "2.5×10<sup>-6</sup>"),
        (label("SCOUT", bold=True, note="(2/3 runs)"), r"\textbf{SCOUT} {\scriptsize (2/3 runs)}",
         '<strong>SCOUT</strong> <small class="note">(2/3 runs)</small>'),
    ]  # fmt: skip
    for entry, latex, page in cases:
        assert (tex(entry), str(html(entry))) == (latex, page)
    assert [tex(p_entry(p)) for p in (0.80312, 0.5, 0.0151)] == ["$0.803$", "$0.500$", "$0.0151$"]
    assert tex("prune_opd & 50% → ±") == r"prune\_opd \& 50\% $\rightarrow$ $\pm$"
    assert str(html("a < b & c")) == "a &lt; b &amp; c"


def test_partial_grid_shows_gaps_and_run_counts(tmp_path):
    cfg = toy(tmp_path)
    # SCOUT lost its third run on toy-l-s-math; OPD lost tm-hard of its second run
    fake_records(cfg, skip=lambda u: u[:3] == ("toy-l-s-math", "scout", "3"))
    (Path(Paths.of(cfg).eval_dir("toy-l-s-math", "opd", 2, "final")) / "tm-hard.json").unlink()
    cache = results.Cache(Grid.of(cfg), results.load(Grid.of(cfg)))
    (main,) = [t for t in tables.main_tables(cache) if t["name"] == "main_toy-l-s-math"]
    text = tables.render(main)
    n = len(cache.row("toy-l-s-math", "scout").seeds)  # the headline experiment's seeds
    assert rf"\textbf{{SCOUT}} {{\scriptsize (math: {n - 1}/{n} runs)}}" in text
    per_run = next(t for t in tables.per_run_tables(cache) if t["name"] == "per_run_toy-l-s-math")
    text = tables.render(per_run)
    scout_block = text[text.index(r"\textbf{SCOUT}") :]
    assert "& Run 3 & -- & -- & -- & -- \\\\" in scout_block
    assert rf"Mean {{\scriptsize ({n - 1}/{n} runs)}}" in scout_block
    # OPD's second run has no Avg (a benchmark is missing), and its Avg aggregate uses 2 runs
    opd = cache.row("toy-l-s-math", "opd")
    m = len(opd.seeds)
    assert pd.isna(opd.run_avg.loc[2]) and opd.agg(results.AVG).n == m - 1 and opd.agg("tm-easy").n == m
    manifest = build(cfg, pdf=False, log=lambda m: None)
    assert "toy-l-s-math/scout/s3/final: all benchmarks" in manifest["missing"]
    assert "toy-l-s-math/opd/s2/final: tm-hard" in manifest["missing"]


def test_a_mean_over_fewer_runs_is_never_marked_best(tmp_path):
    cfg = toy(tmp_path)
    # SCOUT, the best method in these records, has 1 of its runs on toy-l-s-math
    fake_records(cfg, skip=lambda u: u[:2] == ("toy-l-s-math", "scout") and u[2] != "1")
    cache = results.Cache(Grid.of(cfg), results.load(Grid.of(cfg)))
    (main,) = [t for t in tables.main_tables(cache) if t["name"] == "main_toy-l-s-math"]
    text = tables.render(main)
    (scout,) = [line for line in text.splitlines() if "SCOUT" in line]
    math = scout.split(" & ")[1:5]  # its math cells (tm-easy, tm-hard, tm-long, Avg); code has 3 of 3 runs
    n = len(cache.row("toy-l-s-math", "scout").seeds)
    assert f"(math: 1/{n} runs)" in scout and not any("best" in c or "second" in c for c in math)
    assert text.count(r"\bestres{") >= 7  # every column still has a best among the complete rows


def test_empty_cache_renders_dashes(tmp_path):
    cfg = toy(tmp_path)
    manifest = build(cfg, pdf=False, log=lambda m: None)
    assert manifest["records"] == 0 and len(manifest["missing"]) == len(jobs.report_units(Grid.of(cfg)))
    text = (Path(cfg["results"]) / "report" / "tables" / "main_toy-l-s-math.tex").read_text()
    assert "--" in text and r"\res{" not in text and r"\val{" not in text
    assert any("skipped" in n for n in manifest["skipped"])


def test_config_tables(tmp_path):
    cfg = toy(tmp_path)
    hyper = tables.render(config_tables.hyper_table(Grid.of(cfg)))
    assert "Max Response Length & 128" in hyper and "Steps per Epoch & 64" in hyper
    lr = tables.render(config_tables.lr_table(Grid.of(cfg)))
    assert r"toy-medium-grpo & toy-small & Math & $1.5{\times}10^{-4}$ & $2.5{\times}10^{-4}$" in lr
    bench = tables.render(config_tables.benchmark_table(Grid.of(cfg)))
    assert r"\# Questions & 256 & 256 & 256 & 256 & 256" in bench
    assert r"\# Repeats & 16 & 16 & 16 & 10 & 10" in bench


@pytest.mark.skipif(not tex_available(), reason="pdflatex not installed")
def test_full_report_compiles_with_every_table_and_figure(tmp_path):
    from pypdf import PdfReader

    cfg = toy(tmp_path)
    fake_records(cfg)
    write_analysis(cfg)
    m = build(cfg, log=lambda msg: None)
    assert m["missing"] == [] and m["skipped"] == []
    assert len(m["tables"]) == 15  # 2 main, 3 per-run, 2+2 prefix-0/OPTR per-run, 2 summaries, f-sweep, 3 config
    assert sorted(m["figures"]) == [
        "behaviour_toy-l-s-math",
        "compute_matched_toy-l-s-math",
        "continuation_matched_toy-l-s-math",
        "continuation_toy-l-s-math",
        "entropy_toy-l-s-math",
        "improvement",
        "interval_toy-mg-s-math",
        "reflection_toy-l-s-math",
        "teacher_updates_toy-l-s-math",
        "training_reverse_KL_toy-l-s-math",
        "training_reward_toy-l-s-math",
    ]
    out = Path(cfg["results"]) / "report"
    for f in m["figures"]:
        assert (out / "figures" / f"{f}.pdf").stat().st_size > 0 and (out / "figures" / f"{f}.png").stat().st_size > 0
    pdf = PdfReader(out / "report.pdf")
    # the claims (a page or two), the summary page, one page per table and per figure, the missing results
    assert len(pdf.pages) >= 2 + len(m["tables"]) + len(m["figures"]) + 1
    text = "\n".join(p.extract_text() for p in pdf.pages)
    assert len(set(re.findall(r"Table (\d+):", text))) == len(m["tables"])
    assert len(set(re.findall(r"Figure (\d+):", text))) == len(m["figures"])
    assert "every evaluation of the grid is cached" in text


def test_report_without_tex_says_what_to_install(tmp_path, monkeypatch):
    cfg = toy(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ReportError, match="pdflatex not found: install TeX .*texlive-latex-extra"):
        build(cfg, pdf=True, log=lambda m: None)
    assert build(cfg, pdf=False, log=lambda m: None)["pdf"] is None
    # auto (the default): tables and figures, no PDF, and a warning that names the packages
    said = []
    m = build(cfg, log=said.append)
    assert m["pdf"] is None and "texlive-latex-recommended texlive-latex-extra" in m["pdf_skipped"]
    assert any(line.startswith("warning: pdflatex not found") for line in said)
    assert (Path(cfg["results"]) / "report" / "tables" / "main_toy-l-s-math.tex").exists()


def test_paper_grid_report_renders_every_table(tmp_path):
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["results"] = str(tmp_path / "results")
    fake_records(cfg)
    m = build(cfg, pdf=False, log=lambda msg: None)
    # every result the tables show: 795 final checkpoints, the LoRA experiment's 18 (3 runs x 6
    # benchmarks) and the probed SCOUT runs' step 160 (3 x 6)...
    assert m["expected_records"] == 795 + 18 + 18 and m["missing"] == []
    # ... read from 801 evaluated records and 72 that cells sharing a run report (q8b's GRPO is q4b's;
    # scout-cm s1 is scout s1); scout s1's own records at scout-cm's other 7 steps (42) stand for
    # scout-cm only, so the report counts each result it shows once
    assert m["records"] == 801 + 72 - 42 == m["expected_records"]
    assert len(m["tables"]) == 17  # 3 main, 4 per-run, 2 + 2 prefix-0 / OPTR per-run, 2 summaries, f-sweep, 3 config
    prefix0_math = (Path(cfg["results"]) / "report" / "tables" / "per_run_prefix0_math.tex").read_text()
    assert "Qwen3-4B-Instruct-2507 $\\rightarrow$ Qwen3-1.7B" in prefix0_math and "Qwen3-8B-DAPO" in prefix0_math
    fsweep = (Path(cfg["results"]) / "report" / "tables" / "fsweep_q8b-q1.7b-math.tex").read_text()
    assert [int(f) for f in re.findall(r"SCOUT \(f=(\d+)\)", fsweep)] == [1, 5, 10, 15, 20]


def test_entropy_from_the_top_log_probs_by_hand():
    from math import log

    from scout.generation import entropy_from_top

    # all the mass in the top two (1/2, 1/2): ln 2, whatever the vocabulary
    assert entropy_from_top([log(0.5), log(0.5)], 1000) == pytest.approx(log(2))
    # top (1/2, 1/4) and 1/4 spread over 2 more tokens of a 4-token vocabulary: uniform-ish,
    # H = 0.5 ln 2 + 0.25 ln 4 + 2 * 0.125 ln 8 = 1.2130
    assert entropy_from_top([log(0.5), log(0.25)], 4) == pytest.approx(1.213008, abs=1e-6)


def test_entropy_by_position_by_hand():
    # two responses of 2 and 1 tokens: position 0 averages both, position 1 only the longer
    assert analysis.by_position([[0.5, 0.25], [1.5]]) == [(0, 1.0, 2), (1, 0.25, 1)]
    assert analysis.by_position([]) == []


def test_analysis_config_is_checked(tmp_path):
    cfg = toy(tmp_path)
    cfg["analysis"]["settings"] = ["toy-l-s-code"]
    cfg["analysis"]["benchmark"] = "tm-hard"
    cfg["experiments"]["main"]["settings"] = ["toy-l-s-math", "toy-l-s-code"]
    with pytest.raises(ConfigError, match=r"analysis.benchmark: 'tm-hard' is not a code benchmark \(toy-l-s-code\)"):
        validate(cfg)
    cfg["analysis"]["settings"] = ["toy-mg-s-math"]
    cfg["experiments"]["main"]["settings"] = ["toy-l-s-math"]
    with pytest.raises(ConfigError, match="analysis.settings\\[0\\]: 'toy-mg-s-math' has no 'scout' runs"):
        validate(cfg)


def test_a_settings_caveat_is_read_first_on_the_claims_page(tmp_path):
    """The toy config's settings whose pilot found no room for the teacher phase say so above the
    claims: in the HTML page, the LaTeX claims page and the console summary; the others do not."""
    cfg = toy(tmp_path)
    assert {s for s, v in cfg["settings"].items() if v.get("caveat")} == {"toy-mg-s-math", "toy-l-s-code"}
    fake_records(cfg)
    said = []
    build(cfg, pdf=False, log=said.append)
    out = Path(cfg["results"]) / "report"
    page = (out / "index.html").read_text()
    first = page.index("Read first.")
    assert first < page.index('<table class="claims">')
    assert "<strong>toy-l-s-code</strong>: this toy setting cannot test SCOUT" in page
    assert "toy-l-s-math</strong>: this toy setting" not in page
    tex = (out / "report.tex").read_text()
    assert r"\textbf{toy-mg-s-math}: this toy setting cannot test SCOUT" in tex and "as few as 28\\%" in tex
    assert "Read first, toy-l-s-code: this toy setting cannot test SCOUT" in "\n".join(map(str, said))
    # as a job runs it (scout --log ... report): the console gets the claims and the caveats
    done = subprocess.run(
        [sys.executable, "-m", "scout.cli", "--log", str(tmp_path / "report.log"), "report", "--no-pdf",
         "--spec", json.dumps(cfg)], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Claims of the paper against this grid:\n  Read first, toy-mg-s-math: this toy setting" in done.stderr


def test_the_continuation_figures_legends_clear_their_axis_labels(tmp_path, monkeypatch):
    """A figure with a twin axis (the prefix lengths' bars) puts its legend below the axes: it
    covers neither curve nor the right axis's ticks and label."""
    from scout import probe_figures

    cfg = toy(tmp_path)
    write_analysis(cfg)
    kept = []
    monkeypatch.setattr(probe_figures, "save", lambda fig, out_dir, name, caption, **_: kept.append((name, fig)) or {})
    probe_figures.continuation_figures([Path(cfg["results"]) / "analysis" / "continuation.csv"], tmp_path)
    assert kept
    for name, fig in kept:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax, twin = fig.axes[0], fig.axes[1]
        legend = next(a.get_legend() for a in fig.axes if a.get_legend()).get_window_extent(renderer)
        for artist in (twin.yaxis.label, ax.xaxis.label, *twin.get_yticklabels()):
            box = artist.get_window_extent(renderer)
            assert not legend.overlaps(box) or box.width == 0, (name, artist)
        assert not legend.overlaps(ax.get_window_extent(renderer)), name


def test_the_page_names_its_scope_and_prints_small_detectable_effects():
    from scout import verdicts
    from scout.claims_page import detectable_text, scope_text, strip_svg
    from scout.config import select
    from tests.support.toy import toy_config

    assert scope_text(Grid.of(toy_config())) == "the toy grid"
    demo = select({**toy_config(), "select": {"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1, 2]}})
    assert scope_text(Grid.of(demo)) == "a selection of the toy grid (settings toy-l-s-math; methods opd, scout; seeds 1, 2)"
    c = verdicts.Claim(claim="c", setting="s", statistic="", test="", effect=0.01, low=0.0, high=0.02, paper=None,
                     verdict="holds", detectable=0.012)  # fmt: skip
    assert detectable_text(c) == "0.012"  # not 0.0
    svg = strip_svg((("SCOUT", [69.0, 70.0, 71.0]), ("OPD", [68.0, 69.5])))
    assert svg.startswith("<svg") and svg.count("<circle") == 5 and svg.count("<line") == 2
    assert "SCOUT: 69.0, 70.0, 71.0; OPD: 68.0, 69.5" in svg
    assert strip_svg(()) == "" and strip_svg((("a", [1.0]), ("b", []))) == ""


def test_a_settings_own_interval_reaches_the_sweep_and_the_caption(tmp_path):
    """f is read from the cells' specs, not the config's methods section: a setting that overrides
    SCOUT's interval shows its own f in the f-sweep table and in the hyperparameters' caption."""
    cfg = toy(tmp_path)
    cfg["settings"]["toy-mg-s-math"]["overrides"] = {"scout": {"interval": 5}}
    cache = results.Cache(Grid.of(cfg), results.load(Grid.of(cfg)))
    sweep = dict((v, f) for f, v in cache.interval_variants("toy-mg-s-math"))
    assert sweep == {"scout-f1": 1, "scout-f3": 3, "scout-f4": 4, "scout": 5}
    assert dict((v, f) for f, v in cache.interval_variants("toy-l-s-math"))["scout"] == 2
    caption = config_tables.hyper_table(Grid.of(cfg))["caption"]
    # each f with the variants that run it, and the setting where a variant's f differs by setting
    assert "every f = 2 (scout, toy-l-s-math; scout, toy-l-s-code; " in caption
    assert ", 5 (scout, toy-mg-s-math), 1 (scout-f1), 3 (scout-f3), 4 (scout-f4) steps" in caption


def test_a_figure_saved_again_is_the_same_bytes(tmp_path, monkeypatch):
    """A report rendered again from the same cache changes no file: its PDFs carry no creation date."""
    import time

    from scout.plotting import plt, save

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)  # matplotlib's own way to fix the date
    made = []
    for run in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [0.1, 0.4, 0.3])
        save(fig, tmp_path / run, "curve", "a curve")
        made.append((tmp_path / run / "curve.pdf").read_bytes())
        time.sleep(1.1)  # a date written to the second would differ
    assert made[0] == made[1] and b"CreationDate" not in made[0]
