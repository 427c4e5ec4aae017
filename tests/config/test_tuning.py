"""The tuning stage: the choice by hand, tuned LRs resolved from the choices, search runs shared with
the grid's cells once chosen (never trained twice), validation sets apart from every test prompt, and
the config errors that name what a tuned setting lacks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from scout import config as scout_config
from scout import grid, jobs, training_runs, tuning
from scout.evaluate import check_disjoint
from scout.grid import Grid
from scout.toy.world import build_data
from tests.support.toy import cell_spec, dry_run, mini_config


def test_the_best_validation_score_is_chosen_and_a_tie_goes_to_the_earlier_point():
    points = [{"lr": 1e-6, "score": 0.40}, {"lr": 3e-6, "score": 0.55}, {"lr": 5e-6, "score": 0.55},
              {"lr": 7e-6, "score": 0.30}]  # fmt: skip
    assert tuning.choose(points)["lr"] == 3e-6
    assert tuning.choose([{"lr": 2e-6, "score": 0.1}])["lr"] == 2e-6
    with pytest.raises(ValueError, match="no search points"):
        tuning.choose([])
    with pytest.raises(ValueError, match=r"without a validation score: \[5e-06\]"):
        tuning.choose([{"lr": 1e-6, "score": 0.2}, {"lr": 5e-6, "score": math.nan}])


def test_the_choice_file_holds_every_points_score_and_its_evaluation_error(tmp_path):
    def record(name, mean, sem):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"mean": mean, "sem": sem}))
        return str(path)

    spec = {"setting": "s", "param": "student_lr", "method": "opd", "validation": {"data": "math-val"},
            "points": [{"lr": 1e-6, "variant": "opd-lr1e-6", "seeds": [1, 2],
                        "records": [record("a1", 0.50, 0.03), record("a2", 0.60, 0.04)]},
                       {"lr": 3e-6, "variant": "opd-lr3e-6", "seeds": [1, 2],
                        "records": [record("b1", 0.40, 0.0), record("b2", 0.44, 0.0)]}]}  # fmt: skip
    lines = []
    out = tuning.write_choice(spec, tmp_path / "choice" / "student_lr.json", log=lines.append)
    assert json.loads((tmp_path / "choice" / "student_lr.json").read_text()) == out
    assert out["chosen"] == 1e-6
    first = out["points"][0]
    assert first["score"] == pytest.approx(0.55) and first["scores"] == [0.50, 0.60]
    assert first["sem"] == pytest.approx(0.025)  # sqrt(0.03^2 + 0.04^2) / 2 = 0.05 / 2
    assert out["points"][1]["sem"] == 0.0
    assert lines[0] == "s student_lr 1e-06: validation 55.0 (± 2.5)  <- chosen"


def test_the_grids_default_to_the_papers():
    assert tuning.search_grid({}, "student_lr") == [1e-6, 3e-6, 5e-6, 7e-6]
    assert tuning.search_grid({"tuning": {"teacher_lr": [2e-4]}}, "teacher_lr") == [2e-4]
    assert len(tuning.search_grid({"tuning": {}}, "teacher_lr")) == 5


def test_search_runs_are_named_by_their_learning_rate():
    assert tuning.variant_name("student_lr", 3e-5) == "opd-lr3e-5"
    assert tuning.variant_name("teacher_lr", 1.5e-4) == "scout-tlr1.5e-4"
    assert tuning.variant_name("student_lr", 5e-6) == "opd-lr5e-6"


def _tuned(tmp_path) -> dict:
    cfg = mini_config(str(tmp_path / "results"), tuned=True)
    return scout_config.validate(cfg)


def _choose(cfg: dict, param: str, value: float) -> None:
    path = tuning.choice_path(cfg, "toy-l-s-math", param)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"chosen": value}))


def test_tuned_learning_rates_come_from_the_written_choices(tmp_path):
    cfg = _tuned(tmp_path)
    assert tuning.tuned_settings(cfg) == {"toy-l-s-math": ["student_lr", "teacher_lr"]}
    assert tuning.lr(tuning.resolve(cfg), "toy-l-s-math", "student_lr") == tuning.TUNED
    assert tuning.pending(cfg) == [("toy-l-s-math", "student_lr"), ("toy-l-s-math", "teacher_lr")]
    with pytest.raises(tuning.Pending, match="student_lr is being tuned"):
        tuning.resolve(cfg, strict=True)
    _choose(cfg, "student_lr", 3e-4)
    _choose(cfg, "teacher_lr", 1.5e-4)
    done = tuning.resolve(cfg, strict=True)
    assert done["settings"]["toy-l-s-math"]["student_lr"] == tuning.TUNED  # the search stays part of the grid
    assert (tuning.lr(done, "toy-l-s-math", "student_lr"), tuning.lr(done, "toy-l-s-math", "teacher_lr")) == (
        3e-4,
        1.5e-4,
    )
    assert tuning.lr(done, "toy-l-s-code", "student_lr") == 1.5e-4  # a number is itself
    scout = cell_spec(done, "toy-l-s-math", "scout", 1)
    assert scout["lr"] == 3e-4 and scout["method_cfg"]["scout"]["teacher_lr"] == 1.5e-4
    dense = cell_spec(done, "toy-l-s-math", "scout-f1", 2)  # f = 1 of the main f = 2
    assert dense["method_cfg"]["scout"]["teacher_lr"] == pytest.approx(1.5e-4 / 2)
    assert cell_spec(done, "toy-l-s-math", "grpo", 1)["lr"] == cfg["training"]["grpo"]["lr"]


def test_a_training_job_whose_learning_rate_is_still_being_tuned_is_refused_by_name(tmp_path):
    cfg = _tuned(tmp_path)
    spec = cell_spec(cfg, "toy-l-s-math", "scout", 1)
    assert spec["lr"] == tuning.TUNED
    path = tmp_path / "scout.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "scout.cli", "train", "--spec", f"@{path}", "--out",
                           str(tmp_path / "run")], capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0
    assert "lr and teacher_lr: 'tuned'; run the tuning stage first" in done.stderr
    assert not (tmp_path / "run" / "model").exists()


def test_a_run_waits_for_the_choices_its_own_spec_reads(tmp_path):
    cfg = _tuned(tmp_path)
    student, teacher = ("toy-l-s-math", "student_lr"), ("toy-l-s-math", "teacher_lr")

    def needed(setting, variant, seed):
        return training_runs.choices_needed(Grid.of(cfg), Grid.of(cfg).find(setting, variant, seed))

    assert needed("toy-l-s-math", "opd-lr1.5e-4", 1) == []  # the first search
    assert needed("toy-l-s-math", "scout-tlr1.5e-4", 1) == [student]  # trains at the chosen student LR
    assert needed("toy-l-s-math", "scout", 1) == [student, teacher]
    assert needed("toy-l-s-math", "scout-f1", 2) == [student, teacher]
    assert needed("toy-l-s-math", "opd", 1) == [student]  # no teacher LR in an OPD spec
    assert needed("toy-l-s-math", "opd-2ep", 1) == [student]
    assert needed("toy-l-s-math", "grpo", 1) == []  # GRPO keeps its own LR
    assert needed("toy-l-s-code", "opd_teacher_grpo", 1) == []  # a setting no choice touches


def test_the_chosen_search_runs_are_the_grids_and_are_never_trained_twice(tmp_path):
    cfg = _tuned(tmp_path)
    search = Grid.of(cfg).search_cells
    assert [c.variant for c in search] == ["opd-lr1.5e-4", "opd-lr3e-4", "scout-tlr1.5e-4", "scout-tlr3e-4"]
    before = {c: training_runs.run_spec(Grid.of(cfg), c) for c in search[:2]}  # the student LR's runs need no choice
    _choose(cfg, "student_lr", 3e-4)
    _choose(cfg, "teacher_lr", 1.5e-4)
    done = tuning.resolve(cfg)
    # a search run's spec (exports included) is the same before and after the choice: no rerun
    assert all(training_runs.run_spec(Grid.of(done), c) == spec for c, spec in before.items())
    assert before[search[1]]["export_steps"] == [2]  # what opd-2ep, continuing it once chosen, evaluates
    plans = Grid.of(done).plans
    opd, scout = (Grid.of(done).find("toy-l-s-math", v, 1) for v in ("opd", "scout"))
    assert plans[opd].shares == search[1] and plans[scout].shares == search[2]
    assert plans[Grid.of(done).find("toy-l-s-math", "opd-2ep", 1)].continues == search[1]
    assert jobs.run_dir(Grid.of(done), "toy-l-s-math", "scout", 1).endswith("train/toy-l-s-math/scout-tlr1.5e-4/s1")
    assert jobs.record_source(Grid.of(done), "toy-l-s-math", "opd", 1, "final") == ("toy-l-s-math", "opd-lr3e-4", "1", "final")
    # the chosen runs are evaluated on the test benchmarks; the others on the validation set only
    evaluated = {
        (v, ck) for s, v, seed, ck in jobs.eval_units(Grid.of(done)) if s == "toy-l-s-math" and v in {c.variant for c in search}
    }
    assert evaluated == {("opd-lr3e-4", "step2"), ("opd-lr3e-4", "final"), ("scout-tlr1.5e-4", "step2"),
                         ("scout-tlr1.5e-4", "final")}  # fmt: skip
    assert not any(v in {c.variant for c in search} for _, v, _, _ in jobs.report_units(Grid.of(done)))


def test_the_teachers_search_trains_at_the_chosen_student_lr(tmp_path):
    cfg = _tuned(tmp_path)
    cell = Grid.of(cfg).find("toy-l-s-math", "scout-tlr3e-4", 1)
    assert Grid.of(tuning.resolve(cfg)).spec(cell)["lr"] == tuning.TUNED  # not specifiable before the choice
    _choose(cfg, "student_lr", 1.5e-4)
    spec = Grid.of(tuning.resolve(cfg)).spec(cell)
    assert spec["lr"] == 1.5e-4 and spec["method_cfg"]["scout"]["teacher_lr"] == 3e-4


def test_validation_sets_are_held_out_from_every_train_and_test_prompt(tmp_path):
    cfg = mini_config(str(tmp_path / "results"))
    counts = build_data(cfg, tmp_path / "data")
    assert counts["math-val"] == 8 and counts["code-val"] == 8
    read = lambda n: [json.loads(x) for x in (tmp_path / "data" / f"{n}.jsonl").read_text().splitlines()]  # noqa: E731
    tests = {b: read(b) for b in cfg["benchmarks"]}
    train = {r["prompt"] for n in cfg["toy"]["splits"] for r in read(n)}
    for name in cfg["toy"]["validation"]:
        rows = read(name)
        assert tuning.overlap(rows, tests) == {} and not {r["prompt"] for r in rows} & train
    # a validation set that shares a prompt with a test benchmark is refused by the evaluation job
    leaked = read("math-val")[:3] + [tests["tm-hard"][2]]
    check_disjoint({"math-val": read("math-val")}, tests)
    with pytest.raises(Exception, match=r"math-val: validation prompts that are also test prompts \(tm-hard: 1"):
        check_disjoint({"math-val": leaked}, tests)


def test_overlap_compares_prompt_text_across_formats():
    val = [{"id": "v1", "prompt": "What is  2 + 2?"}, {"id": "v2", "prompt": [{"role": "user", "content": "x"}]}]
    tests = {
        "a": [{"id": "a7", "prompt": "what is 2 + 2?"}],
        "b": [{"id": "b1", "prompt": "x"}, {"id": "b2", "prompt": "y"}],
    }
    assert tuning.overlap(val, tests) == {"a": ["a7"], "b": ["b1"]}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["tuning"]["validation"].pop("math"), "tuning.validation has no math validation set"),
        (lambda c: c["tuning"]["validation"]["math"].update(data="nope"), "unknown validation set 'nope'"),
        (lambda c: c["tuning"]["validation"]["math"].update(data="code-val"), "'code-val' is not a math set"),
        (lambda c: c["settings"]["toy-l-s-math"].update(student_lr="tune"), "student_lr"),
    ],
)
def test_a_tuned_setting_without_what_its_search_needs_is_refused(tmp_path, change, message):
    cfg = mini_config(str(tmp_path / "results"), tuned=True)
    change(cfg)
    with pytest.raises(scout_config.ConfigError, match=message):
        grid.check(scout_config.validate(cfg))  # as the workflow and scout check a config


def test_the_workflow_runs_the_searches_first_and_the_independent_settings_beside_them(tmp_path):
    cfg = mini_config("results", tuned=True)
    (tmp_path / "mini.yaml").write_text(yaml.safe_dump(cfg))
    out = dry_run(tmp_path, tmp_path / "mini.yaml")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "checkpoint" in text.lower() and "choose_lr" in text and "validate" in text
    # the student LR's two OPD runs, and the settings no choice touches (code and the DAPO mirror), start at once
    for target in ("train/toy-l-s-math/opd-lr1.5e-4/s1/train.json", "train/toy-l-s-math/opd-lr3e-4/s1/train.json",
                   "train/toy-l-s-code/opd_teacher_grpo/s1/train.json", "train/toy-mg-s-math/optr/s1/train.json"):  # fmt: skip
        assert target in text, target
    assert "train/toy-l-s-math/scout/s1/train.json" not in text  # waits for the choices
    # the searches' chain goes first: the search runs and validations at priority 3, the others below
    jobs = text.split("\n\n")
    search = [j for j in jobs if "output: results/train/toy-l-s-math/opd-lr" in j]
    other = [j for j in jobs if "output: results/train/toy-l-s-code/" in j]
    assert search and all("priority: 3" in j for j in search)
    assert other and all("priority: 1" in j for j in other)


def test_a_lora_teachers_lr_is_searched_at_its_rank_and_its_chosen_run_is_the_grids(tmp_path):
    """Beyond the paper: ``teacher_lora_lr: tuned`` searches SCOUT with the LoRA variant's rank over
    ``tuning.teacher_lora_lr`` at the chosen student LR, beside (not after) the full teacher's search;
    the LoRA cells train at its choice and the chosen point's run is their seed-1 run."""
    cfg = mini_config(str(tmp_path / "results"), tuned=True)
    cfg["settings"]["toy-l-s-math"]["teacher_lora_lr"] = tuning.TUNED
    cfg["tuning"]["teacher_lora_lr"] = [1e-3, 3e-3]
    cfg["experiments"]["lora"]["methods"] = [{"name": "scout-lora", "method": "scout", "teacher_lora_rank": 4}]
    cfg = scout_config.validate(cfg)
    assert tuning.tuned_settings(cfg)["toy-l-s-math"] == ["student_lr", "teacher_lr", "teacher_lora_lr"]
    lora = [c for c in Grid.of(cfg).search_cells if tuning.param_of(c.variant) == "teacher_lora_lr"]
    assert [(c.variant, c.method, c.overrides) for c in lora] == [
        ("scout-lora-tlr1e-3", "scout", (("teacher_lora_rank", 4), ("teacher_lr", 1e-3))),
        ("scout-lora-tlr3e-3", "scout", (("teacher_lora_rank", 4), ("teacher_lr", 3e-3))),
    ]
    student, lora_lr = ("toy-l-s-math", "student_lr"), ("toy-l-s-math", "teacher_lora_lr")
    assert training_runs.choices_needed(Grid.of(cfg), lora[0]) == [student]  # not the full teacher's choice
    cell = Grid.of(cfg).find("toy-l-s-math", "scout-lora", 1)
    assert training_runs.choices_needed(Grid.of(cfg), cell) == [student, lora_lr]
    _choose(cfg, "student_lr", 3e-4)
    _choose(cfg, "teacher_lr", 1.5e-4)
    _choose(cfg, "teacher_lora_lr", 3e-3)
    done = tuning.resolve(cfg, strict=True)
    spec = Grid.of(done).spec(cell)
    assert spec["lr"] == 3e-4 and spec["method_cfg"]["scout"]["teacher_lr"] == 3e-3
    assert spec["method_cfg"]["scout"]["teacher_lora"]["rank"] == 4
    full = cell_spec(done, "toy-l-s-math", "scout", 1)
    assert full["method_cfg"]["scout"]["teacher_lr"] == 1.5e-4 and "teacher_lora" not in full["method_cfg"]["scout"]
    assert Grid.of(done).plans[cell].shares == lora[1]


def test_the_lora_search_runs_only_where_a_lora_teacher_trains_and_at_one_rank():
    assert tuning.param_of("scout-lora-tlr1.2e-3") == "teacher_lora_lr"
    assert tuning.param_of("scout-tlr1.2e-4") == "teacher_lr" and tuning.param_of("opd-lr3e-5") == "student_lr"
    assert tuning.param_of("scout-lora") is None and tuning.param_of("scout-f1") is None
    cfg = mini_config("results", tuned=True)
    cfg["settings"]["toy-l-s-math"]["teacher_lora_lr"] = tuning.TUNED
    without = {**cfg, "experiments": {k: v for k, v in cfg["experiments"].items() if k != "lora"}}
    assert tuning.tuned_settings(without)["toy-l-s-math"] == ["student_lr", "teacher_lr"]
    cfg["experiments"]["lora"]["methods"].append({"name": "scout-lora16", "method": "scout", "teacher_lora_rank": 16})
    with pytest.raises(scout_config.ConfigError, match=r"LoRA teachers have ranks \[4, 16\]"):
        _ = Grid.of(cfg).search_cells
