"""The expected cost beside the requested upper bound (scout.cost, scout plan): the model's FLOPs
and seconds by hand, the GPU presets, the pilot's spec and its reading, and the disk a run holds
with its evaluated checkpoints kept or exported when saved."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from scout import config as scout_config
from scout import cost, jobs, plan, runs, training_runs
from scout.cli import main
from scout.grid import Grid
from scout.paths import Paths
from tests.support.toy import REPO

PAPER = scout_config.load(REPO / "config" / "paper.yaml")


def _spec(method: str = "opd", **over) -> dict:
    spec = {"method": method, "batch_size": 4, "n": 2, "max_prompt_length": 10, "max_response_length": 30,
            "ppo_epochs": 1, "total_steps": 10, "method_cfg": {"scout": {"interval": 2, "k": 4}}}  # fmt: skip
    return {**spec, **over}


def test_step_flops_by_hand():
    """8 sequences of 40 tokens at half their length: 160 tokens, 120 of them generated. OPD:
    decoding 2 x 1e9 x 120; scoring the old log-probs (2 x 1e9 x 160) and the teacher's (2 x 4e9 x
    160); training 8 x 1e9 x 160. SCOUT adds, every 2 steps, 4 continuations of each of 4 prompts
    (8 sequences at half length) decoded and trained by the teacher."""
    opd = cost.step_flops(_spec(), 1e9, 4e9)
    assert opd == pytest.approx({"decode": 2.4e11, "prefill": 3.2e11 + 1.28e12, "train": 1.28e12})
    scout = cost.step_flops(_spec("scout"), 1e9, 4e9)
    assert scout["decode"] == pytest.approx(2.4e11 + 2 * 4e9 * 8 * 30 / 2)
    assert scout["train"] == pytest.approx(1.28e12 + 8 * 4e9 * 8 * 40 / 2)
    assert cost.step_flops(_spec("grpo"), 1e9, 4e9)["prefill"] == pytest.approx(3.2e11)  # no teacher


def test_modelled_seconds_by_hand():
    """Two GPUs of 100 TFLOPs: a step is 2.4e11 / (2e14 x 0.10) + 1.6e12 / (2e14 x 0.40) +
    1.28e12 / (2e14 x 0.35) = 0.012 + 0.020 + 0.0183 s; 10 steps, 10 minutes to start, one export."""
    g = cost.GPU("test", 100.0, 40)
    step = 0.012 + 0.020 + 1.28e12 / (2e14 * 0.35)
    assert cost.modelled_train_seconds(_spec(), 1e9, 4e9, 2, g) == pytest.approx(10 * step + 600 + 120)
    # a continuation trains only its own steps; each evaluated checkpoint is one export more
    cont = _spec(continue_from={"run": "x", "step": 4}, export_steps=[6, 8])
    assert cost.modelled_train_seconds(cont, 1e9, 4e9, 2, g) == pytest.approx(6 * step + 600 + 3 * 120)
    ev = {"benchmarks": {"a": {"rows": 10, "repeats": 4}}, "sampling": {"max_new_tokens": 100}}
    assert cost.modelled_eval_seconds(ev, 1e9, 2, g) == pytest.approx(600 + 2 * 1e9 * 40 * 50 / (2e14 * 0.1))  # 0.4 s


def test_gpu_presets_and_a_custom_one():
    assert cost.gpu("h100").tflops == 989 and cost.gpu("a100-80").mem_gb == 80
    custom = cost.gpu("450:48")
    assert (custom.tflops, custom.mem_gb) == (450, 48)
    with pytest.raises(SystemExit, match="unknown GPU 'v100': one of a100-40, a100-80, h100, h200, or TFLOPS:GB"):
        cost.gpu("v100")


def test_the_pilot_runs_whole_teacher_intervals_and_nothing_else_of_the_run():
    assert cost.pilot_steps(_spec()) == 4
    assert cost.pilot_steps(_spec("scout", method_cfg={"scout": {"interval": 3}})) == 6
    assert cost.pilot_steps(_spec("scout", method_cfg={"scout": {"interval": 10}})) == 10
    spec = _spec("scout", lr="tuned", save_every=16, export_steps=[5], continue_from={"run": "x", "step": 4},
                 method_cfg={"scout": {"interval": 2, "teacher_lr": "tuned"}})  # fmt: skip
    before = copy.deepcopy(spec)
    p = cost.pilot_spec(spec)
    assert (p["total_steps"], p["save_every"], p["export_steps"]) == (4, 4, [])
    assert "continue_from" not in p and p["lr"] == 1e-6 and p["method_cfg"]["scout"]["teacher_lr"] == 1e-6
    assert spec == before  # the grid's spec is not touched


def _pilot_folder(folder, setting="s", variant="v", s=10.0, rss="300.5", steps=(1.0, 2.0, 3.0, 2.0)):
    folder.mkdir(parents=True)
    record = {"spec": {"setting": setting, "variant": variant}, "peak_gpu_gb": 1.5}  # the embedded trainer's, on CUDA
    (folder / "train.json").write_text(json.dumps(record))
    (folder / "benchmark.tsv").write_text(f"s\th:m:s\tmax_rss\n{s}\t0:00:10\t{rss}\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "step_seconds": x}) + "\n"
                                                  for i, x in enumerate(steps)))  # fmt: skip
    from torch.utils.tensorboard import SummaryWriter  # verl's record of the same: its timing_s/step

    with SummaryWriter(str(folder / "tensorboard")) as tb:
        for i, x in enumerate(steps):
            tb.add_scalar("timing_s/step", x, i + 1)
            tb.add_scalar("actor/perf/max_memory_allocated_gb", 1.0 + i, i + 1)  # GiB, as verl logs it
    return folder


def test_a_pilot_is_read_as_start_up_plus_its_mean_step(tmp_path):
    """10 s for the job, steps of 1, 2, 3 and 2 s: a step of 2 s and 2 s of the rest; a job of 100
    steps then takes 202 s."""
    from scout.embedded.backend import EMBEDDED

    folder = _pilot_folder(tmp_path / "p")
    p = cost.read_pilot(folder, "toy-l-s-math", "opd", EMBEDDED)
    assert (p.steps, p.step_seconds, p.start_seconds, p.max_rss_mb, p.peak_gpu_gb) == (4, 2.0, 2.0, 300.5, 1.5)
    assert p.seconds(100) == pytest.approx(202.0)
    assert (p.setting, p.variant) == ("toy-l-s-math", "opd")
    assert cost.read_pilot(tmp_path / "none", "toy-l-s-math", "opd", EMBEDDED) is None


def test_a_pilot_measurement_takes_precedence_over_the_model(tmp_path):
    """On the paper grid, a pilot of q4b's SCOUT makes each of its runs start-up plus its steps at
    the pilot's pace; every other training job stays modelled, and the plan says which is which."""
    cfg = {**PAPER, "results": str(tmp_path / "results")}
    cell = Grid.of(cfg).find("q4b-q1.7b-math", "scout", 2)
    _pilot_folder(Grid.of(cfg).paths.pilot_dir(cell.setting, cell.variant), cell.setting, cell.variant, s=900.0,
                  steps=(100.0, 200.0))  # fmt: skip
    pilots = cost.read_pilots(Grid.of(cfg))
    assert list(pilots) == [("q4b-q1.7b-math", "scout")]
    # verl's trainers' peak over the steps (2 GiB at the second), in GB
    assert pilots[("q4b-q1.7b-math", "scout")].peak_gpu_gb == pytest.approx(2 * 2**30 / 1e9)
    table = plan.grid_jobs(Grid.of(cfg), exists=lambda _: False, gpu=cost.gpu("h100"), pilots=pilots).set_index("target")
    row = table.loc[f"{Paths.of(cfg).train_dir(cell.setting, cell.variant, 2)}/train.json"]
    total = training_runs.run_spec(Grid.of(cfg), cell)["total_steps"]
    assert row["basis"] == "pilot" and row["expected_hours"] * 3600 == pytest.approx(600 + 150 * total)
    assert row["expected_gpu_hours"] == pytest.approx(row["expected_hours"] * row["gpus"])
    others = table[(table["rule"] == "train") & (table["basis"] != "pilot")]
    assert len(others) and set(others["basis"]) == {"model"}
    text = plan.render_expected(table.reset_index(), cost.gpu("h100"), pilots)
    assert "pilot: 1 training shapes measured" in text and "model: H100 80GB, 989 TFLOPs" in text
    assert "peak_gpu_gb" in text and "max_rss_mb" in text and "q4b-q1.7b-math" in text


def test_plan_prints_expected_hours_beside_the_upper_bounds(capsys):
    assert main(["plan", "--configfile", str(REPO / "config" / "paper.yaml"), "--gpu", "h200"]) == 0
    text = capsys.readouterr().out
    assert "an upper bound" in text and "Expected cost of the jobs still to run" in text
    assert "modelled for H200 141GB" in text
    expected = plan.grid_jobs(Grid.of(PAPER), exists=lambda _: False, gpu=cost.gpu("h200"))
    train = expected[expected["rule"] == "train"]
    assert train["basis"].eq("model").all()
    # an estimate under its bound: every modelled job ends within its time limit
    assert (train["expected_hours"] * 60 < train["runtime"]).all()
    # a faster GPU, a smaller figure, the same bound
    slow = plan.grid_jobs(Grid.of(PAPER), exists=lambda _: False, gpu=cost.gpu("a100-40"))
    assert slow["expected_gpu_hours"].sum() > expected["expected_gpu_hours"].sum()
    assert slow["gpu_hours"].sum() == expected["gpu_hours"].sum()


def test_the_disk_says_which_cells_keep_checkpoints_and_what_exporting_them_saves():
    """q4b's SCOUT seed 1 also serves scout-cm's compute-matched checkpoints (8, every 40 steps)
    and the analysis' probe at step 160 (one of them): 8 checkpoints kept with their optimizer
    state, or none with keep_checkpoints: exported (the latest and the next, and 9 bf16 exports)."""
    table = plan.grid_jobs(Grid.of(PAPER), exists=lambda _: False).set_index("target")
    row = table.loc["results-paper/train/q4b-q1.7b-math/scout/s1/train.json"]
    assert row["kept_for"] == ("scout (main: the analysis' probes at step 160); "
                               "scout-cm (compute_matched: 8 every 40 steps)")  # fmt: skip
    s, t = 1.72, 4.02
    assert row["peak_disk_gb"] == pytest.approx(10 * (s + t) * 12 + 9 * s * 2)
    assert row["exported_disk_gb"] == pytest.approx(2 * (s + t) * 12 + 9 * s * 2)
    exported = copy.deepcopy(PAPER)
    exported["training"]["keep_checkpoints"] = "exported"
    scout_config.validate(exported)
    again = plan.grid_jobs(Grid.of(exported), exists=lambda _: False).set_index("target")
    assert again.loc[row.name, "peak_disk_gb"] == pytest.approx(row["exported_disk_gb"])


def test_keep_checkpoints_reaches_the_verl_spec_only_away_from_its_default():
    """The spec's rule: at its default the key is absent (no digest moves); exported is in the spec
    of a verl job, and it does not change the run's weights spec (a finished run stays finished)."""
    cfg = copy.deepcopy(PAPER)
    cell = Grid.of(cfg).find("q4b-q1.7b-math", "scout", 1)
    before = jobs.train_job_spec(Grid.of(cfg), cell)
    cfg["training"]["keep_checkpoints"] = "evaluated"
    assert jobs.train_job_spec(Grid.of(cfg), cell) == before
    cfg["training"]["keep_checkpoints"] = "exported"
    after = jobs.train_job_spec(Grid.of(cfg), cell)
    assert after["keep_checkpoints"] == "exported" and "keep_checkpoints" not in before
    assert runs.weights_spec(after) == runs.weights_spec(before)
    from scout.verl import config as vc

    res = jobs.train_resources(Grid.of(cfg), cell.setting, cell.method, cell.variant)
    assert "+scout.export_when_saved=true" in vc.overrides(after, res, "/tmp/out")
    assert not any("export_when_saved" in o for o in vc.overrides(before, res, "/tmp/out"))


def test_a_bad_keep_checkpoints_is_named():
    cfg = copy.deepcopy(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()))
    cfg["training"]["keep_checkpoints"] = "none"
    with pytest.raises(scout_config.ConfigError, match=r"training\.keep_checkpoints: 'none' is not one of"):
        scout_config.validate(cfg)
