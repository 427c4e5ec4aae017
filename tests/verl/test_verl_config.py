"""Every training job of the paper grid as a verl config, composed from verl's own ppo_trainer.yaml
and checked by the installed verl's validators (CPU; no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from scout import grid, resources
from scout.config import ConfigError, deep_merge, validate
from scout.grid import Grid
from scout.paths import Paths
from scout.placement import PlacementError, placement
from scout.verl import parts as vp
from scout.verl.env import method_section
from tests.support.toy import REPO, cell_spec

vc = pytest.importorskip("scout.verl.config", reason="needs verl (pip install '.[verl]')")
pytest.importorskip("verl")

PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())


def build(setting: str, variant: str, seed: int = 1, **spec_over):
    cell = Grid.of(PAPER).find(setting, variant, seed)
    spec = {**Grid.of(PAPER).spec(cell), **spec_over}
    res = resources.job_resources(PAPER, "train", setting, cell.method, variant)
    return vc.build(spec, res, Paths.of(PAPER).train_dir(setting, variant, seed))


def test_every_cell_and_the_teacher_preparation_compose_and_validate():
    """Every (setting, variant) of the paper grid, one seed each (seeds change only the seed and the
    folders), and every seed of SCOUT on the 4B math setting."""
    cells = Grid.of(PAPER).cells
    assert len(cells) == 108
    firsts = {(c.setting, c.variant): c for c in reversed(cells)}
    chosen = list(firsts.values()) + [c for c in cells if (c.setting, c.variant) == ("q4b-q1.7b-math", "scout")]
    assert len(firsts) == 38
    for c in chosen:
        res = resources.job_resources(PAPER, "train", c.setting, c.method, c.variant)
        cfg = vc.build(Grid.of(PAPER).spec(c), res, Paths.of(PAPER).train_dir(c.setting, c.variant, c.seed))
        assert cfg.data.seed == c.seed and cfg.scout.method == c.method
    prep = grid.teacher_prep_spec(PAPER, "Qwen3-8B-DAPO")
    cfg = vc.build(prep, resources.job_resources(PAPER, "prepare_teacher"), "results/teachers/Qwen3-8B-DAPO")
    assert (cfg.trainer.nnodes, cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (2, 64, 8)
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.distillation.enabled is False


def test_scout_with_the_8b_teacher():
    cfg = build("q8b-q1.7b-math", "scout")
    a, r, d = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.distillation
    # 4 nodes of 8 GPUs: the student one, the teacher's engine one, the teacher's trainer two
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, d.nnodes, d.n_gpus_per_node) == (1, 8, 1, 8)
    assert (cfg.scout.teacher_train.nnodes, cfg.scout.teacher_train.n_gpus_per_node) == (2, 8)
    assert (a.optim.lr, a.optim.lr_scheduler_type, a.clip_ratio, a.ppo_mini_batch_size) == (3e-6, "constant", 0.2, 128)
    assert (cfg.data.train_batch_size, r.n, r.temperature, r.top_p) == (128, 1, 1.0, 1.0)
    assert (r.prompt_length, r.response_length) == (1024, 16384)
    # verl's OPD: K1 advantage in policy-gradient mode, no task rewards
    assert d.enabled and d.teacher_models.teacher_model.model_path == "results-paper/teachers/Qwen3-8B-DAPO/model/final"
    assert (d.distillation_loss.loss_mode, d.distillation_loss.use_policy_gradient) == ("k1", True)
    assert d.distillation_loss.use_task_rewards is False and d.distillation_loss.clip_ratio == 0.2
    sc = method_section("scout", cfg)
    assert sc["interval"] == 10 and sc["k"] == 8 and sc["teacher_lr"] == 5e-6
    assert sc["prefix_ratio"] == [0.1, 0.9] and sc["kl_beta"] == 0.001
    assert cfg.trainer.total_training_steps == 358 and cfg.trainer.save_freq == 20
    assert cfg.trainer.default_local_dir == "results-paper/train/q8b-q1.7b-math/scout/s1/checkpoints"
    assert cfg.data.train_files == "results-paper/data/openr1-math-46k.verl.parquet"


def test_baselines():
    g = build("q4b-q1.7b-math", "grpo")
    assert g.actor_rollout_ref.rollout.n == 8 and g.actor_rollout_ref.actor.use_kl_loss is True
    assert g.actor_rollout_ref.actor.kl_loss_coef == 0.001 and g.distillation.enabled is False
    assert g.algorithm.adv_estimator == "scout_grpo" and g.trainer.nnodes == 1 and g.trainer.n_gpus_per_node == 8
    opd = build("q4b-q1.7b-math", "opd")
    assert (opd.trainer.nnodes, opd.distillation.nnodes) == (1, 1) and "teacher_train" not in opd.scout
    matched = build("q4b-q1.7b-math", "opd-3ep")  # evaluated every 40 steps: keep those checkpoints
    assert (matched.trainer.save_freq, matched.trainer.max_actor_ckpt_to_keep) == (20, None)
    assert opd.actor_rollout_ref.actor.use_kl_loss is False
    esr = build("sky7b-ds1.5b-math", "esr")
    assert esr.actor_rollout_ref.rollout.response_length == 4096 and esr.data.max_response_length == 4096
    relay = build("q4b-q1.7b-math", "relay_opd")  # one node: student and teacher split its 8 GPUs
    assert (relay.trainer.n_gpus_per_node, relay.distillation.n_gpus_per_node, relay.distillation.nnodes) == (4, 4, 1)
    assert method_section("relay_opd", relay)["max_legs"] == 2
    assert relay.actor_rollout_ref.rollout.agent.default_agent_loop == "scout_relay"
    assert relay.actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs == 5  # the student's top 5
    prune = build("sky7b-ds1.5b-math", "prune_opd")
    assert method_section("prune_opd", prune)["budget"]["initial"] == 2048  # the setting's override
    assert (prune.distillation.distillation_loss.loss_mode, prune.distillation.distillation_loss.topk) == (
        "scout_prune",
        16,
    )
    assert build("q4b-q1.7b-code", "optr_scout").distillation.distillation_loss.loss_mode == "scout_optr"
    assert opd.distillation.distillation_loss.loss_mode == "k1"
    agent = prune.actor_rollout_ref.rollout.agent  # scout's agent loops, from the file verl reads
    assert agent.default_agent_loop == "scout_budget" and Path(agent.agent_loop_config_path).is_file()
    assert opd.actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"
    env = prune.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "scout.verl.plugin"
    assert json.loads(env.SCOUT_METHOD_CFG)["prune_opd"]["tau"] == 0.7
    # ... given once: verl's own config holds no method section beside it
    assert set(prune.scout) == {"method", "domain", "total_steps", "keep_steps"}
    code = build("q4b-q1.7b-code", "scout")
    assert code.data.max_prompt_length == 1536 and code.trainer.total_epochs == 3 and code.scout.domain == "code"
    assert method_section("scout", build("q8b-q1.7b-math", "scout-f5"))["teacher_lr"] == 2.5e-6
    assert method_section("scout", build("q4b-q1.7b-math", "opd_teacher_grpo"))["prefix_zero"] is True


@pytest.mark.parametrize(
    "over, message",
    [
        ({"mini_batch_size": 96}, "ppo_mini_batch_size 96 does not divide train_batch_size 128"),
        ({"mini_batch_size": 256}, "ppo_mini_batch_size 256 does not divide train_batch_size 128"),
        ({"teacher": None}, "model_path must be specified for distillation teacher"),  # verl's own check
    ],
)
def test_a_config_verl_refuses_names_the_cell(over, message):
    with pytest.raises(vc.VerlConfigError, match=f"(?s)q4b-q1.7b-math/opd/s2: verl refuses the config: .*{message}"):
        build("q4b-q1.7b-math", "opd", seed=2, **over)


def test_optr_outlier_kl_is_refused_before_a_gpu_job_starts():
    optr = {**PAPER["methods"]["optr"], "outlier": "topk_fkl"}
    with pytest.raises(
        vc.VerlConfigError, match="q4b-q1.7b-math/optr/s1: .*outlier loss 'topk_fkl' is not in the verl"
    ):
        build("q4b-q1.7b-math", "optr", method_cfg={"optr": optr})


def test_override_values_survive_hydra_quoting():
    over = vc.overrides(
        {**cell_spec(PAPER, "q4b-q1.7b-math", "opd", 1), "student": "/m/a b,c=d"},
        {"nodes": 2, "gpus_per_node": 8},
        "out",
    )
    cfg = vc.compose(over)
    assert OmegaConf.select(cfg, "actor_rollout_ref.model.path") == "/m/a b,c=d"


@pytest.mark.parametrize(
    "method, nodes, gpus, expected",
    [
        # (student nodes, GPUs), (teacher engine nodes, GPUs), (teacher trainer nodes, GPUs)
        ("grpo", 1, 8, ((1, 8), (0, 0), (0, 0))),
        ("opd", 2, 8, ((1, 8), (1, 8), (0, 0))),
        ("relay_opd", 1, 8, ((1, 4), (1, 4), (0, 0))),
        ("scout", 3, 8, ((1, 8), (1, 8), (1, 8))),
        ("scout", 4, 8, ((1, 8), (1, 8), (2, 8))),
        ("optr_scout", 2, 8, ((1, 8), (1, 4), (1, 4))),
        ("scout", 1, 8, ((1, 4), (1, 2), (1, 2))),
        ("scout", 1, 4, ((1, 2), (1, 1), (1, 1))),
    ],
)
def test_placement(method, nodes, gpus, expected):
    p = placement(method, {"nodes": nodes, "gpus_per_node": gpus})
    got = tuple((p[f"{k}_nodes"], p[f"{k}_gpus"]) for k in ("student", "teacher", "train"))
    assert got == expected


@pytest.mark.parametrize(
    "method, nodes, gpus, expected",
    [
        # the engine's pool is OPD's; the trainer's is the engine's
        ("scout", 2, 8, ((1, 8), (1, 8), (1, 8), True)),
        ("scout", 1, 8, ((1, 4), (1, 4), (1, 4), True)),
        ("opd_teacher_grpo", 3, 4, ((1, 4), (2, 4), (2, 4), True)),
        ("opd", 2, 8, ((1, 8), (1, 8), (0, 0), False)),  # no teacher to train: nothing to share
        ("grpo", 1, 8, ((1, 8), (0, 0), (0, 0), False)),
    ],
)
def test_a_shared_teacher_trainer_sits_on_the_engines_pool(method, nodes, gpus, expected):
    p = placement(method, {"nodes": nodes, "gpus_per_node": gpus, "teacher_trainer": "shared"})
    got = tuple((p[f"{k}_nodes"], p[f"{k}_gpus"]) for k in ("student", "teacher", "train"))
    assert got + (p["train_shared"],) == expected


def test_a_shared_teacher_sleeps_its_engine_offloads_its_state_and_syncs_through_host_memory():
    """The paper config's LoRA teacher trains on its engine's GPUs: OPD's two nodes, the engine
    with sleep mode, the trainer's weights and optimizer state offloaded between uses, the sync over
    gloo; SCOUT's full teacher keeps its own pool and none of that."""
    from scout.verl.teacher_phase import teacher_worker_config

    lora = build("q4b-q1.7b-math", "scout-lora")
    assert dict(lora.scout.teacher_train) == {"nnodes": 1, "n_gpus_per_node": 8, "shared": True}
    assert (lora.trainer.nnodes, lora.distillation.nnodes, lora.distillation.n_gpus_per_node) == (1, 1, 8)
    inference = _teacher_inference(lora)
    assert inference.free_cache_engine and inference.enable_sleep_mode
    t = teacher_worker_config(lora)
    assert t.actor.fsdp_config.param_offload and t.actor.fsdp_config.optimizer_offload
    assert t.ref.fsdp_config.param_offload and t.rollout.checkpoint_engine.backend == "gloo"
    full = build("q4b-q1.7b-math", "scout")
    assert not full.scout.teacher_train.shared and full.scout.teacher_train.nnodes == 1
    assert full.trainer.nnodes + full.distillation.nnodes + full.scout.teacher_train.nnodes == 3
    f = teacher_worker_config(full)
    assert not f.actor.fsdp_config.param_offload and not f.actor.fsdp_config.optimizer_offload
    assert f.rollout.checkpoint_engine.backend == "nccl"


def test_scout_on_too_few_gpus_is_refused():
    with pytest.raises(PlacementError, match="at least 4 GPUs"):
        placement("scout", {"nodes": 1, "gpus_per_node": 2})


@pytest.mark.parametrize(
    "method, nodes, gpus, extra, role",
    [
        ("opd", 1, 1, {}, "its teacher's engine"),  # the engine's half of one GPU is none
        ("relay_opd", 1, 1, {}, "its teacher's engine"),
        ("scout", 2, 1, {}, "its teacher's engine"),  # the second node's GPU split in two
        ("scout", 1, 0, {"teacher_trainer": "shared"}, "its student"),
    ],
)
def test_a_pool_without_a_gpu_is_refused(method, nodes, gpus, extra, role):
    """verl refuses a pool of no GPU only once the job runs on a GPU node; placement says so first."""
    with pytest.raises(PlacementError, match=f"{method} on {nodes} node\\(s\\) of {gpus} GPU\\(s\\) leaves {role} no GPU"):
        placement(method, {"nodes": nodes, "gpus_per_node": gpus, **extra})


@pytest.mark.parametrize(
    "method, nodes, gpus, extra",
    [
        ("grpo", 1, 1, {}),
        ("opd", 1, 1, {"teacher_served": True}),  # the server scores: the student has the GPU
        ("scout", 2, 1, {"teacher_trainer": "shared"}),  # OPD's pools: one GPU each
    ],
)
def test_the_smallest_placements_that_hold_their_pools(method, nodes, gpus, extra):
    p = placement(method, {"nodes": nodes, "gpus_per_node": gpus, **extra})
    assert p["student_gpus"] == 1


def test_the_config_names_every_cell_whose_resources_cannot_hold_its_pools():
    """Found when the config loads (snakemake's parse, every scout command), one line a cell."""
    over = {"resources": {"train": {"methods": {"relay_opd": {"nodes": 1, "gpus_per_node": 1}}}}}
    with pytest.raises(ConfigError) as err:
        validate(deep_merge(PAPER, over))
    lines = [x.strip() for x in str(err.value).splitlines()[1:]]
    assert lines == [
        f"resources of experiments.main ({s}/relay_opd): relay_opd on 1 node(s) of 1 GPU(s) leaves its "
        "teacher's engine no GPU; give it more GPUs a node or more nodes"
        for s in ("q4b-q1.7b-math", "q8b-q1.7b-math", "sky7b-ds1.5b-math", "q4b-q1.7b-code")
    ]


def _teacher_inference(cfg):
    """The teacher engine's RolloutConfig as verl builds it at run time (its own dataclasses)."""
    from verl.utils.config import omega_conf_to_dataclass

    return next(iter(omega_conf_to_dataclass(cfg.distillation).teacher_models.values())).inference


SCOUT_FAMILY = sorted(
    {(c.setting, c.variant) for c in Grid.of(PAPER).cells if c.method in ("scout", "opd_teacher_grpo", "optr_scout")}
)


@pytest.mark.parametrize("setting, variant", SCOUT_FAMILY)
def test_teacher_weight_sync_has_the_same_backend_at_both_ends(setting, variant):
    """verl's CheckpointEngineManager calls prepare() on every receiver; the default receiver,
    naive, raises there. The teacher's engine must receive with the backend its trainer sends."""
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    from scout.verl.teacher_phase import teacher_worker_config

    cfg = build(setting, variant)
    sender = teacher_worker_config(cfg).rollout.checkpoint_engine
    receiver = _teacher_inference(cfg).checkpoint_engine
    # NCCL between pools; gloo through host memory for a trainer on the engine's GPUs
    backend, bucket = vp.weight_sync({"device": "cuda"}, shared=cfg.scout.teacher_train.shared)
    assert backend == ("gloo" if cfg.scout.teacher_train.shared else "nccl")
    assert sender.backend == receiver.backend == backend
    # the receiver cuts its buffer to the sender's length: the bucket sizes must agree
    assert sender.update_weights_bucket_megabytes == receiver.update_weights_bucket_megabytes == bucket
    with pytest.raises(NotImplementedError):  # what the old default receiver does
        CheckpointEngineRegistry.new("naive", bucket_size=1).prepare()


def test_on_the_cpu_the_teacher_sync_is_scouts_gloo_engine():
    """device: cpu selects scout's gloo checkpoint engine the way NCCL is selected on GPUs, and
    verl's registry builds it once the module is imported (the CPU platform imports it)."""
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    assert vp.weight_sync({"device": "cpu"}) == ("gloo", 64) and vp.weight_sync({"device": "cuda"})[0] == "nccl"
    import scout.verl.gloo_sync  # noqa: F401

    engine = CheckpointEngineRegistry.new("gloo", bucket_size=1 << 20)
    assert type(engine).__name__ == "GlooCheckpointEngine" and engine.bucket_size == 1 << 20


def test_teacher_engine_serves_prompt_plus_response_with_its_gpus():
    for setting, variant, length in (("q4b-q1.7b-math", "opd", 1024 + 16384 + 1), ("q4b-q1.7b-code", "scout", 1536 + 16384 + 1),
                                     ("sky7b-ds1.5b-math", "esr", 1024 + 4096 + 1)):  # fmt: skip
        cfg = build(setting, variant)
        inference = _teacher_inference(cfg)
        assert inference.max_model_len == length and inference.gpu_memory_utilization == vc.TEACHER_GPU_MEMORY
        assert inference.max_num_batched_tokens == vc.TEACHER_BATCHED_TOKENS
        assert cfg.actor_rollout_ref.rollout.max_model_len == length - 1  # the student's engine: prompt + response


@pytest.mark.parametrize("clip", [0.2, 0.28])
def test_the_clip_value_reaches_the_bounds_verl_reads(clip):
    """verl's policy loss reads clip_ratio_low and clip_ratio_high; a clip of 0.28 must reach both."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = build("q4b-q1.7b-math", "scout", clip=clip)
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (clip, clip)
    loss = omega_conf_to_dataclass(cfg.distillation).distillation_loss
    assert (loss.clip_ratio_low, loss.clip_ratio_high) == (clip, clip)


def test_rollout_log_probs_are_asked_only_of_loops_that_return_them():
    """verl reads rollout_log_probs back for every sample when calculate_log_probs is on (its
    default); Relay-OPD's loop returns none."""
    assert build("q4b-q1.7b-math", "relay_opd").actor_rollout_ref.rollout.calculate_log_probs is False
    for variant in ("opd", "prune_opd", "scout", "grpo"):
        assert build("q4b-q1.7b-math", variant).actor_rollout_ref.rollout.calculate_log_probs is True


def test_verl_keeps_the_probes_matched_checkpoint():
    cfg = build("q4b-q1.7b-math", "scout")  # the probes visit step 160 of these runs
    assert (cfg.trainer.save_freq, list(cfg.scout.keep_steps)) == (20, [160])
    other = build("q8b-q1.7b-math", "scout")
    assert list(other.scout.keep_steps) == [] and other.trainer.max_actor_ckpt_to_keep is None  # scout deletes
