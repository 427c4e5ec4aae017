"""The verl backend's driver and trainer on CPU: what `scout train` does before and after verl
trains (parquet, checked config, refusal without GPUs, FSDP -> Hugging Face export and the
checkpoint layout), and the trainer's pure pieces against verl's own classes and data structures."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from scout import algorithms as alg
from scout import resources, runs
from tests.support.toy import REPO

pytest.importorskip("verl", reason="needs verl (pip install '.[verl]')")
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402

from scout.grid import Grid
from scout.verl import checkpoints as ck  # noqa: E402
from scout.verl import driver  # noqa: E402
from scout.verl import teacher_phase as tp  # noqa: E402
from scout.verl import trainer as vt  # noqa: E402

PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())


def paper_spec(setting, variant, train_data, seed=1):
    cell = Grid.of(PAPER).find(setting, variant, seed)
    spec = Grid.of(PAPER).spec(cell)
    spec["resources"] = resources.job_resources(PAPER, "train", setting, cell.method, variant)
    spec["train_data"] = str(train_data)
    return spec


@pytest.fixture
def math_rows(world, tmp_path):
    src = tmp_path / "math-train.jsonl"
    src.write_text((world["data"] / "math-train.jsonl").read_text())
    return src


def test_dry_run_through_the_cli_writes_the_parquet_and_the_checked_config(math_rows, tmp_path):
    spec = paper_spec("q8b-q1.7b-math", "scout", math_rows)
    out = tmp_path / "run"
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "scout.cli", "train", "--spec", json.dumps(spec), "--out", str(out), "--dry-run"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "math-train.verl.parquet").exists()
    cfg = OmegaConf.load(out / "verl_config.yaml")
    assert cfg.data.train_files == str(tmp_path / "math-train.verl.parquet")
    assert cfg.trainer.default_local_dir == f"{out}/checkpoints" and cfg.scout.method == "scout"
    assert (cfg.trainer.nnodes, cfg.distillation.nnodes, cfg.scout.teacher_train.nnodes) == (1, 1, 2)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "scout.verl.plugin"


def test_a_workflow_job_places_its_pools_by_the_resources_beside_its_spec(math_rows, tmp_path):
    """As the workflow runs it: the spec file holds what the run computes, its resources lie beside
    it (so that a changed time limit changes no spec), and the driver places its pools by them."""
    from scout import workflow

    spec = paper_spec("q8b-q1.7b-math", "scout", math_rows)
    placed = {**spec.pop("resources"), "nodes": 3}
    at = workflow.placed_spec_file(str(tmp_path / "results"), "train/x/scout/s1", spec, placed)
    assert "resources" not in json.loads(Path(at[1:]).read_text())
    out = tmp_path / "run"
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "scout.cli", "train", "--spec", at, "--out", str(out), "--dry-run"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    cfg = OmegaConf.load(out / "verl_config.yaml")
    assert (cfg.trainer.nnodes, cfg.distillation.nnodes, cfg.scout.teacher_train.nnodes) == (1, 1, 1)
    assert workflow.placed_spec_file(str(tmp_path / "results"), "train/x/scout/s1", spec, {**placed, "runtime": 60}) == at
    assert workflow.resources_of(at)["runtime"] == 60


def test_a_job_near_its_time_limit_has_verls_trainer_save_first(math_rows, tmp_path, monkeypatch):
    """Worked by hand through verl's own rule: with steps of 120 s, a save is due once what is left
    of the job is under 60 (verl's save) + 120 + 900 (the margin) = 1,080 s, not at 2,000 s; outside
    a Slurm job nothing is set."""
    import time

    from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi

    from scout.verl import config as vc

    spec = paper_spec("q4b-q1.7b-math", "opd", math_rows)
    cfg = vc.build(spec, spec["resources"], str(tmp_path))  # the composed, checked verl config
    driver.save_before(cfg, None)
    assert driver.EXPIRY_ENV not in cfg.ray_kwargs.ray_init.runtime_env.env_vars and cfg.trainer.esi_redundant_time == 0
    for left, due in ((2000, False), (1000, True)):
        driver.save_before(cfg, time.time() + left)
        monkeypatch.setenv(driver.EXPIRY_ENV, cfg.ray_kwargs.ray_init.runtime_env.env_vars[driver.EXPIRY_ENV])
        assert should_save_ckpt_esi(max_steps_duration=120, redundant_time=cfg.trainer.esi_redundant_time) is due
    assert resources.job_end({}) is None


def test_training_without_gpus_is_refused_after_writing_the_config(math_rows, tmp_path):
    spec = paper_spec("q4b-q1.7b-math", "opd", math_rows)
    with pytest.raises(SystemExit, match="trains on GPUs and this machine has none"):
        driver.train(spec, tmp_path / "run", log=lambda *_: None)
    assert (tmp_path / "run" / "verl_config.yaml").exists()
    relay = paper_spec("q4b-q1.7b-math", "relay_opd", math_rows)
    with pytest.raises(SystemExit, match="trains on GPUs"):
        driver.train(relay, tmp_path / "relay", log=lambda *_: None)
    relay_cfg = OmegaConf.load(tmp_path / "relay" / "verl_config.yaml")
    assert relay_cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "scout_relay"
    del spec["resources"]
    with pytest.raises(ValueError, match="needs the job's resources"):
        driver.train(spec, tmp_path / "run2", log=lambda *_: None)


def test_a_served_cell_finds_its_server_or_names_what_is_missing(math_rows, tmp_path, monkeypatch):
    """A cell placed without a teacher engine writes the server it scores against into its verl
    config; without one it stops before Ray starts, naming the variable the workflow sets."""
    from scout import teacher_server

    spec = paper_spec("q4b-q1.7b-math", "opd", math_rows)
    spec["resources"] = {**spec["resources"], "nodes": 1, "teacher_served": True}
    monkeypatch.delenv(teacher_server.ENV, raising=False)
    with pytest.raises(SystemExit, match=f"knows no server for it in {teacher_server.ENV}"):
        driver.train(spec, tmp_path / "run", log=lambda *_: None)
    server = {"url": "http://node3:8000", "model": "Qwen3-4B-Instruct-2507"}
    monkeypatch.setenv(teacher_server.ENV, json.dumps({"q4b-q1.7b-math": server}))
    with pytest.raises(SystemExit, match="trains on GPUs"):
        driver.train(spec, tmp_path / "run", log=lambda *_: None)
    cfg = OmegaConf.load(tmp_path / "run" / "verl_config.yaml")
    user = str((tmp_path / "run" / "train.json").resolve())  # its lease's name, should the server need finding again
    assert dict(cfg.scout.teacher_server) == {**server, "user": user} and cfg.scout.teacher_served
    assert (cfg.trainer.nnodes, cfg.distillation.nnodes) == (1, 0)


def test_checkpoints_of_another_spec_are_moved_aside_before_verl_resumes(math_rows, tmp_path):
    """verl's resume_mode auto resumes whatever its tracker names: the driver moves a folder of
    another spec aside first, and a folder of the same spec is resumed."""
    spec = paper_spec("q4b-q1.7b-math", "opd", math_rows)
    out = tmp_path / "run"

    def killed_at_step_20(owner: dict) -> None:
        runs.claim(out, owner, log=lambda *_: None)
        (out / "checkpoints" / "global_step_20" / "actor").mkdir(parents=True)
        (out / "checkpoints" / driver.TRACKER).write_text("20")

    killed_at_step_20({**spec, "lr": spec["lr"] * 2})
    logs = []
    with pytest.raises(SystemExit, match="trains on GPUs"):
        driver.train(spec, out, log=logs.append)
    assert not (out / "checkpoints" / driver.TRACKER).exists()
    (moved,) = tmp_path.glob("run.superseded-*")
    assert (moved / "checkpoints" / driver.TRACKER).read_text() == "20"
    assert any(line.strip().startswith("lr: ") for line in logs)

    shutil.rmtree(out)
    killed_at_step_20(spec)
    assert driver.train(spec, out, log=lambda *_: None, dry_run=True)["resumed_from"] == 20
    with pytest.raises(SystemExit, match="trains on GPUs"):
        driver.train(spec, out, log=lambda *_: None)
    assert (out / "checkpoints" / driver.TRACKER).read_text() == "20"  # kept for verl to resume


def _fsdp_checkpoint(model_dir: str, target) -> dict:
    """A world-size-1 checkpoint in the layout verl's FSDP checkpoint manager writes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)  # "trained": differs from the initial weights
    target.mkdir(parents=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save(state, target / "model_world_size_1_rank_0.pt")
    (target / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    model.config.save_pretrained(target / "huggingface")
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(target / "huggingface")
    return state


def test_checkpoint_layout_and_export_to_hugging_face(world, tmp_path, math_rows):
    """A compute-matched SCOUT run evaluated at step 40 and at the end: student and teacher of
    both checkpoints come out as loadable Hugging Face models, named as the evaluation rules expect."""
    from transformers import AutoModelForCausalLM

    spec = paper_spec("q4b-q1.7b-math", "scout-cm", math_rows)
    assert runs.checkpoints(spec)[0] == "step40"
    ck = tmp_path / "run" / "checkpoints"
    states = {}
    for step in (40, 60):
        states[step] = _fsdp_checkpoint(world["student"], ck / f"global_step_{step}" / "actor")
        _fsdp_checkpoint(world["teacher"], ck / f"global_step_{step}" / vt.TEACHER_DIR)
    with pytest.raises(FileNotFoundError, match="latest_checkpointed_iteration.txt is missing"):
        driver.export_models(spec, ck, tmp_path / "run", log=lambda *_: None)
    (ck / driver.TRACKER).write_text("60")
    spec["eval_every"], spec["total_steps"] = 40, 60  # step40 and final
    written = driver.export_models(spec, ck, tmp_path / "run", log=lambda *_: None)
    names = sorted(os.path.basename(w) for w in written)
    assert names == ["final", "final-teacher", "step40", "step40-teacher"]
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model" / "final")
    for k, v in final.state_dict().items():  # the merger writes bf16, as verl's checkpoints train in
        torch.testing.assert_close(v, states[60][k].to(v.dtype))
    teacher = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model" / "final-teacher")
    assert teacher.config.hidden_size == 48
    # a checkpoint the export needs but verl did not keep is named
    spec["eval_every"], spec["total_steps"] = None, 70  # planned for more steps than verl ran
    with pytest.raises(RuntimeError, match="last checkpoint is step 60, the run was planned for 70 steps"):
        driver.export_models(spec, ck, tmp_path / "run2", log=lambda *_: None)
    spec["eval_every"], spec["total_steps"] = 20, 60
    with pytest.raises(FileNotFoundError, match="global_step_20/actor: no FSDP checkpoint"):
        driver.export_models(spec, ck, tmp_path / "run", log=lambda *_: None)


def test_checkpoints_exported_when_saved_leave_only_their_exports(world, tmp_path, math_rows):
    """training.keep_checkpoints: exported. After each save the trainer exports every evaluated
    checkpoint still on disk without an export (so one a kill cut short is exported at the next
    save), then deletes it; a resume needs the export, not the checkpoint, and the end of the run
    exports only the final one. (The student alone here: SCOUT's teacher role goes the same way,
    in tests/verl/test_verl_cpu.py's shared-LoRA run.)"""
    spec = paper_spec("q4b-q1.7b-math", "opd", math_rows)
    spec.update(eval_every=None, total_steps=60, export_steps=[20, 40], keep_checkpoints="exported")
    run = tmp_path / "run"
    ck = run / "checkpoints"
    for step in (20, 40):
        _fsdp_checkpoint(world["student"], ck / f"global_step_{step}" / "actor")
    (run / "model" / ".step20.tmp").mkdir(parents=True)  # what a merge cut by a kill leaves
    written = driver.export_saved("opd", ck, {20, 40}, log=lambda *_: None)
    assert sorted(os.path.basename(w) for w in written) == ["step20", "step40"]
    assert not (run / "model" / ".step20.tmp").exists()
    assert driver.export_saved("opd", ck, {20, 40}, log=lambda *_: None) == []  # each once
    for step in (20, 40):  # deleted by the trainer's retention once exported
        shutil.rmtree(ck / f"global_step_{step}")
    (ck / driver.TRACKER).write_text("40")
    assert driver.missing_checkpoints(spec, run) == ["checkpoints/global_step_40"]  # the latest: resumed from
    _fsdp_checkpoint(world["student"], ck / "global_step_40" / "actor")
    assert driver.missing_checkpoints(spec, run) == []  # step 20's export stands in for it
    _fsdp_checkpoint(world["student"], ck / "global_step_60" / "actor")
    (ck / driver.TRACKER).write_text("60")
    written = driver.export_models(spec, ck, run, log=lambda *_: None)
    assert [os.path.basename(w) for w in written] == ["final"]  # the rest were exported when saved
    assert all((run / "model" / n / "config.json").exists() for n in ("step20", "step40", "final"))


# -- the trainer's pure pieces -------------------------------------------------------------------------


def scout_cfg(variant="scout", setting="q8b-q1.7b-math"):
    from scout.verl import config as vc

    cell = Grid.of(PAPER).find(setting, variant, 1)
    return vc.build(
        Grid.of(PAPER).spec(cell), resources.job_resources(PAPER, "train", setting, cell.method, variant), "out"
    )


def test_a_lora_export_is_folded_into_plain_weights(world, tmp_path):
    """verl's merger leaves a LoRA checkpoint as the base plus ``lora_adapter/``: the export folds the
    adapter in (the evaluation then reads the trained teacher), and refuses an alpha of 0."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "final-teacher"
    shutil.copytree(world["teacher"], folder)
    base = AutoModelForCausalLM.from_pretrained(folder)
    adapted = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    adapted.save_pretrained(folder / "lora_adapter")  # the layout verl's merger writes
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
        with adapted.disable_adapter():
            initial = adapted(input_ids=ids).logits
    bad = tmp_path / "alpha0"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "lora_adapter" / "adapter_config.json").read_text())
    (bad / "lora_adapter" / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": 0}))
    with pytest.raises(RuntimeError, match="lora_alpha is 0"):
        driver.fold_adapter(bad)
    driver.fold_adapter(folder)
    assert not (folder / "lora_adapter").exists()
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(folder)(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, initial, atol=1e-3)
    driver.fold_adapter(folder)  # a plain model: nothing to fold


def test_the_teacher_trainer_config():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = scout_cfg()
    t = tp.teacher_worker_config(cfg)
    assert t.model.path == "results-paper/teachers/Qwen3-8B-DAPO/model/final"
    assert (t.actor.optim.lr, t.actor.use_kl_loss, t.actor.kl_loss_coef) == (5e-6, True, 0.001)
    assert t.actor.optim.total_training_steps == 358 // 10 and t.rollout.n == 8
    assert t.actor.ppo_mini_batch_size == 128 * 8 and t.rollout.checkpoint_engine.backend == "nccl"
    assert cfg.actor_rollout_ref.model.path != t.model.path  # the student's config is untouched
    actor = omega_conf_to_dataclass(t.actor)  # verl's own dataclass accepts it
    assert actor.kl_loss_type == "low_var_kl"


def test_teacher_schedule_in_verls_step_count():
    cfg = scout_cfg()  # 358 steps, f = 10, ratio 0.1 -> 0.9
    assert [s for s in range(1, 41) if tp.teacher_step_due(s, 10)] == [10, 20, 30, 40]
    assert tp.teacher_ratio(cfg, 1) == pytest.approx(0.1) and tp.teacher_ratio(cfg, 358) == pytest.approx(0.9)
    assert tp.teacher_ratio(cfg, 180) == pytest.approx(0.1 + 0.8 * 179 / 357)
    assert tp.teacher_ratio(scout_cfg("opd_teacher_grpo", "q4b-q1.7b-math"), 180) == 0.0


def test_batch_from_transfer_queue_rows():
    """Rows as verl's agent loop stores them (jagged tensors, non-tensor stacks) -> padded DataProto."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = [
        {"uid": "a", "prompts": torch.tensor([5, 6]), "responses": torch.tensor([11, 12, 2]),
         "data_source": "scout/math", "reward_model": {"ground_truth": "1"}, "extra_info": {"row": "A"}},
        {"uid": "b", "prompts": torch.tensor([7]), "responses": torch.tensor([21]),
         "data_source": "scout/math", "reward_model": {"ground_truth": "2"}, "extra_info": {"row": "B"}},
    ]  # fmt: skip
    dp = tp.batch_from_tq(list_of_dict_to_tensordict(rows), pad_id=0)
    assert dp.batch["prompts"].tolist() == [[5, 6], [0, 7]]
    assert dp.batch["responses"].tolist() == [[11, 12, 2], [21, 0, 0]]
    assert dp.batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 0, 0]]
    assert list(dp.non_tensor_batch["uid"]) == ["a", "b"] and dp.non_tensor_batch["extra_info"][1] == {"row": "B"}
    req = tp.continuation_requests(dp, 0.5, 2, 2, 0, 3)
    assert [list(x) for x in req.non_tensor_batch["raw_prompt_ids"]] == [[5, 6, 11]] * 2 + [[7]] * 2


def test_worker_batch_is_verls_no_padding_layout_with_the_continuation_mask():
    from verl.workers.utils.padding import no_padding_2_padding

    prompts, responses = [[5, 6], [7]], [[11, 12, 2], [21]]
    dp = DataProto.from_dict(
        tensors={**tp.padded_batch(prompts, responses, 0), "response_mask": torch.tensor([[0, 1, 1], [1, 0, 0]])},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
    )
    td = tp.worker_batch(dp, temperature=1.0, compute_loss=False)
    assert [t.tolist() for t in td["input_ids"].unbind()] == [[5, 6, 11, 12, 2], [7, 21]]
    assert td["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    # a model output over the full sequences comes back as response-aligned values
    flat = torch.arange(7, dtype=torch.float32)  # positions 0..4 and 5..6
    assert no_padding_2_padding(flat, td).tolist() == [[1.0, 2.0, 3.0], [5.0, 0.0, 0.0]]


def test_the_self_tests_few_rows_split_over_the_teacher_trainers_ranks():
    """verl's dispatch splits a worker's input over its data-parallel ranks without padding: the
    self-test's 4 responses on a teacher trainer of 8 GPUs (the paper's pools) are filled up to 8,
    and the first 4 results are the rows asked for, in order."""
    from verl.utils.tensordict_utils import chunk_tensordict
    from verl.workers.utils.padding import no_padding_2_padding

    prompts, responses = [[5, 6], [7], [8, 9], [4]], [[11, 12, 2], [21], [31, 32], [41, 42, 43]]
    seqs = [p + r for p, r in zip(prompts, responses, strict=True)]

    def rows(n, ranks):
        td = tp.self_test_batch(prompts[:n], responses[:n], 0, ranks)
        return [ids.tolist() for ids in td["input_ids"].unbind()]

    assert rows(4, 1) == rows(4, 2) == [seqs[i] for i in [0, 1, 2, 3]]
    assert rows(4, 3) == [seqs[i] for i in [0, 1, 2, 3, 0, 1]]
    assert rows(4, 8) == [seqs[i] for i in [0, 1, 2, 3, 0, 1, 2, 3]]
    assert rows(3, 16) == [seqs[i] for i in [0, 1, 2] * 5 + [0]]
    with pytest.raises(AssertionError, match="divisible by chunks"):
        chunk_tensordict(tp.self_test_batch(prompts, responses, 0, 1), 8)
    td = tp.self_test_batch(prompts, responses, 0, 8)
    assert len(chunk_tensordict(td, 8)) == 8
    # a per-token output (here the input ids themselves) read back at each asked-for response
    back = no_padding_2_padding(torch.cat([ids.float() for ids in td["input_ids"].unbind()]), td)
    got = [back[i, : len(r)].tolist() for i, r in enumerate(responses)]
    assert got == [[6, 11, 12], [7], [9, 31], [4, 41, 42]]


def test_trainers_override_only_what_verls_trainer_has():
    """Guards against verl API drift: every hook scout's trainers override exists in the pinned
    verl's sync trainer with the same parameters."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    hooks = {
        vt.RetainCheckpoints: ("_save_checkpoint",),
        vt.TeacherSelfTest: ("_update_actor",),
        vt.ScoutTrainer: ("_init_resource_pool_mgr", "_load_checkpoint", "on_init_end", "_save_checkpoint", "step"),
        vt.PruneTrainer: ("__init__", "_load_checkpoint", "_save_checkpoint", "_next_train_batch", "_update_actor"),
        vt.ServedStudentTrainer: ("_init_resource_pool_mgr", "_setup", "get_teacher_client"),
        vt.ServedPruneTrainer: ("_init_resource_pool_mgr", "_setup", "get_teacher_client", "_update_actor"),
    }
    for cls, names in hooks.items():
        assert issubclass(cls, PPOTrainerSync)
        for name in names:
            ours, theirs = getattr(cls, name), getattr(PPOTrainerSync, name)
            assert ours is not theirs
            assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), name

    def chosen(method: str, served: bool = False):
        return vt.trainer_class(OmegaConf.create({"scout": {"method": method, "teacher_served": served}}))

    assert chosen("scout") is vt.ScoutTrainer and chosen("optr_scout") is vt.ScoutTrainer
    assert chosen("prune_opd") is vt.PruneTrainer and chosen("prune_opd", True) is vt.ServedPruneTrainer
    assert chosen("opd") is vt.StudentTrainer and chosen("grpo") is vt.StudentTrainer
    assert chosen("opd", True) is vt.ServedStudentTrainer and chosen("esr", True) is vt.ServedStudentTrainer
    assert all(issubclass(c, vt.RetainCheckpoints) for c in (vt.StudentTrainer, vt.ScoutTrainer, vt.PruneTrainer))


def test_a_rollout_that_keeps_failing_stops_the_job():
    """verl refills each failed group through the trainer's ``_add_prompts_to_generate`` (its
    replay buffer's refill_fn); past 4 batches' worth in one step (16 prompts at least) the job
    stops with the step and the count, and the count starts again each step."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from scout.verl import watch

    assert "refill_fn=self._add_prompts_to_generate" in inspect.getsource(PPOTrainer)  # verl's hook
    for cls in (vt.StudentTrainer, vt.ScoutTrainer, vt.PruneTrainer, vt.ServedStudentTrainer, vt.ServedPruneTrainer):
        assert cls._add_prompts_to_generate is watch.RolloutWatch._add_prompts_to_generate
        assert cls.__mro__.index(watch.RolloutWatch) < cls.__mro__.index(PPOTrainerSync)
    assert (watch.refill_limit(4), watch.refill_limit(128)) == (16, 512)
    watch.check_refills(7, 16, 4)  # at the limit: chance
    with pytest.raises(watch.RolloutFailing, match=r"step 7: the rollout failed 17 prompts \(more than 16, 4 batches of 4\)"):
        watch.check_refills(7, 17, 4)

    class Verl:  # verl's trainer as the mixin sees it: a step whose rollout refills ``refills``
        global_steps, config = 3, OmegaConf.create({"data": {"train_batch_size": 4}})

        def step(self, metrics, timing_raw):
            for n in self.refills:
                self._add_prompts_to_generate(n)
            return "batch"

        def _add_prompts_to_generate(self, num_prompts):
            self.submitted.append(num_prompts)
            return num_prompts

    class Trainer(watch.RolloutWatch, Verl):
        pass

    t = Trainer()
    t.submitted, t.refills = [], [4, 4, 4, 4]
    assert t.step({}, {}) == "batch" and t.step({}, {}) == "batch"  # 16 a step, twice: each step counts anew
    t.refills = [8, 8, 1]
    with pytest.raises(watch.RolloutFailing, match="step 3: the rollout failed 17 prompts"):
        t.step({}, {})
    assert t.submitted == [4] * 8 + [8, 8]  # the 17th prompt was never asked for


PRUNE = {
    "hit_fraction": 0.5,
    "budget": {"initial": 100, "min": 50, "max": 110, "step": 20, "margin": 10, "patience": 2},
}


def test_prune_budget_follows_the_counts_the_loss_reported():
    state = alg.BudgetState(100)
    # 3 of 5 samples used the budget up (reported averaged over 2 data-parallel ranks: 1.5 / 2.5)
    grown, log = ck.prune_budget_step(state, {"actor/distillation/prune_budget_hits": 1.5,
                                              "actor/distillation/prune_budget_samples": 2.5}, PRUNE)  # fmt: skip
    assert grown == alg.BudgetState(110, 0)  # +20, capped at the max
    assert log == {"scout/prune_budget": 100, "scout/prune_budget_hit_fraction": 0.6, "scout/prune_budget_next": 110}
    counts = {"actor/distillation/prune_budget_hits": 0.5, "actor/distillation/prune_budget_samples": 2.5}
    missed, _ = ck.prune_budget_step(state, counts, PRUNE)
    assert missed == alg.BudgetState(100, 1)
    shrunk, log = ck.prune_budget_step(missed, counts, PRUNE)
    assert shrunk == alg.BudgetState(80, 0) and log["scout/prune_budget_next"] == 80
    with pytest.raises(RuntimeError, match="prune_budget_hits.*scout_prune"):
        ck.prune_budget_step(state, {"actor/pg_loss": 0.1}, PRUNE)


def test_prune_budget_is_checkpointed_beside_verls_state(tmp_path):
    step = tmp_path / "global_step_40"
    ck.save_budget(step, alg.BudgetState(1324, 2))
    assert ck.load_budget(step) == alg.BudgetState(1324, 2)
    assert [p.name for p in step.iterdir()] == ["scout_budget.json"]
    with pytest.raises(FileNotFoundError, match="global_step_7/scout_budget.json.*cannot be resumed"):
        ck.load_budget(tmp_path / "global_step_7")


# -- checkpoint retention: a kill between saves leaves a whole checkpoint; only evaluated steps kept --------


class _Killed(BaseException):
    pass


class _RecordingWorkers:
    """A worker group whose saves run verl's own checkpoint manager bookkeeping
    (BaseCheckpointManager.register_checkpoint, which deletes old checkpoints past the keep count),
    recording every save and delete; ``die_at`` kills the job inside that step's save."""

    def __init__(self, events: list, root, die_at=None):
        from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

        self.mgr = object.__new__(BaseCheckpointManager)
        self.mgr.previous_saved_paths = []
        self.events, self.root, self.die_at = events, root, die_at
        remove = self.mgr.remove_previous_save_local_path

        def recorded(paths):
            for p in [paths] if isinstance(paths, str) else paths:
                self.events.append(("delete", str(Path(p).relative_to(root))))
            remove(paths)

        self.mgr.remove_previous_save_local_path = recorded

    def save_checkpoint(self, path, hdfs, step, max_ckpt_to_keep=None):
        if step == self.die_at:
            raise _Killed(path)
        self.mgr.ensure_checkpoint_capacity(max_ckpt_to_keep)
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "model_world_size_1_rank_0.pt").write_text("w")
        self.events.append(("save", str(Path(path).relative_to(self.root))))
        self.mgr.register_checkpoint(path, max_ckpt_to_keep)


def _saving_trainer(root, keep_steps, max_keep, die_at=None, events=None):
    """ScoutTrainer with recording worker groups, saving through verl's own _save_checkpoint with
    the cell config's ``max_actor_ckpt_to_keep``."""
    import types

    events = [] if events is None else events
    conf = OmegaConf.create({
        "trainer": {"default_local_dir": str(root), "max_actor_ckpt_to_keep": max_keep, "default_hdfs_dir": None},
        "actor_rollout_ref": {"actor": {"checkpoint": {}}}, "scout": {"keep_steps": keep_steps},
    })  # fmt: skip
    t = object.__new__(vt.ScoutTrainer)
    t.config, t.use_critic, t.trainer_mode = conf, False, "sync"
    t.teacher_wg, t.actor_rollout_wg = _RecordingWorkers(events, root), _RecordingWorkers(events, root, die_at)
    t.train_dataloader = types.SimpleNamespace(state_dict=lambda: {})
    t.checkpoint_callback = types.SimpleNamespace(on_save=lambda **kw: None)
    return t, events


def test_a_kill_between_the_teacher_and_the_student_save_leaves_the_last_step_whole(tmp_path, math_rows):
    cell = vc_build(paper_spec("q8b-q1.7b-math", "scout", math_rows))  # a SCOUT run without probed steps
    t, events = _saving_trainer(tmp_path / "ckpt", [], cell.trainer.max_actor_ckpt_to_keep)
    tmp_path = tmp_path / "ckpt"
    for step in (20, 40):
        t.global_steps = step
        if step == 40:
            t.actor_rollout_wg.die_at = 40
        try:
            t._save_checkpoint()
        except _Killed:
            pass
    named = driver.latest_step(tmp_path)
    assert named == 20  # the tracker still names step 20 ...
    assert (tmp_path / "global_step_20" / vt.TEACHER_DIR).is_dir() and (tmp_path / "global_step_20" / "actor").is_dir()
    assert not [e for e in events if e[0] == "delete"]  # ... and nothing of it was deleted


def test_only_the_evaluated_steps_and_the_latest_are_kept(tmp_path, math_rows):
    """A probed SCOUT run of the paper grid (358 steps, step 160 evaluated, saved every 20): after
    every save the folder holds the latest step and the evaluated ones before it, nothing else; a
    step is deleted only once the tracker names a newer one."""
    cell = vc_build(paper_spec("q4b-q1.7b-math", "scout", math_rows))
    tmp_path = tmp_path / "ckpt"
    t, events = _saving_trainer(tmp_path, list(cell.scout.keep_steps), cell.trainer.max_actor_ckpt_to_keep)
    for step in [*range(20, 358, 20), 358]:
        t.global_steps = step
        t._save_checkpoint()
        on_disk = sorted(int(d.name.removeprefix("global_step_")) for d in tmp_path.glob("global_step_*"))
        assert on_disk == sorted({step} | ({160} if step >= 160 else set())), step
    assert [e for e in events if e[0] == "delete"] == []  # verl's manager deleted nothing itself
    assert driver.latest_step(tmp_path) == 358


def test_the_paper_grid_keeps_only_what_it_evaluates(math_rows):
    cfg = vc_build(paper_spec("q4b-q1.7b-math", "scout", math_rows))
    assert cfg.trainer.max_actor_ckpt_to_keep is None and list(cfg.scout.keep_steps) == [160]
    assert cfg.trainer.v1.sampler.sync_refill_failed_groups is True
    assert cfg.distillation.teacher_models.teacher_model.inference.enforce_eager is False
    opd = vc_build(paper_spec("q4b-q1.7b-math", "opd", math_rows))
    assert list(opd.scout.keep_steps) == [] and opd.trainer.max_actor_ckpt_to_keep is None


def vc_build(spec):
    from scout.verl import config as vc

    return vc.build(spec, spec["resources"], "out")


def test_a_failed_sample_is_refilled_and_counted_through_verls_replay_buffer(math_rows):
    """One agent loop of a step fails (a grader error, a relay fault, a failed teacher request): with
    the cells' sampler settings verl's replay buffer refills it with one new prompt and counts it,
    and verl's own batch fetch takes that one prompt; the step goes on."""
    import types

    from verl.trainer.ppo.v1 import replay_buffer as rb
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cfg = vc_build(paper_spec("q4b-q1.7b-math", "opd", math_rows))
    refill_on = bool(cfg.trainer.v1.sampler.sync_refill_failed_groups)
    store = {"train": {}}
    for i, status in enumerate(["finished"] * 3 + ["failure"]):
        store["train"][f"p{i}"] = {"is_prompt": True, "status": status, "global_steps": 1}
        if status == "finished":
            store["train"][f"p{i}_0_0"] = {"status": "success"}
    fetched = []

    def refill(n):
        me = types.SimpleNamespace(config=OmegaConf.create({"data": {"train_batch_size": 128, "gen_batch_size": 1}}),
                                   global_steps=1, _fetch_one_gen_batch=lambda: fetched.append(1) or _one_prompt())  # fmt: skip
        PPOTrainer._next_train_batch(me, n)  # verl's own fetch, gen_batch_size 1 as verl sets it with refills on
        for j in range(n):
            store["train"][f"r{j}"] = {"is_prompt": True, "status": "finished", "global_steps": 1}
            store["train"][f"r{j}_0_0"] = {"status": "success"}
        return n

    rb.tq.kv_list = lambda: store
    rb.tq.kv_clear = lambda partition_id, keys: [store[partition_id].pop(k, None) for k in keys]
    buf = rb.ReplayBuffer("sync", OmegaConf.create({}), 8, "drop", {}, poll_interval=0, refill_fn=refill,
                          train_batch_size=4, gen_batch_size=1, sync_refill_failed_groups=refill_on)  # fmt: skip
    meta, metrics = buf.sample(1, "train", 4)
    assert fetched == [1] and metrics["training/rollout_failure/evicted_samples"] == 1 and len(meta.keys) == 4


def _one_prompt():
    from verl.utils import tensordict_utils as tu

    return tu.get_tensordict({"uid": np.array(["x"], dtype=object)})


def test_the_teacher_updates_metrics_are_reduced_as_verl_reduces_the_actors():
    """verl's workers return every metric as a list (Metric.aggregate_dp, append_to_dict); the
    teacher phase used to keep only int/float values, so its losses, KL and grad norm were never
    logged. Two micro-batches: pg_loss summed 0.25 + 0.15, clipfrac averaged, grad norm 1.5 then 2.5."""
    from verl.utils.metric import AggregationType, Metric
    from verl.utils.py_functional import append_to_dict

    raw = {}
    for mb in (
        {"actor/pg_loss": [Metric(AggregationType.SUM, 0.25)], "actor/pg_clipfrac": [Metric(AggregationType.MEAN, 0.1)],
         "kl_loss": [Metric(AggregationType.SUM, 0.02)], "grad_norm": [1.5], "lr": [1e-6]},
        {"actor/pg_loss": [Metric(AggregationType.SUM, 0.15)], "actor/pg_clipfrac": [Metric(AggregationType.MEAN, 0.3)],
         "kl_loss": [Metric(AggregationType.SUM, 0.04)], "grad_norm": [2.5], "lr": [1e-6]},
    ):  # fmt: skip
        append_to_dict(raw, {k: Metric.aggregate_dp(v) if isinstance(v[0], Metric) else v for k, v in mb.items()})
    got = tp.teacher_update_metrics(raw)
    assert got["scout/teacher_grad_norm"] == pytest.approx(2.0) and got["scout/teacher_lr"] == pytest.approx(1e-6)
    assert {"scout/teacher_pg_loss", "scout/teacher_pg_clipfrac", "scout/teacher_kl_loss"} <= set(got)
    assert all(isinstance(v, float) for v in got.values())


def test_only_tensors_travel_to_the_teachers_workers():
    """The rows (code test suites among them), rewards' fields and uids stay with the driver: the
    teacher's workers get the tensors their log-prob and update passes read, nothing else."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = [{"uid": u, "prompts": torch.tensor([5, 6]), "responses": torch.tensor([11, 12, 2]), "data_source": "scout/code",
             "reward_model": {"ground_truth": "{}"}, "extra_info": {"row": "x" * 10_000}} for u in "ab"]  # fmt: skip
    req = tp.continuation_requests(tp.batch_from_tq(list_of_dict_to_tensordict(rows), pad_id=0), 0.5, 2, 2, 0, 3)
    batch = tp.teacher_train_batch(req, [[7, 2]] * len(req), [1.0, 0.0] * (len(req) // 2), 0, 3)
    assert "extra_info" in batch.non_tensor_batch  # the driver keeps them ...
    td = tp.worker_batch(batch, calculate_entropy=False, compute_loss=False, temperature=1.0)
    shipped = {k for k, v in td.items() if type(v).__name__ in ("NonTensorStack", "NonTensorData")}
    # ... the workers get the metadata of the call and of verl's no-padding layout, nothing else
    assert shipped == {"calculate_entropy", "compute_loss", "temperature", "max_seq_len", "max_response_len", "indices"}
