"""End to end: a reduced toy grid through Snakemake, every method at least once."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scout import analysis
from scout.grid import Grid
from scout.methods import METHODS
from scout.reproducibility import fingerprint
from tests.support.toy import REPO, mini_config, tex_available
from tests.support.workflow import snakemake

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def finished_grid(tmp_path_factory):
    work = tmp_path_factory.mktemp("grid")
    (work / "mini.yaml").write_text(yaml.safe_dump(mini_config("results", tuned=True)))
    snakemake(work)
    return work


def test_the_reduced_grid_computes_the_recorded_digits(finished_grid):
    """Its data, tokenizer, models, one run of each method family and the untrained student's samples
    against config/fingerprints.yaml's `mini` record: a change of digits is made on purpose (rerun
    with `scout fingerprints --section mini --record NOTE` on a fresh reduced grid, and say why)."""
    cmd = [sys.executable, "-m", "scout.cli", "fingerprints", "--configfile", "mini.yaml", "--section", "mini", "--strict"]
    out = subprocess.run(cmd, cwd=finished_grid, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "differ" in out.stdout and " 0 differ, 0 not made yet, 0 not recorded" in out.stdout


def test_summary_covers_every_method_and_base_rows(finished_grid):
    runs = pd.read_csv(finished_grid / "results" / "summary" / "runs.csv")
    methods = pd.read_csv(finished_grid / "results" / "summary" / "methods.csv")
    assert set(METHODS) <= set(runs["method"])
    assert {"base-student", "base-teacher"} <= set(runs["variant"])
    # toy-l-s-math has 3 math benchmarks + the per-run average (OPD's run also has step2: opd-2ep
    # continues it and is evaluated every 2nd step)
    one = runs[(runs.setting == "toy-l-s-math") & (runs.variant == "opd") & (runs.checkpoint == "final")]
    assert sorted(one.benchmark) == ["avg", "tm-easy", "tm-hard", "tm-long"]
    assert one.set_index("benchmark").loc["avg", "mean"] == pytest.approx(one[one.benchmark != "avg"]["mean"].mean())
    assert runs["mean"].between(0, 1).all()
    # the compute-matched run is evaluated at every 2nd step and at the end
    ckpts = set(runs[runs.variant == "opd-2ep"].checkpoint)
    assert ckpts == {"step2", "step4", "step6", "final"}
    assert (methods["runs"] >= 1).all()
    behaviour = pd.read_csv(finished_grid / "results" / "summary" / "behaviour.csv")
    assert set(METHODS) <= set(behaviour["method"]) and (behaviour["reflections_per_response"] >= 0).all()
    assert (behaviour["responses"] == 4 * 2 * 3).any()  # toy math: 4 questions x 2 repeats x 3 benchmarks
    teacher_prep = finished_grid / "results" / "teachers" / "toy-medium-grpo" / "model" / "final" / "model.safetensors"
    assert teacher_prep.exists()


def test_the_tuning_stage_chose_and_the_grid_trained_at_its_choice(finished_grid):
    """toy-l-s-math says `tuned`: two OPD runs, then two SCOUT runs at the chosen student LR, each
    scored on math-val; the chosen points' runs are the grid's seed-1 OPD and SCOUT runs (no
    folders of their own), and every other cell of the setting trained at the choice."""
    res = finished_grid / "results"
    student = json.loads((res / "tuning" / "toy-l-s-math" / "student_lr.json").read_text())
    teacher = json.loads((res / "tuning" / "toy-l-s-math" / "teacher_lr.json").read_text())
    assert [p["lr"] for p in student["points"]] == [1.5e-4, 3e-4] and student["chosen"] in (1.5e-4, 3e-4)
    assert teacher["fixed"] == {"student_lr": student["chosen"]} and len(teacher["points"]) == 2
    for p in student["points"] + teacher["points"]:
        record = res / "tuning" / "toy-l-s-math" / p["variant"] / "s1" / "validation" / "math-val.json"
        assert json.loads(record.read_text())["rows"] == 8 and 0 <= p["score"] <= 1
    assert not (res / "train" / "toy-l-s-math" / "opd" / "s1").exists()
    assert not (res / "train" / "toy-l-s-math" / "scout" / "s1").exists()
    esr = json.loads((res / "train" / "toy-l-s-math" / "esr" / "s1" / "train.json").read_text())["spec"]
    assert esr["lr"] == student["chosen"]
    dense = json.loads((res / "train" / "toy-l-s-math" / "scout-f1" / "s2" / "train.json").read_text())["spec"]
    assert dense["method_cfg"]["scout"]["teacher_lr"] == pytest.approx(teacher["chosen"] / 2)  # f = 1 of f = 2
    runs = pd.read_csv(res / "summary" / "runs.csv")
    assert len(runs[(runs.variant == "scout") & (runs.seed == 1) & (runs.benchmark == "avg")]) == 2  # step2, final
    assert not runs.variant.str.startswith(("opd-lr", "scout-tlr")).any()  # search runs are not grid rows
    manifest = json.loads((res / "report" / "manifest.json").read_text())
    assert "tuning_toy-l-s-math" in manifest["figures"]
    assert any("one more tuned hyperparameter than OPD" in text for _, text in manifest["caveats"])


def test_rerun_of_one_eval_record_runs_exactly_one_job(finished_grid):
    record = "results/eval/toy-l-s-math/scout-f1/s2/final/tm-easy.json"
    assert "Nothing to be done" in snakemake(finished_grid, "-n").stdout
    out = snakemake(finished_grid, record, "--forcerun", record, "-n", "--quiet", "rules")
    assert "evaluate_math" in out.stdout and "train " not in out.stdout
    total = [line for line in out.stdout.splitlines() if line.startswith("total")]
    assert total and total[0].split()[1] == "1"


REMADE = {
    "results/train/toy-l-s-math/esr/s1/model/final/model.safetensors": "train",
    "results/eval/toy-l-s-math/esr/s1/final/tm-easy.generations.jsonl": "evaluate_math",
    "results/eval/toy-l-s-code/opd_teacher_grpo/s1/final/tc-easy.json": "evaluate_code",
    "results/toy/models/toy-small/model.safetensors": "toy_pretrain",
}


def test_every_suggested_remake_is_one_job_with_the_users_config(finished_grid, monkeypatch):
    """A damaged file's message suggests the narrowest remake: its job's output as the one target,
    forced, with the config file and the selection of the command that ran the job (the workflow
    exports them to its jobs); a dry run of each suggestion plans exactly that one job."""
    from scout.io import remake_command
    from scout.workflow import REMAKE_ENV, remake_args

    user = ["snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(finished_grid), "--configfile",
            str(finished_grid / "mini.yaml"), "--cores", "2", "--config", "select={seeds: [1]}", "--", "report"]  # fmt: skip
    monkeypatch.setenv(REMAKE_ENV, shlex.join(remake_args(user)))
    commands = [shlex.split(remake_command(path)) for path in REMADE]
    for (path, rule), cmd in zip(REMADE.items(), commands, strict=True):
        assert cmd[0] == "snakemake" and "select={seeds: [1]}" in cmd and str(finished_grid / "mini.yaml") in cmd
        assert "report" not in cmd and cmd[-2] == "--" and path.startswith(str(Path(cmd[-1]).parent.parent))
        dry = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", *cmd[1:]]
        out = subprocess.run(dry, capture_output=True, text=True, cwd=finished_grid)
        assert out.returncode == 0, out.stderr[-2000:]
        assert job_counts(out) == {rule: 1}, (path, job_counts(out))


def test_a_failed_forced_evaluation_keeps_the_records_it_would_replace(finished_grid):
    """The evaluation records are the report's cache: a forced re-evaluation whose model turns out
    damaged fails with the remake command and leaves every record of that checkpoint as it was
    (Snakemake's update flag: kept during the job, restored when it fails)."""
    unit = finished_grid / "results/eval/toy-l-s-math/esr/s1/final"
    weights = finished_grid / "results/train/toy-l-s-math/esr/s1/model/final/model.safetensors"
    records = {p: p.read_bytes() for p in sorted(unit.glob("*.json"))}
    stamps = {p: p.stat().st_mtime_ns for p in records}
    whole, times = weights.read_bytes(), weights.stat()
    weights.write_bytes(whole[: len(whole) // 2])
    try:
        target = str((unit / "tm-easy.json").relative_to(finished_grid))
        out = snakemake(finished_grid, target, "--forcerun", target, check=False)
        assert out.returncode != 0
        assert "the model cannot be loaded" in out.stdout + out.stderr
        assert "remake it: snakemake" in out.stdout + out.stderr
    finally:
        weights.write_bytes(whole)
        os.utime(weights, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert len(records) == 3 and {p: p.read_bytes() for p in records} == records
    # and the next run evaluates nothing again
    out = snakemake(finished_grid, "-n")
    plan = job_counts(out) if "Job stats:" in out.stdout + out.stderr else {}
    assert not {"evaluate_math", "evaluate_code", "train"} & set(plan), plan
    for p in records:  # the rest of this module expects the finished grid as it was
        os.utime(p, ns=(stamps[p], stamps[p]))
    assert "Nothing to be done" in snakemake(finished_grid, "-n").stdout


def test_the_readmes_commands_after_the_demo_work_on_what_it_made(finished_grid):
    """The README's post-demo block, command by command, on the reduced grid with a selection of
    the same form (two methods of toy-l-s-math, one seed): status sees them done and nothing stale,
    the report remakes no training or evaluation, a forced cell is one job. The README's selection
    is the Makefile's demo."""
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index("After `make demo`") :].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    demo = re.search(r"^DEMO := (.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert lines[0] == f"DEMO='{demo}'"
    # the reduced grid's OPD and SCOUT seed-1 runs are its tuning search's: ESR and Prune-OPD stand in
    # (a selection that drops the compute-matched runs leaves the search runs' exports as they were)
    sel = "select={settings: [toy-l-s-math], methods: [esr, prune_opd], seeds: [1]}"
    scout = [sys.executable, "-m", "scout.cli"]
    done = []
    for line in lines[1:]:
        words = [w.replace("opd/s2/", "esr/s1/") for w in shlex.split(line.replace('"$DEMO"', "DEMO"))]
        words = [sel if w == "DEMO" else w for w in words]
        if words[0] == "scout":
            out = subprocess.run([*scout, *words[1:], "--configfile", "mini.yaml"], cwd=finished_grid,
                                 capture_output=True, text=True)  # fmt: skip
            assert out.returncode == 0, out.stderr
            assert "stale (made with another spec" not in out.stdout, out.stdout
            main = next(row.split() for row in out.stdout.splitlines() if row.startswith("main "))
            assert int(main[1]) >= 2, out.stdout  # the selection's OPD and SCOUT runs are done
        elif words[0] == "snakemake":
            plan = snakemake(finished_grid, "-n", *words[1:])
            counts = job_counts(plan) if "Job stats:" in plan.stdout + plan.stderr else {}
            assert not {"evaluate_math", "evaluate_code", "toy_pretrain"} & set(counts), (line, counts)
            if "--force" in words:
                assert counts == {"train": 1}, (line, counts)
            else:
                assert counts.get("train", 0) == 0, (line, counts)
        else:
            assert line == "make toy"
        done.append(words[0])
    assert done == ["scout", "snakemake", "snakemake", "scout", "make"]


def test_a_new_search_retrains_nothing_the_grid_has(finished_grid):
    """Adding a search (the LoRA teacher's LR, as config/toy-lora.yaml does) runs that search and
    nothing else: the other choices' specs name only what their searches train at, and a choice
    written again does not retrain the runs that read it (their spec holds the LR, not the file's
    time)."""
    over = {
        "settings": {"toy-l-s-math": {"teacher_lora_lr": "tuned"}},
        "tuning": {"teacher_lora_lr": [1e-3, 3e-3]},
        "experiments": {
            "lora": {
                "settings": ["toy-l-s-math"],
                "methods": [{"name": "scout-lora", "method": "scout", "teacher_lora_rank": 4}],
                "seeds": [1],
            }
        },
    }
    (finished_grid / "lora-lr.yaml").write_text(yaml.safe_dump(over))
    both = ["--configfile", str(finished_grid / "mini.yaml"), str(finished_grid / "lora-lr.yaml")]
    plan = job_counts(snakemake(finished_grid, *both, "-n"))
    assert plan.get("choose_lr") == 1 and plan.get("validate") == 2, plan
    assert plan.get("train") == 2, plan  # scout-lora-tlr1e-3 and 3e-3; the chosen one is scout-lora s1


def test_a_failed_forced_training_is_restored_and_nothing_downstream_is_remade(finished_grid):
    """Snakemake deletes train.json before a forced rerun; when the rerun fails (here: its student
    model is damaged), `scout status` offers the finished run, `scout restore` puts its record back
    with its time, and the next run of the grid has nothing to do."""
    target = "results/train/toy-l-s-code/opd_teacher_grpo/s1/train.json"  # toy-l-s-math's cells wait on its search
    record = (finished_grid / target).read_text()
    student = Path(json.loads(record)["spec"]["student"]) / "model.safetensors"
    student = student if student.is_absolute() else finished_grid / student
    whole, times = student.read_bytes(), student.stat()
    student.write_bytes(whole[: len(whole) // 2])
    try:
        out = snakemake(finished_grid, target, "--forcerun", target, check=False)
        assert out.returncode != 0 and not (finished_grid / target).exists()
    finally:
        student.write_bytes(whole)
        os.utime(student, ns=(times.st_atime_ns, times.st_mtime_ns))
    scout = [sys.executable, "-m", "scout.cli"]
    st = subprocess.run([*scout, "status", "--configfile", "mini.yaml"], cwd=finished_grid, capture_output=True, text=True)
    run = str(Path(target).parent)
    assert f"`scout restore {run}` puts it back" in st.stdout, st.stdout + st.stderr
    subprocess.run([*scout, "restore", run], cwd=finished_grid, check=True, capture_output=True)
    assert (finished_grid / target).read_text() == record  # the same text: key order is in the spec's digest
    assert "Nothing to be done" in snakemake(finished_grid, "-n").stdout


def test_the_pilot_measures_every_training_shape_and_leaves_the_grid_finished(finished_grid, monkeypatch):
    """snakemake pilot: a short job of each training shape (setting x variant, whole teacher
    intervals), as the grid's training jobs run; scout plan then predicts every training job of
    the grid from them, and the grid itself stays finished."""
    from scout import config as scout_config
    from scout import cost, plan, training_runs

    sel = "{settings: [toy-l-s-math], methods: [opd, scout]}"
    out = snakemake(finished_grid, "pilot", "--config", f"select={sel}")
    monkeypatch.chdir(finished_grid)
    cfg = scout_config.load("mini.yaml", select=sel)
    shapes = cost.pilot_cells(Grid.of(cfg))
    assert job_counts(out).get("pilot_train") == len(shapes) == 2
    pilots = cost.read_pilots(Grid.of(cfg))
    assert set(pilots) == {(c.setting, c.variant) for c in shapes}
    for c in shapes:
        p = pilots[(c.setting, c.variant)]
        assert p.steps == cost.pilot_steps(training_runs.run_spec(Grid.of(cfg), c)) and p.step_seconds > 0 and p.max_rss_mb > 0
    table = plan.grid_jobs(Grid.of(cfg), exists=lambda _: False, gpu=cost.gpu("h100"), pilots=pilots)
    train = table[(table["rule"] == "train") & (table["experiment"] != "tuning")]  # the search's LRs: no shape
    assert train["basis"].eq("pilot").all() and (train["expected_hours"] > 0).all()
    assert "Nothing to be done" in snakemake(finished_grid, "-n").stdout


def test_status_gives_the_grids_critical_path(finished_grid):
    """The chain of jobs no number of cores shortens, from Snakemake's records: it starts with the
    toy world's data and ends with a job nothing waits for, within the grid's wall time."""
    from scout import critical_path

    cmd = [sys.executable, "-m", "scout.cli", "status", "--configfile", "mini.yaml"]
    out = subprocess.run(cmd, cwd=finished_grid, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("critical path: "))
    total, chain = critical_path.longest_chain(critical_path.read_jobs(finished_grid))
    assert chain[0].key.split()[0] in ("toy_data", "toy_tokenizer") and f"{total:,.0f} s" in line
    assert sum(j.seconds for j in critical_path.read_jobs(finished_grid)) > total > 0


def test_rerun_of_one_training_cell(finished_grid):
    """A forced rerun trains the cell again from scratch, and on one machine a second run computes
    the first's digits bit for bit, the student's and the trained teacher's (what must hold on a
    machine of any numerics, where the record's models are not compared)."""
    target = "results/train/toy-l-s-code/opd_teacher_grpo/s1/train.json"
    out = snakemake(finished_grid, target, "--forcerun", target)
    assert "1 of 1 steps (100%) done" in out.stderr
    assert json.loads((finished_grid / target).read_text())["resumed_from"] is None  # trained again, not resumed
    old = list((finished_grid / target).parent.parent.glob("s1.superseded-*"))
    assert len(old) == 1
    new = (finished_grid / target).parent
    for model in ("model/final/model.safetensors", "model/final-teacher/model.safetensors"):
        assert fingerprint(new / model) == fingerprint(old[0] / model), model


def test_a_changed_hyperparameter_retrains_exactly_its_cells(finished_grid):
    """Changing ESR's token budget reruns the ESR cell from scratch (never its old checkpoint) and
    the evaluations and report downstream, nothing else."""
    cfg = yaml.safe_load((finished_grid / "mini.yaml").read_text())
    cfg["methods"]["esr"]["max_tokens"] = 6
    (finished_grid / "mini.yaml").write_text(yaml.safe_dump(cfg))
    plan = job_counts(snakemake(finished_grid, "-n"))
    assert plan.get("train") == 1 and plan.get("evaluate_math") == 1
    snakemake(finished_grid)
    run = finished_grid / "results/train/toy-l-s-math/esr/s1"
    summary = json.loads((run / "train.json").read_text())
    assert summary["resumed_from"] is None and summary["spec"]["method_cfg"]["esr"]["max_tokens"] == 6
    log = (finished_grid / "results/logs/train/toy-l-s-math/esr/s1.log").read_text()
    assert "method_cfg.esr.max_tokens: 8 -> 6" in log


def job_counts(out) -> dict[str, int]:
    """The "Job stats" table Snakemake prints before running."""
    text = out.stdout + out.stderr
    table = text[text.index("Job stats:") :].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def test_grid_ends_with_the_report(finished_grid):
    report = finished_grid / "results" / "report"
    manifest = json.loads((report / "manifest.json").read_text())
    assert manifest["missing"] == [] and manifest["records"] == manifest["expected_records"]
    assert "main_toy-l-s-math" in manifest["tables"]
    assert {"compute_matched_toy-l-s-math", "continuation_toy-l-s-math", "entropy_toy-l-s-math",
            "behaviour_toy-l-s-math"} <= set(manifest["figures"])  # fmt: skip
    # 24-token responses end before a second step: the probe has no step to judge, and the report
    # says so instead of drawing an empty figure (tests/report/test_behaviour.py works the probe by hand)
    reflect = pd.read_csv(finished_grid / "results" / "analysis" / "toy-l-s-math" / "reflection.csv")
    assert {"teacher", "after", "judged", "p_reflect"} <= set(reflect.columns)
    if reflect.empty:
        assert any(s.startswith("figure reflection skipped:") and "no rows" in s for s in manifest["skipped"])
    else:
        assert "reflection_toy-l-s-math" in manifest["figures"] and reflect.p_reflect.between(0, 1).all()
    cont = pd.read_csv(finished_grid / "results" / "analysis" / "toy-l-s-math" / "continuation.csv")
    # the LoRA teacher (experiment lora) is probed beside SCOUT's on the initial student's prefixes
    assert sorted(set(cont.teacher)) == ["initial", "scout", "scout-lora", "scout@step2"]
    assert set(cont[cont.teacher == "scout-lora"].prefixes) == {"initial-student"}
    assert sorted(set(cont.prefix_ratio)) == [
        0.25,
        0.75,
    ]
    assert {"student@step2", "final-student", "initial-student", "own"} == set(cont.prefixes)  # matched checkpoints
    assert cont.accuracy.between(0, 1).all() and (cont.prefix_tokens >= 0).all()
    assert (report / "report.pdf").exists() == tex_available()


def test_the_analysis_holds_one_teacher_at_a_time(finished_grid, tmp_path, monkeypatch):
    """The probes load one teacher after another in one job, each closed before the next loads (two
    vLLM engines do not fit on one GPU; tests/evaluate/test_vllm_cpu.py shows that closing stops
    vLLM's processes); closing moves no digit: the job's tables, run again here, are the grid's."""
    done = finished_grid / "results" / "analysis" / "toy-l-s-math"
    digest = json.loads((done / "analysis.json").read_text())["spec_digest"]
    spec = json.loads((finished_grid / "results" / "specs" / "analysis" / f"toy-l-s-math.{digest}.json").read_text())
    opened, load = [], analysis._engine

    def engine(spec, teacher):
        assert all(e.model is None for e in opened), "a teacher's engine is still open as the next loads"
        opened.append(load(spec, teacher))
        return opened[-1]

    monkeypatch.setattr(analysis, "_engine", engine)
    monkeypatch.chdir(finished_grid)
    analysis.run(spec, tmp_path, log=lambda m: None)
    assert len(opened) == 1 + len(spec["runs"]) + len(spec.get("controls", [])) >= 3
    assert all(e.model is None for e in opened)
    for table in ("continuation", "entropy", "reflection"):
        assert (tmp_path / f"{table}.csv").read_bytes() == (done / f"{table}.csv").read_bytes(), table


def test_report_target_reads_only_the_cache(finished_grid, tmp_path):
    """With the eval records cached and every checkpoint, model and dataset gone, `snakemake report`
    runs the report job alone."""
    for cached in ("eval", "tuning"):  # records, and the tuning stage's choices they are labelled by
        shutil.copytree(finished_grid / "results" / cached, tmp_path / "results" / cached)
    shutil.copy(finished_grid / "mini.yaml", tmp_path / "mini.yaml")
    assert not (tmp_path / "results" / "train").exists()
    out = snakemake(tmp_path, "report")
    assert job_counts(out) == {"report": 1}
    manifest = json.loads((tmp_path / "results" / "report" / "manifest.json").read_text())
    assert manifest["missing"] == [] and manifest["records"] > 0
    assert (tmp_path / "results" / "report" / "report.pdf").exists() == tex_available()


def test_snakemakes_own_report_holds_the_results(finished_grid, tmp_path):
    """`snakemake --report` gives Snakemake users the results beside the runtime statistics: the
    report page, every figure and every table, in their categories."""
    import zipfile

    snakemake(finished_grid, "--report", str(tmp_path / "report.zip"))
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    manifest = json.loads((finished_grid / "results" / "report" / "manifest.json").read_text())
    assert any(n.endswith("/index.html") for n in names)  # Snakemake files it under data/raw/<hash>/
    for fig in manifest["figures"]:
        assert any(n.endswith(f"/{fig}.png") for n in names), fig
    assert sum(n.endswith(".tex") for n in names) == len(manifest["tables"])


def test_two_selections_reports_stand_side_by_side(finished_grid):
    """Experiments side by side: each selection's report goes to a folder named by it, and the
    whole grid's page stays as it was."""
    whole = finished_grid / "results" / "report" / "index.html"
    before = whole.read_bytes()
    sels = {"select-settings-toy-l-s-math-methods-esr-opd-seeds-1":  # its names in sorted order
            "select={settings: [toy-l-s-math], methods: [opd, esr], seeds: [1]}",
            "select-settings-toy-l-s-math-methods-opd-prune_opd-seeds-1":
            "select={settings: [toy-l-s-math], methods: [opd, prune_opd], seeds: [1]}"}  # fmt: skip
    for sel in sels.values():
        snakemake(finished_grid, "report", "--config", sel)
    for folder in sels:
        page = (finished_grid / "results" / "report" / folder / "index.html").read_text()
        assert "a selection of the toy grid" in page, folder
        own, other = ("ESR", "Prune-OPD") if "esr" in folder else ("Prune-OPD", "ESR")
        assert f">{own}<" in page and f">{other}<" not in page, folder  # each shows its own selection's methods
        assert (finished_grid / "results" / "summary" / folder / "runs.csv").exists()
    assert whole.read_bytes() == before
