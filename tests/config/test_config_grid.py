"""Config validation messages and the grid the paper's config expands into."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from scout import config as C
from scout import grid, jobs, resources, runs, training_runs
from scout.grid import Grid
from scout.paths import Paths
from tests.support.toy import REPO, cell_spec, dry_run


@pytest.fixture(scope="module")
def paper():
    return C.load(REPO / "config" / "paper.yaml")


@pytest.fixture(scope="module")
def toy():
    """The whole toy world: config/config.yaml with the targets of their own over it (make toy-all)."""
    from tests.support.toy import TOY_OVERLAYS

    return C.load([REPO / "config" / "config.yaml", *(REPO / "config" / o for o in TOY_OVERLAYS)])


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c["training"].update(batchsize=3), "training.batchsize: unknown key; expected one of: batch_size"),
        (lambda c: c["training"].update(batch_size="many"), "training.batch_size: 'many' is not of type 'integer'"),
        (
            lambda c: c["experiments"]["main"]["methods"].append("dpo"),
            "experiments.main.methods[6]: unknown method 'dpo'",
        ),
        (
            lambda c: c["experiments"]["main"]["settings"].append("q9b"),
            "experiments.main.settings[4]: unknown setting 'q9b'",
        ),
        (
            lambda c: c["settings"]["q4b-q1.7b-math"].update(teacher="Qwen9"),
            "settings.q4b-q1.7b-math.teacher: unknown model 'Qwen9'",
        ),
        (lambda c: c["methods"]["scout"].update(k=1), "methods.scout.k: 1 is less than the minimum of 2"),
        (
            lambda c: c["report"]["primary"]["claims"].append("scout_beats_grpo"),
            "report.primary.claims[3]: unknown claim 'scout_beats_grpo'; expected one of [",
        ),
        (
            lambda c: c["report"]["primary"].update(settings=["q4b-math"]),
            "report.primary.settings[0]: unknown setting 'q4b-math'; expected one of [",
        ),
        (lambda c: c.update(world="mars"), "world: 'mars' is not one of ['toy', 'paper']"),
        # inside an entry that may be a name or a mapping: the mapping's own key, not the whole entry
        (
            lambda c: c["experiments"]["main"]["methods"].append({"name": "x", "method": "scout", "interval": "four"}),
            "experiments.main.methods.6.interval: 'four' is not of type 'integer'",
        ),
        (
            lambda c: c["experiments"]["main"]["methods"].append({"name": "x", "method": "scout", "kk": 4}),
            "experiments.main.methods.6.kk: unknown key; expected one of: epochs, eval_every, interval, method, name",
        ),
        (
            lambda c: c.update(select={"seeds": ["one"]}),
            "select.seeds.0: 'one' is not an integer (at least 0) or a string matching ^[0-9]+$",
        ),
        (
            lambda c: c["experiments"]["main"]["methods"].append({"name": "x", "method": "opd", "interval": 3}),
            "experiments.main.methods[6].interval: method 'opd' has no teacher updates",
        ),
        # values the schema accepts that would silently switch a method off or into another one
        (
            lambda c: c["training"]["grpo"].update(n=1),
            "training.grpo.n: 1 sample per prompt makes every GRPO advantage 0",
        ),
        (
            lambda c: c["methods"]["esr"].update(max_tokens=16384),
            "methods.esr.max_tokens: 16384 is not below training.max_response_length 16384, so ESR would be OPD",
        ),
        (
            lambda c: c["methods"]["prune_opd"]["budget"].update(min=4096, max=2048),
            "methods.prune_opd.budget: min 4096 is above max 2048",
        ),
        (
            lambda c: c["methods"]["prune_opd"]["budget"].update(initial=512),
            "methods.prune_opd.budget.initial: 512 is outside [min, max] = [1024, 12288]",
        ),
        (
            lambda c: c["methods"]["prune_opd"]["budget"].update(max=20000),
            "methods.prune_opd.budget.max: 20000 exceeds training.max_response_length 16384",
        ),
        (
            lambda c: c["experiments"]["interval"]["methods"].append({"name": "opd", "method": "scout", "interval": 3}),
            "experiments.interval.methods[4].name: 'opd' is the id of another method; this variant is 'scout'",
        ),
        (
            lambda c: c["experiments"]["main"]["methods"].append(
                {"name": "opd-lr", "method": "opd", "teacher_lr": 1e-6}
            ),
            "experiments.main.methods[6].teacher_lr: method 'opd' has no teacher updates",
        ),
        (
            lambda c: c["experiments"]["interval"]["methods"].append(
                {"name": "scout-f999", "method": "scout", "interval": 999}
            ),
            "q8b-q1.7b-math/scout-f999: teacher update interval 999 exceeds the run's",
        ),
        (
            lambda c: c["methods"]["scout"].update(prefix_ratio=[0.9, 0.1]),
            "methods.scout.prefix_ratio: [0.9, 0.1] shrinks",
        ),
        (lambda c: c["methods"]["optr"].update(threshold=0), "methods.optr.threshold: 0 trusts every token"),
        (  # a $ref'd branch in words, not "value or value"
            lambda c: c["settings"]["q4b-q1.7b-math"].update(student_lr="fast"),
            "settings.q4b-q1.7b-math.student_lr: 'fast' is not a number (above 0) or 'tuned'",
        ),
    ],
)
def test_bad_config_names_key_and_expectation(paper, mutate, expected):
    cfg = copy.deepcopy(paper)
    mutate(cfg)
    with pytest.raises(C.ConfigError) as err:
        grid.check(C.validate(cfg))  # as the workflow and scout check a config
    assert expected in str(err.value)


def test_unreadable_and_non_yaml_files_are_reported(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("world: [toy\n")
    with pytest.raises(C.ConfigError, match="not valid YAML"):
        C.load(bad)
    with pytest.raises(C.ConfigError, match="cannot read"):
        C.load(tmp_path / "missing.yaml")


def test_paper_grid_cells(paper):
    cells = Grid.of(paper).cells
    per_exp = Counter(e for c in cells for e in c.experiments)
    assert per_exp == {"main": 72, "prefix0": 9, "optr": 12, "interval": 10, "compute_matched": 2, "lora": 3}
    assert len(cells) == 108
    f1 = [c for c in cells if c.variant == "scout-f1"]
    assert [c.seed for c in f1] == [1]


def grid_variants(cfg: dict) -> set[str]:
    return {c.variant for c in Grid.of(cfg).cells}


def runs_diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _chosen(cfg: dict) -> dict:
    """The config with its tuned LRs at config/config.yaml's numbers (the choice the tuning stage
    made: what a search that chooses them again gives) and a LoRA teacher's at 2.4e-3."""
    setting = cfg["settings"]["toy-l-s-math"]
    chosen = {"student_lr": 9e-5, "teacher_lr": 9e-5, "teacher_lora_lr": 2.4e-3}
    return {
        **cfg,
        "tuning": {
            **cfg["tuning"],
            "chosen": {"toy-l-s-math": {k: v for k, v in chosen.items() if setting.get(k) == "tuned"}},
        },
    }


def _specs(cfg: dict) -> dict:
    """Every cell's and search run's spec (tuned LRs as :func:`_chosen` gives them)."""
    cfg = _chosen(cfg)
    cells = [*Grid.of(cfg).cells, *Grid.of(cfg).search_cells]
    return {(c.setting, c.variant, c.seed): Grid.of(cfg).spec(c) for c in cells}


@pytest.mark.parametrize(
    "overlay, added",
    [
        ("toy-lora.yaml", [("toy-l-s-math", "scout-lora", s) for s in (1, 2, 3)]
         + [("toy-l-s-math", f"scout-lora-tlr{lr}", 1) for lr in ("1.2e-3", "2.4e-3", "6e-4")]),
        ("toy-extra.yaml", [("toy-l-s-math", v, s) for v in ("opd-3ep", "scout-cm") for s in (1, 2, 3)]
         + [("toy-mg-s-math", f"scout-f{f}", s) for f in (1, 3, 4) for s in (1, 2, 3)]),
        ("toy-tune.yaml", [("toy-l-s-math", f"opd-lr{lr}", 1) for lr in ("1.5e-4", "2.1e-4", "3e-5", "9e-5")]
         + [("toy-l-s-math", f"scout-tlr{lr}", 1) for lr in ("1.2e-4", "1.5e-4", "3e-5", "6e-5", "9e-5")]),
    ],
)  # fmt: skip
def test_each_target_of_its_own_adds_its_cells_and_changes_none(overlay, added):
    """config/toy-lora.yaml, toy-extra.yaml and toy-tune.yaml each add their experiment (or search)
    over the toy grid and nothing else: every cell of the default grid trains to the same spec under
    it, so that its ``make`` target reuses ``make toy``'s runs (the default target leaves them out for
    its 30 minutes); toy-tune's search, choosing the LRs config/config.yaml holds, trains the chosen
    points as the grid's seed-1 OPD and SCOUT runs."""
    default = C.load(REPO / "config" / "config.yaml")
    over = C.load([REPO / "config" / "config.yaml", REPO / "config" / overlay])
    assert not ({"lora", "interval", "compute_matched"} & set(default["experiments"])) and not default.get("claims")
    before, after = _specs(default), _specs(over)
    assert sorted(k for k in after if k not in before) == sorted(added)
    changed = [k for k, spec in before.items() if after[k] != spec]
    assert changed == []
    # what the training jobs run: the same, but that the compute-matched curve's points are exported
    # along toy-l-s-math's OPD and SCOUT runs of seeds 1-3 (scout-cm is SCOUT's run, OPD's 3 epochs
    # continue OPD's): make toy-extra trains those six again (the same weights) to export them
    d, o = _chosen(default), _chosen(over)
    runs = {k: (training_runs.run_spec(Grid.of(d), Grid.of(d).find(*k)), training_runs.run_spec(Grid.of(o), Grid.of(o).find(*k)))
            for k in before if k[1] in grid_variants(default)}  # fmt: skip
    moved = {k: runs_diff(a, b) for k, (a, b) in runs.items() if a != b}
    expected = {("toy-l-s-math", v, s): ["export_steps"] for v in ("opd", "scout") for s in (1, 2, 3)}
    assert moved == (expected if overlay == "toy-extra.yaml" else {})
    if overlay == "toy-lora.yaml":
        assert [c["id"] for c in over["claims"]] == ["lora_teacher_student", "lora_teacher_continuation"]
        assert after[("toy-l-s-math", "scout-lora", 2)]["method_cfg"]["scout"]["teacher_lora"]["rank"] == 8


def test_paper_sweep_scales_teacher_lr(paper):
    lr = {}
    for c in Grid.of(paper).cells:
        if c.setting == "q8b-q1.7b-math" and c.method == "scout" and c.seed == 1:
            sc = Grid.of(paper).spec(c)["method_cfg"]["scout"]
            lr[sc["interval"]] = sc["teacher_lr"]
    assert lr == pytest.approx({1: 5e-7, 5: 2.5e-6, 10: 5e-6, 15: 5e-6, 20: 5e-6})


def test_paper_specs_carry_the_papers_hyperparameters(paper):
    by = {(c.setting, c.variant, c.seed): c for c in Grid.of(paper).cells}
    opd = Grid.of(paper).spec(by[("q4b-q1.7b-math", "opd", 1)])
    assert (opd["lr"], opd["batch_size"], opd["n"], opd["clip"], opd["max_response_length"]) == (
        5e-6,
        128,
        1,
        0.2,
        16384,
    )
    assert opd["total_steps"] == 358  # floor(45883 / 128): verl drops the last partial batch
    grpo = Grid.of(paper).spec(by[("q8b-q1.7b-math", "grpo", 2)])
    assert (grpo["lr"], grpo["n"], grpo["kl_beta"], grpo["teacher"]) == (3e-6, 8, 0.001, None)
    code = Grid.of(paper).spec(by[("q4b-q1.7b-code", "scout", 3)])
    assert (code["epochs"], code["max_prompt_length"], code["total_steps"]) == (
        3,
        1536,
        3 * 58,
    )  # floor(7436 / 128) per epoch
    sky = Grid.of(paper).spec(by[("sky7b-ds1.5b-math", "prune_opd", 1)])
    assert sky["method_cfg"]["prune_opd"]["budget"]["initial"] == 2048
    assert (
        Grid.of(paper).spec(by[("q8b-q1.7b-math", "scout", 1)])["teacher"]
        == "results-paper/teachers/Qwen3-8B-DAPO/model/final"
    )
    assert grid.teacher_prep_spec(paper, "Qwen3-8B-DAPO")["total_steps"] == 3 * 271  # floor(17398 / 64) x 3 epochs


def test_compute_matched_checkpoints_every_40_steps(paper):
    by = {(c.setting, c.variant): c for c in Grid.of(paper).cells}
    opd3 = runs.checkpoints(Grid.of(paper).spec(by[("q4b-q1.7b-math", "opd-3ep")]))
    assert opd3[:3] == ["step40", "step80", "step120"] and opd3[-1] == "final"
    assert len(opd3) == 1077 // 40 + 1
    assert runs.checkpoints(Grid.of(paper).spec(by[("q4b-q1.7b-math", "opd")])) == ["final"]


def test_eval_units_include_base_rows(paper):
    units = jobs.eval_units(Grid.of(paper))
    assert ("q4b-q1.7b-code", "base-teacher", "0", "final") in units
    assert sum(1 for u in units if u[1].startswith("base-")) == 8
    spec = jobs.eval_spec(Grid.of(paper), "q4b-q1.7b-code", "base-student", "0", "final")
    assert sorted(spec["benchmarks"]) == ["humaneval_plus", "lcb_v5", "mbpp"]
    assert spec["benchmarks"]["lcb_v5"]["repeats"] == 4 and spec["model"] == "Qwen/Qwen3-1.7B"


def test_conflicting_variant_definitions_are_refused(toy):
    cfg = copy.deepcopy(toy)
    cfg["experiments"]["extra"] = {
        "settings": ["toy-mg-s-math"],
        "methods": [{"name": "scout-f3", "method": "scout", "interval": 6}],
        "seeds": [1],
    }
    with pytest.raises(C.ConfigError, match="defined differently"):
        _ = Grid.of(cfg).cells


def test_dry_run_of_the_paper_grid_lists_every_job(tmp_path):
    """snakemake -n with the paper config: no GPU, no download."""
    out = dry_run(tmp_path, REPO / "config" / "paper.yaml", "--quiet", "rules")
    assert out.returncode == 0, out.stderr
    counts = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # 108 cells; q8b's GRPO is q4b's (the same student, data and settings) and scout-cm s1 is scout s1
    assert counts["train"] == 108 - 4
    assert counts["prepare_teacher"] == 1
    # base rows, final checkpoints, the compute-matched runs' steps (scout-cm's under scout s1), the
    # probes' matched checkpoints (step 160; s1's is one of scout-cm's steps)
    assert counts["evaluate_math"] + counts["evaluate_code"] == 8 + 104 + 26 + 8 + 2
    assert counts["prepare_data"] == 12
    assert counts["grid_report"] == 1  # the report writes the summaries too


def test_config_overrides_apply_to_the_default_toy_config(tmp_path):
    """``--config KEY=VALUE`` without ``--configfile`` overrides keys of config/config.yaml; it does
    not replace the whole config (which then fails validation)."""
    (tmp_path / "config").symlink_to(REPO / "config")
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--cores", "1", "--config", "results=elsewhere"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "elsewhere/train/toy-l-s-code/scout/s1/train.json" in out.stdout


def test_bad_config_stops_snakemake_before_any_job(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["training"]["batchsize"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = dry_run(tmp_path, path)
    assert out.returncode != 0
    assert "training.batchsize: unknown key" in out.stdout + out.stderr


def test_the_toy_world_on_verl_needs_gpus_and_the_smoke_overlay_gives_them():
    from tests.support.toy import toy_config

    cfg = {**toy_config(), "backend": "verl"}
    with pytest.raises(C.ConfigError, match="verl on the toy world needs GPUs in resources.default"):
        C.validate(cfg)
    overlay = yaml.safe_load((REPO / "config" / "verl-smoke.yaml").read_text())
    C.validate({**toy_config(), **overlay})


@pytest.mark.parametrize("configfile", ["config.yaml", "paper.yaml"])
def test_snakemake_lint_is_clean(tmp_path, configfile):
    """Snakemake's own conventions: a software environment per rule, output folders derived from
    the outputs (so --sdm conda and runs without a shared file system work)."""
    cmd = [sys.executable, "-m", "snakemake", "--lint", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(REPO / "config" / configfile)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert "Lints for" not in text and "good condition" in text, text[-3000:]


def test_the_probes_matched_checkpoints_are_exported_and_evaluated(paper):
    """analysis.checkpoints (step 160 in the paper): the SCOUT runs the probes visit export and
    evaluate that step, verl keeps its checkpoint, and the probes pair teacher and student of it."""
    scout = cell_spec(paper, "q4b-q1.7b-math", "scout", 2)
    assert scout["probe_steps"] == [160] and runs.checkpoints(scout) == ["step160", "final"]
    other = cell_spec(paper, "q8b-q1.7b-math", "scout", 2)  # not probed
    assert "probe_steps" not in other and runs.checkpoints(other) == ["final"]
    probed = jobs.analysis_spec(Grid.of(paper), "q4b-q1.7b-math")["runs"]
    assert [(r["seed"], r["checkpoint"]) for r in probed][:2] == [(1, "step160"), (1, "final")]
    assert probed[0]["teacher"].endswith("scout/s1/model/step160-teacher")
    assert probed[0]["generations"].endswith("scout/s1/step160/aime25.generations.jsonl")
    assert ("q4b-q1.7b-math", "scout", "3", "step160") in jobs.eval_units(Grid.of(paper))


def test_jobs_read_the_config_in_the_order_the_workflow_did(tmp_path):
    """The first cell of a shared run (in config order, the main grid first) trains it: a job that
    reads the config from its spec file must see the same order, or it looks for the records
    under the other cell (the aggregate once read scout-cm's, which no job writes)."""
    from scout import workflow
    from scout.commands import _spec

    cfg = C.load([REPO / "config" / "config.yaml", REPO / "config" / "toy-extra.yaml"])  # compute_matched
    back = _spec(workflow.spec_file(str(tmp_path), "config", cfg))
    assert list(back["experiments"]) == list(cfg["experiments"])
    scout_cm = Grid.of(cfg).find("toy-l-s-math", "scout-cm", 1)
    assert Grid.of(back).plans[scout_cm].shares == Grid.of(cfg).find("toy-l-s-math", "scout", 1)
    assert jobs.eval_records(Grid.of(back)) == jobs.eval_records(Grid.of(cfg))
    # the order is the config's, not the memo's: listing compute_matched first makes it the trainer
    reordered = {**cfg, "experiments": dict(reversed(list(cfg["experiments"].items())))}
    scout = Grid.of(reordered).find("toy-l-s-math", "scout", 1)
    assert Grid.of(reordered).plans[scout].shares.variant == "scout-cm"


def _rule_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def test_select_keeps_the_named_cells_and_nothing_else():
    from tests.support.toy import toy_config

    cfg = toy_config()
    cfg["select"] = {"settings": ["toy-l-s-math"], "methods": ["opd", "scout", "scout-cm"], "seeds": ["1", 3]}
    C.validate(cfg)
    keys = sorted((c.setting, c.variant, c.seed) for c in Grid.of(cfg).cells)
    assert keys == [
        ("toy-l-s-math", v, s) for v in ("opd", "scout", "scout-cm") for s in (1, 3)
    ]  # main's (and headline's) opd and scout, compute_matched's scout-cm; every other experiment went
    assert sorted(cfg["experiments"]) == ["compute_matched", "headline", "main"]
    assert cfg["analysis"]["settings"] == ["toy-l-s-math"]
    assert sorted((c.setting, c.variant, c.seed) for c in Grid.of(C.validate(cfg)).cells) == keys  # as jobs see it
    # the base rows evaluated and reported are the chosen setting's, not every setting's
    for units in (jobs.eval_units(Grid.of(cfg)), jobs.report_units(Grid.of(cfg))):
        assert {u[0] for u in units} == {"toy-l-s-math"} and ("toy-l-s-math", "base-teacher", "0", "final") in units


def test_select_names_what_it_does_not_know_and_refuses_an_empty_grid():
    from tests.support.toy import toy_config

    cfg = {**toy_config(), "select": {"settings": ["toy-x"], "methods": ["scot"], "seeds": [70]}}
    with pytest.raises(C.ConfigError) as err:
        C.validate(cfg)
    text = str(err.value)
    assert "select.settings: ['toy-x'] not in the experiments" in text
    assert "select.methods: ['scot']" in text and "select.seeds: [70]" in text
    cfg = {**toy_config(), "select": {"experiments": ["interval"], "methods": ["opd"]}}
    with pytest.raises(C.ConfigError, match="no cell of the grid matches"):
        C.validate(cfg)


def test_make_demo_selects_opd_and_scout_with_two_seeds_and_the_probes_of_their_teachers():
    """The Makefile's demo: a selection of the toy grid whose claims page can test SCOUT against OPD
    (two seeds a side) and SCOUT's teacher (the probes), and a --prioritize target the grid makes."""
    import re

    from tests.support.toy import toy_config

    make = (REPO / "Makefile").read_text()
    sel = yaml.safe_load(re.search(r"^DEMO := select=(.*)$", make, re.M).group(1))
    cfg = C.validate({**toy_config(), "select": sel})
    cells = sorted((c.setting, c.variant, c.seed) for c in Grid.of(cfg).cells)
    assert cells == [("toy-l-s-math", v, s) for v in ("opd", "scout") for s in (1, 2)]
    assert cfg["analysis"]["settings"] == ["toy-l-s-math"]
    assert jobs.settings_in_grid(Grid.of(cfg)) == ["toy-l-s-math"]  # no toy-medium, no DAPO mirror to prepare
    first = re.search(r"--prioritize (\S+)", make).group(1)
    assert first == f"{jobs.analysis_dir(Grid.of(cfg), 'toy-l-s-math')}/continuation.csv"


def test_select_on_the_command_line_runs_a_reduced_paper_experiment(tmp_path):
    """OPD against SCOUT, one setting, one seed, no teacher probes, from the command line (its
    values arrive as strings): those two trainings, their evaluations and the setting's base rows;
    nothing for the other settings, and not the DAPO teacher only the probes need."""
    sel = "select={settings: [q4b-q1.7b-math], methods: [opd, scout], seeds: [1], analysis: false}"
    out = dry_run(tmp_path, REPO / "config" / "paper.yaml", "--quiet", "rules", "--config", sel)
    assert out.returncode == 0, out.stderr
    counts = _rule_counts(out.stdout)
    assert counts["train"] == 2
    assert counts["evaluate_math"] == 2 + 2  # the two final checkpoints, the setting's student and teacher
    assert not {"evaluate_code", "prepare_teacher", "analysis"} & set(counts)


def test_numbers_given_through_snakemake_config_get_a_hint(tmp_path):
    """--config reads values as strings: the error says so, and how to pick cells instead."""
    over = "experiments={main: {settings: [toy-l-s-math], methods: [opd], seeds: [1]}}"
    out = dry_run(tmp_path, REPO / "config" / "config.yaml", "--config", over)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "experiments.main.seeds.0: '1' is not of type 'integer'" in text
    assert "reads every value as a string" in text and "select=" in text


def test_an_overlay_reads_to_scout_as_to_snakemake(tmp_path, capsys):
    """`scout check-config A B` and `scout plan --config A --config B` merge B into A key by key, as
    `snakemake --configfile A B` does: docs/real-models.md's one-node overlay puts OPD and SCOUT on one node."""
    from scout.cli import main

    overlay = tmp_path / "one-node.yaml"
    overlay.write_text(
        "resources:\n  default: {gpu_mem_gb: 80}\n  train: {methods: {opd: {nodes: 1}, scout: {nodes: 1}}}\n"
        "select: {settings: [q4b-q1.7b-math], methods: [opd, scout], seeds: [1], analysis: false}\n"
    )
    cfg = C.load([REPO / "config" / "paper.yaml", overlay])
    assert cfg["resources"]["train"]["methods"]["scout"] == {"nodes": 1}
    assert cfg["resources"]["train"]["methods"]["esr"] == {"nodes": 2}  # the rest of paper.yaml's placement stays
    assert cfg["resources"]["default"]["gpu_mem_gb"] == 80 and cfg["resources"]["default"]["cpus_per_node"] == 8
    assert main(["check-config", str(REPO / "config" / "paper.yaml"), str(overlay)]) == 0
    assert "valid (paper world): 2 training cells, 4 evaluations" in capsys.readouterr().out
    assert main(["plan", "--configfile", str(REPO / "config" / "paper.yaml"), str(overlay)]) == 0
    assert "total          6       6          1      1,152" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(C.ConfigError, match="bad.yaml: an overlay must be a mapping"):
        C.load([REPO / "config" / "paper.yaml", bad])


def _refusal(edit) -> str:
    from tests.support.toy import toy_config

    cfg = toy_config()
    edit(cfg)
    with pytest.raises(C.ConfigError) as err:
        C.validate(cfg)
    return str(err.value)


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda c: c["settings"]["toy-l-s-math"].update(student_lr="1e-4"), "settings.toy-l-s-math.student_lr"),
        (lambda c: c["training"]["grpo"].update(lr="3e-6"), "training.grpo.lr"),
        (lambda c: c["methods"]["scout"].update(interval="4"), "methods.scout.interval"),
        (lambda c: c["experiments"]["main"].update(seeds=["1", 2]), "experiments.main.seeds.0"),
    ],
)
def test_a_number_written_as_text_gets_the_hint_at_any_key(edit, where):
    """A value the schema refuses for being text that reads as a number gets its hint, whether the
    schema's test there is a type or a choice between schemas (a learning rate or `tuned`)."""
    text = _refusal(edit)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(where))
    assert "number" in line and ("write 1.0e-04" in line or "write 3.0e-06" in line or "drop the quotes" in line), line


@pytest.mark.parametrize(
    "edit, choices",
    [
        (lambda c: c["analysis"].update(benchmark="tm-nope"), "analysis.benchmark: unknown benchmark 'tm-nope'; expected one of ["),
        (lambda c: c["analysis"].update(benchmark="tc-easy"), "is not a math benchmark (toy-l-s-math); expected one of ['tm-"),
        (lambda c: c["settings"]["toy-l-s-math"].update(train_data="nope"), "unknown dataset 'nope'; expected one of ["),
        (lambda c: c["experiments"]["main"].update(settings=["nope"]), "unknown setting 'nope'; expected one of ["),
        (lambda c: c.update(claims=[{"id": "x", "experiment": "nope", "variant": "opd", "baseline": "base-student",
                                      "claim": "OPD beats the base", "kind": "beats"}]), "unknown experiment 'nope'; expected one of ["),
    ],
)  # fmt: skip
def test_every_refused_name_lists_the_choices(edit, choices):
    assert choices in _refusal(edit)


def test_scout_reads_config_flags_as_snakemake_does(tmp_path, capsys):
    """`--configfile` takes files, `--config` KEY=VALUE pairs read by snakemake's own parser (a
    select narrows the grid as on the workflow's command line); a file after `--config` and a flag
    given twice are refused, naming the fix."""
    from scout.cli import main

    paper = str(REPO / "config" / "paper.yaml")
    sel = "select={settings: [q4b-q1.7b-math], methods: [opd, scout], seeds: [1], analysis: false}"
    assert main(["plan", "--configfile", paper, "--config", sel]) == 0
    via_config = capsys.readouterr().out
    assert main(["plan", "--configfile", paper, "--select", sel.removeprefix("select=")]) == 0
    assert via_config == capsys.readouterr().out and "q4b-q1.7b-math" in via_config
    assert "q8b-q1.7b-math" not in via_config
    with pytest.raises(SystemExit, match=r"--config takes KEY=VALUE pairs.*--configfile .*paper.yaml"):
        main(["plan", "--config", paper])
    with pytest.raises(SystemExit) as twice:
        main(["plan", "--configfile", paper, "--configfile", paper])
    assert twice.value.code == 2 and "--configfile given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "--config", "results=a", "--config", sel])
    assert "--config given twice" in capsys.readouterr().err


def test_the_workflow_refuses_a_repeated_config_flag(tmp_path):
    """snakemake keeps only the last of two --config flags; the workflow names the flag instead."""
    out = dry_run(tmp_path, REPO / "config" / "config.yaml", "--config", "results=a", "--config", "results=b")
    assert out.returncode != 0
    assert "--config given more than once" in out.stdout + out.stderr


def test_adding_an_experiment_retrains_no_run_it_shares():
    """A run's spec names what its training depends on, not the experiments that name its cell: an
    experiment that adds a variant and reuses OPD as its baseline leaves every existing run's spec
    (the Snakemake param that would rerun it) as it was."""
    from tests.support.toy import toy_config

    cfg = toy_config()
    before = {c.key: training_runs.run_spec(Grid.of(cfg), c) for c in Grid.of(cfg).cells}
    over = copy.deepcopy(cfg)
    over["experiments"]["clipped"] = {
        "settings": ["toy-l-s-math"],
        "methods": ["opd", {"name": "opd-nokl", "method": "opd", "student_lr": 3e-5}],
        "seeds": [1, 2, 3],
    }
    after = {c.key: training_runs.run_spec(Grid.of(over), c) for c in Grid.of(over).cells}
    assert {k for k in after if k not in before} == {f"toy-l-s-math/opd-nokl/s{s}" for s in (1, 2, 3)}
    assert {k: v for k, v in after.items() if k in before} == before
    assert "clipped" in next(c for c in Grid.of(over).cells if c.key == "toy-l-s-math/opd/s1").experiments


@pytest.mark.parametrize(
    "select, settings, probed",
    [
        ({"experiments": ["prefix0"]}, ["toy-l-s-math", "toy-mg-s-math", "toy-l-s-code"], []),
        ({"experiments": ["optr"]}, ["toy-l-s-math", "toy-l-s-code"], []),
        ({"experiments": ["main"], "settings": ["toy-l-s-code"]}, ["toy-l-s-code"], []),
        ({"experiments": ["headline"]}, ["toy-l-s-math"], ["toy-l-s-math"]),
        (
            {"experiments": ["main"]},
            ["toy-l-s-math", "toy-mg-s-math", "toy-l-s-code"],
            ["toy-l-s-math", "toy-mg-s-math"],
        ),
    ],
)
def test_a_selection_builds_only_what_it_needs(select, settings, probed):
    """Teacher probes go with the SCOUT runs a selection keeps: an experiment without SCOUT probes
    nothing, and no setting outside the selection is pretrained, prepared or probed."""
    from tests.support.toy import toy_config

    cfg = C.validate({**toy_config(), "select": select})
    assert jobs.settings_in_grid(Grid.of(cfg)) == settings
    assert cfg.get("analysis", {}).get("settings", []) == probed


@pytest.mark.parametrize(
    "world, select",
    [
        ("toy", {"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1, 2]}),  # the demo's
        ("toy", {"experiments": ["main"], "seeds": [1]}),
        ("toy+extra", {"methods": ["opd", "scout"]}),  # drops the compute-matched runs OPD and SCOUT export for
        ("paper", {"settings": ["q4b-q1.7b-math"], "methods": ["opd", "scout"], "seeds": [1], "analysis": False}),
    ],
)
def test_a_selection_never_changes_the_spec_of_a_run_it_keeps(world, select):
    """A kept run trains to the whole grid's spec (its exported and probed checkpoints included), so
    that a selection run after the whole grid, or before it, reuses and is reused."""
    if world == "paper":
        whole = C.load(REPO / "config" / "paper.yaml")
    else:
        files = [REPO / "config" / "config.yaml"] + (
            [REPO / "config" / "toy-extra.yaml"] if world == "toy+extra" else []
        )
        whole = C.load(files)
    cut = C.validate({**copy.deepcopy(whole), "select": select})
    kept = Grid.of(cut).runs
    assert kept and len(kept) < len(Grid.of(whole).runs)
    full = {c.key: c for c in Grid.of(whole).runs}
    for cell in kept:
        assert training_runs.run_spec(Grid.of(cut), cell) == training_runs.run_spec(Grid.of(whole), full[cell.key]), cell.key
    if world == "toy+extra":  # without the whole grid's exports the run would have changed
        bare = {k: v for k, v in cut.items() if k != "selected_from"}
        opd = next(c for c in kept if c.key == "toy-l-s-math/opd/s1")
        assert training_runs.run_spec(Grid.of(bare), opd)["export_steps"] != training_runs.run_spec(Grid.of(cut), opd)["export_steps"]


def test_a_teacher_server_is_checked_and_stays_out_of_the_specs(toy):
    """A served teacher is a URL and a model name, or ``serve``; the specs do not change, so turning
    it on retrains nothing (the verl backend's cells: below)."""
    served = copy.deepcopy(toy)
    served["settings"]["toy-l-s-math"]["teacher_server"] = {"url": "http://node1:8000", "model": "toy-large"}
    C.validate(served)
    cell = Grid.of(toy).find("toy-l-s-math", "opd", 1)
    assert Grid.of(served).spec(cell) == Grid.of(toy).spec(cell)
    served["settings"]["toy-l-s-math"]["teacher_server"] = "serve"  # the workflow starts it
    C.validate(served)
    bad = copy.deepcopy(served)
    bad["settings"]["toy-l-s-math"]["teacher_server"] = "start"
    with pytest.raises(C.ConfigError, match="teacher_server: 'serve' was expected"):
        C.validate(bad)
    bad["settings"]["toy-l-s-math"]["teacher_server"] = {"url": "node1:8000", "model": "toy-large"}
    with pytest.raises(C.ConfigError, match="teacher_server.url"):
        C.validate(bad)


def test_a_served_verl_cell_asks_for_its_students_gpus_alone():
    """On the verl backend a served cell is placed without a teacher pool: it requests (and plans)
    its student's pool (OPD: one node of the paper's two; Prune-OPD: 4 GPUs of its node's 8), and its
    verl config has no teacher engine; the cells
    whose teacher trains or writes (SCOUT, Relay-OPD) and the weights spec are as before."""
    from scout import jobs, runs
    from scout.verl import config as vc

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    served = copy.deepcopy(paper)
    served["settings"]["q4b-q1.7b-math"]["teacher_server"] = "serve"
    C.validate(served)
    for variant, before, after in [("opd", (2, 8), (1, 8)), ("prune_opd", (1, 8), (1, 4)), ("scout", (3, 8), (3, 8)),
                                   ("relay_opd", (1, 8), (1, 8))]:  # fmt: skip
        cell = Grid.of(paper).find("q4b-q1.7b-math", variant, 1)
        own, via = (
            {**jobs.train_job_spec(g, cell), "resources": jobs.train_resources(g, cell.setting, cell.method, variant)}
            for g in (Grid.of(paper), Grid.of(served))
        )
        assert (own["resources"]["nodes"], own["resources"]["gpus_per_node"]) == before, variant
        assert (via["resources"]["nodes"], via["resources"]["gpus_per_node"]) == after, variant
        assert runs.weights_spec(own) == runs.weights_spec(via)
        if before != after:
            pools = vc.placement(cell.method, via["resources"])
            assert (pools["student_nodes"], pools["student_gpus"], pools["teacher_nodes"]) == (*after, 0)
            over = vc.overrides(via, via["resources"], "out")
            assert "distillation.nnodes=0" in over and "+scout.teacher_served=true" in over
            assert "+scout.teacher_served=true" not in vc.overrides(own, own["resources"], "out")
    other = Grid.of(paper).find("q8b-q1.7b-math", "opd", 1)  # another setting: not served
    assert jobs.train_resources(Grid.of(served), other.setting, other.method, other.variant)["nodes"] == 2


def test_a_served_teachers_job_waits_for_exactly_the_cells_that_only_score_with_it(toy):
    """``teacher_server: serve``: one server per teacher model, whose users are the served settings'
    runs of a frozen teacher that only scores (OPD, ESR, Prune-OPD, OPTR and their variants), each
    once (a run another cell shares is one job), with a context and a top-k long enough for all."""
    from scout import jobs, teacher_server

    served = copy.deepcopy(toy)
    served["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
    served["settings"]["toy-l-s-code"]["teacher_server"] = "serve"  # the same teacher: one server
    assert teacher_server.served_by_workflow(served) == {"toy-large": ["toy-l-s-math", "toy-l-s-code"]}
    spec = jobs.teacher_server_spec(Grid.of(served), "toy-large")
    users = jobs.served_users(Grid.of(served), "toy-large")
    assert {c.method for c in users} == {"opd", "esr", "prune_opd", "optr"}
    assert {c.setting for c in users} == {"toy-l-s-math", "toy-l-s-code"}
    plans = Grid.of(toy).plans
    for c in Grid.of(toy).runs:  # everyone else keeps a teacher of its own, or shares a user's run
        if c.setting in ("toy-l-s-math", "toy-l-s-code") and c not in users:
            assert c.method in ("scout", "relay_opd", "grpo", "opd_teacher_grpo", "optr_scout") or plans[c].shares in users, c
    outputs = jobs.served_outputs(Grid.of(served), "toy-large")
    assert outputs == sorted(f"{Paths.of(toy).train_dir(c.setting, c.variant, c.seed)}/train.json" for c in users)
    assert len(outputs) == len(set(outputs))
    # absolute paths: its Slurm job may start in another folder
    assert spec["path"] == str(Path(Paths.of(toy).model("toy-large")).resolve()) and spec["model"] == "toy-large"
    tr = toy["training"]
    longest = max(toy["settings"][s].get("max_prompt_length", tr["max_prompt_length"]) for s in ("toy-l-s-math", "toy-l-s-code"))
    assert spec["max_model_len"] == longest + tr["max_response_length"] + 1
    assert spec["max_logprobs"] == max(20, toy["methods"]["prune_opd"]["topk"])
    assert spec["folder"] == str(Path(toy["results"]).resolve() / "servers" / "toy-large")
    assert spec["resources"] == {k: v for k, v in resources.job_resources(toy, "teacher_server").items()
                                 if k in ("nodes", "gpus_per_node", "cpus_per_node", "mem_mb", "runtime")}  # fmt: skip


def test_a_method_of_an_unknown_part_is_refused_with_the_known_ones():
    from scout.methods import METHODS, PARTS, Method

    with pytest.raises(ValueError, match=r"'opd_half': unknown budget 'half'; the known ones: full, esr, prune"):
        Method("opd_half", "opd", budget="half")
    with pytest.raises(ValueError, match=r"unknown student_loss 'kl'; the known ones: opd, optr, grpo"):
        Method("kl", "kl")
    for part, kinds in PARTS.items():  # every kind is used by a method of the table
        assert {getattr(m, part) for m in METHODS.values()} == set(kinds), part


def _schema_defaults(node: dict, path: tuple = ()) -> list[tuple[tuple, object]]:
    """(key path, default) of every schema property that declares a default."""
    out = [(path, node["default"])] if "default" in node else []
    for key, sub in node.get("properties", {}).items():
        out += _schema_defaults(sub, (*path, key))
    return out


def _every_spec(cfg: dict) -> dict[str, str]:
    specs = {f"train {c.key}": jobs.train_job_spec(Grid.of(cfg), c) for c in Grid.of(cfg).cells}
    specs |= {f"teacher {m}": jobs.teacher_job_spec(Grid.of(cfg), m) for m in jobs.models_in_grid(Grid.of(cfg)) if "prepare" in cfg["models"][m]}
    for c in Grid.of(cfg).cells:
        specs[f"eval {c.key}"] = jobs.eval_spec(Grid.of(cfg), c.setting, c.variant, c.seed, "final")
    return {k: runs.fingerprint(v) for k, v in specs.items()}


def test_a_setting_given_at_its_default_changes_no_spec():
    """The spec's rule: a config that leaves a key out and one that gives it at its default make
    the same specs, so a setting added later at its default changes no digest of a finished grid."""
    from tests.support.toy import toy_config

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    defaults = _schema_defaults(schema)
    assert len(defaults) >= 7
    base = toy_config()
    before = _every_spec(base)
    tried = 0
    for path, default in defaults:
        cfg = copy.deepcopy(base)
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if path[-1] in node:
            continue  # the toy config gives it: not a key left out
        node[path[-1]] = default
        C.validate(cfg)
        assert _every_spec(cfg) == before, f"{'.'.join(path)}: {default!r} changed a spec"
        tried += 1
    assert tried >= 3
    # and the check can fail: a key away from its default changes the specs that read it
    cfg = copy.deepcopy(base)
    cfg["evaluation"]["engine"] = "vllm"
    assert _every_spec(cfg) != before


def test_a_variant_sets_its_own_method_settings_and_the_rest_keep_theirs():
    """SCOUT with K = 4 as an arm of its own: its runs' specs carry K = 4, the main SCOUT's and
    every other spec stay as they were, the hyperparameter table says which variant runs which
    K, and wrong entries name the key and what it may be."""
    from scout import config_tables
    from tests.support.toy import toy_config

    base = toy_config()
    before = _every_spec(base)
    cfg = copy.deepcopy(base)
    k4 = {"name": "scout-k4", "method": "scout", "overrides": {"scout": {"k": 4}}}
    cfg["experiments"]["mine"] = {"settings": ["toy-l-s-math"], "methods": ["opd", k4], "seeds": [1, 2]}
    C.validate(cfg)
    spec = cell_spec(cfg, "toy-l-s-math", "scout-k4", 1)
    assert spec["method_cfg"]["scout"]["k"] == 4 and base["methods"]["scout"]["k"] != 4
    after = _every_spec(cfg)
    assert {k: v for k, v in after.items() if "scout-k4" not in k} == before  # nothing else retrains
    k, _ = config_tables._scout_k_and_f(Grid.of(cfg))
    assert k.startswith(f"{base['methods']['scout']['k']} (scout; ") and k.endswith("), 4 (scout-k4)")
    for over, message in (
        ({"scout": {"kk": 4}}, "overrides.scout.kk: unknown key; expected one of: answer_marker, interval, k,"),
        ({"esr": {"max_tokens": 4}}, "overrides.esr: 'scout' reads no such section; its sections: scout"),
        ({"scout": {"k": 1}}, "overrides.scout.k: 1 is less than the minimum of 2"),
        ({"scout": {"k": "four"}}, "overrides.scout.k: 'four' is not of type 'integer'"),
    ):
        bad = copy.deepcopy(base)
        bad["experiments"]["mine"] = {"settings": ["toy-l-s-math"], "seeds": [1],
                                      "methods": [{"name": "x", "method": "scout", "overrides": over}]}  # fmt: skip
        with pytest.raises(C.ConfigError, match=re.escape(f"experiments.mine.methods[0].{message}")):
            C.validate(bad)


def test_a_config_edited_after_its_grid_was_made_changes_no_grid_handed_out(paper):
    """Grid.of hands out one grid per config content: a caller editing its dict afterwards (as a
    test does to try a key) must not change the grid that the unedited content gets next."""
    base = copy.deepcopy(paper)
    base["training"]["save_every"] = 17  # content of this test's own, so its first Grid.of makes a grid
    cfg = copy.deepcopy(base)
    cell = Grid.of(cfg).find("q4b-q1.7b-math", "scout", 1)
    before = jobs.train_job_spec(Grid.of(cfg), cell)
    cfg["training"]["keep_checkpoints"] = "exported"
    assert jobs.train_job_spec(Grid.of(cfg), cell)["keep_checkpoints"] == "exported"
    assert Grid.of(base).config == base  # what the plan's disk and every live read see
    assert jobs.train_job_spec(Grid.of(base), cell) == before


def test_an_overlay_read_alone_is_told_to_follow_the_base_config():
    """`--configfile my-overlay.yaml` replaces config/config.yaml: seventeen "required property"
    lines said nothing of that; the first line now does."""
    with pytest.raises(C.ConfigError) as err:
        C.validate({"settings": {"toy-l-s-math": {"student_lr": 2.0e-4}}})
    first = str(err.value).splitlines()[1].strip()
    assert first.startswith("8 top-level sections are missing (world, backend, models, benchmarks,")
    assert first.endswith("--configfile config/config.yaml your-overlay.yaml")


def test_a_selection_names_its_report_folder_whatever_the_order_of_its_names():
    """The same cells listed in another order are the same selection: one report folder, not two."""
    a = C.selection_name({"settings": ["toy-l-s-math"], "methods": ["opd", "scout"], "seeds": [1, 2]})
    b = C.selection_name({"settings": ["toy-l-s-math"], "methods": ["scout", "opd"], "seeds": [2, 1]})
    assert a == b == "select-settings-toy-l-s-math-methods-opd-scout-seeds-1-2"
    assert C.selection_name({"seeds": [10, 2]}) == "select-seeds-2-10"
    assert C.selection_name({"methods": ["opd"]}) != C.selection_name({"methods": ["scout"]})


def test_two_different_selections_on_one_command_are_refused():
    """--select A with --config select=B used A alone, silently; the same selection twice is fine."""
    base = str(REPO / "config" / "config.yaml")
    with pytest.raises(C.ConfigError, match="name different cells; give one of them"):
        C.load(base, "{methods: [opd]}", overrides={"select": {"methods": ["scout"]}})
    assert C.load(base, "{methods: [opd]}", overrides={"select": {"methods": ["opd"]}})
