"""Cell -> verl config: overrides of verl's own ``ppo_trainer.yaml``, composed with Hydra and checked
with verl's validators, so a cell that verl would refuse fails before it reaches a GPU node.

Placement (SPEC section 3): the student (actor, rollout and reference) and the teacher each get a
resource pool of their own (``placement``); SCOUT's teacher trains on a pool beside its engine's, or
on the engine's own GPUs (``teacher_trainer: shared``). What verl has no key for travels beside its
sections: the cell's method, steps and pools in a ``scout`` section, and its method settings (prefix
schedule, K, update interval, teacher LR, ...) once, as JSON in every Ray process's environment
(``scout.verl.env``), where the trainer and the workers verl starts both read them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from omegaconf import open_dict

from scout import runs
from scout.methods import METHODS
from scout.placement import PlacementError, placement
from scout.schema import default
from scout.tracking import ENV as TRACKING_ENV
from scout.tracking import TB_DIR, verl_loggers
from scout.verl import parts
from scout.verl.env import METHOD_CFG_ENV, METHOD_ENV, method_cfg
from scout.verl.parts import TEACHER_INFERENCE

# Student losses other than verl's built-in K1 (registered by scout.verl.plugin)
PLUGIN = "scout.verl.plugin"


def loss_mode(method) -> str:
    """verl's distillation loss of a method: the one a part names (OPTR's, Prune-OPD's), scout's K1
    where the method's row reshapes the advantage, else verl's own K1."""
    return parts.first(method, "loss_mode") or ("scout_k1" if method.advantage else "k1")

# scout's agent loops (scout/verl/agent_loop.py), as verl loads them from a file
AGENT_LOOPS = Path(__file__).with_name("agent_loops.yaml")
LOOPS_WITHOUT_LOGPROBS = {"scout_relay"}  # agent loops whose outputs carry no response_logprobs
# Share of each GPU the teacher's vLLM engine takes (it has them to itself), leaving room for what
# vLLM's sizing does not count: the prompt log-prob logits of every scoring request (about 7 GiB at
# 8,192 batched tokens and a 152k vocabulary; hence 4,096) and, for SCOUT, the weight-sync buffers.
TEACHER_GPU_MEMORY = 0.7
TEACHER_BATCHED_TOKENS = 4096


def agent_loop(method_id: str) -> str:
    """The student rollout's agent loop where verl's single-turn loop is not enough (a part's), or ''."""
    return parts.first(METHODS[method_id], "agent_loop")


class VerlConfigError(ValueError):
    """verl refused the composed config of a cell; the message names the cell and verl's reason."""


def config_dir() -> Path:
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def parquet_path(jsonl: str) -> str:
    """verl's dataset reads parquet; the JSONL of a prepared dataset gets a converted twin beside it."""
    return str(Path(jsonl).with_suffix(".verl.parquet"))


def overrides(spec: dict, res: dict, out_dir: str) -> list[str]:
    """Hydra overrides (``key=value``; ``+key=value`` for keys verl does not have) for one job."""
    method = METHODS[spec["method"]]
    pools = placement(spec["method"], res)
    prompt, response = spec["max_prompt_length"], spec["max_response_length"]
    # a part may set the rollout's length (ESR: its first N tokens)
    response = next((p.response_length(spec) for p in parts.parts(method) if p.response_length), response)
    o = _student(spec, pools, prompt, response, out_dir)
    if method.needs_teacher:
        o |= _teacher(spec, method, pools, prompt, response)
    extra = {
        # the dataset (and its overlong filter) and every agent loop render prompts with these:
        # Qwen3-1.7B is trained as it is evaluated, without thinking
        "+data.apply_chat_template_kwargs": spec.get("chat", {}),
        "+scout.method": spec["method"],
        "+scout.domain": spec["domain"],
        "+scout.total_steps": spec["total_steps"],
    }
    _method_parts(spec, method, res, pools, o, extra)
    kept = runs.checkpoint_steps(spec)
    extra["+scout.keep_steps"] = kept  # evaluated intermediate checkpoints: kept, the rest deleted
    if spec.get("keep_checkpoints") == "exported":  # ... or exported when saved, then deleted too
        extra["+scout.export_when_saved"] = True
    if kept:
        o["trainer.save_freq"] = math.gcd(spec["save_every"], *kept)
    return [f"{k}={_hydra(v)}" for k, v in {**o, **extra}.items()]


def _student(spec: dict, pools: dict, prompt: int, response: int, out_dir: str) -> dict:
    """The student's side: data, actor, rollout engine, advantage and the trainer's own settings."""
    tokens_per_gpu = prompt + response
    parquet = parquet_path(spec["train_data"])
    return {
        "data.train_files": parquet,
        "data.val_files": parquet,
        "data.train_batch_size": spec["batch_size"],
        "data.max_prompt_length": prompt,
        "data.max_response_length": response,
        "data.seed": spec["seed"],
        "data.filter_overlong_prompts": True,
        "actor_rollout_ref.model.path": spec["student"],
        "actor_rollout_ref.actor.optim.lr": spec["lr"],
        "actor_rollout_ref.actor.optim.lr_scheduler_type": "constant",
        "actor_rollout_ref.actor.optim.lr_warmup_steps": 0,
        "actor_rollout_ref.actor.ppo_mini_batch_size": spec["mini_batch_size"],
        "actor_rollout_ref.actor.ppo_epochs": spec["ppo_epochs"],
        # verl's loss reads the low and high bounds; clip_ratio alone is a default for neither
        "actor_rollout_ref.actor.clip_ratio": spec["clip"],
        "actor_rollout_ref.actor.clip_ratio_low": spec["clip"],
        "actor_rollout_ref.actor.clip_ratio_high": spec["clip"],
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
        "actor_rollout_ref.actor.use_kl_loss": spec["kl_beta"] > 0,
        "actor_rollout_ref.actor.kl_loss_coef": spec["kl_beta"],
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": tokens_per_gpu,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": spec["n"],
        "actor_rollout_ref.rollout.temperature": spec["temperature"],
        "actor_rollout_ref.rollout.top_p": spec["top_p"],
        "actor_rollout_ref.rollout.prompt_length": prompt,
        "actor_rollout_ref.rollout.response_length": response,
        # the engine serves prompt + response, not the model's full context (40,960 for Qwen3-1.7B)
        "actor_rollout_ref.rollout.max_model_len": prompt + response,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,
        # GRPO's advantages come from scout.algorithms (registered by scout.verl.plugin); OPD-family
        # methods ignore task advantages (use_task_rewards false).
        "algorithm.adv_estimator": "scout_grpo",
        "algorithm.use_kl_in_reward": False,
        "trainer.nnodes": pools["student_nodes"],
        "trainer.n_gpus_per_node": pools["student_gpus"],
        "trainer.total_epochs": spec["epochs"],
        "trainer.total_training_steps": spec["total_steps"],
        "trainer.save_freq": spec["save_every"],
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.default_local_dir": f"{out_dir}/checkpoints",
        "trainer.resume_mode": "auto",
        # verl's retention deletes a role's previous checkpoint before the tracker names the new
        # step; scout's trainers delete old ones only after it does (trainer.RetainCheckpoints)
        "trainer.max_actor_ckpt_to_keep": None,
        # a sample that fails (a grader error, a relay fault, a failed teacher request) is refilled
        # with a new prompt and counted (training/rollout_failure/*), never fatal; verl then
        # fetches prompts one at a time (data.gen_batch_size 1)
        "trainer.v1.sampler.sync_refill_failed_groups": True,
        "trainer.logger": verl_loggers(),
        "trainer.project_name": json.loads(os.environ.get(TRACKING_ENV) or "{}").get("project", default("tracking.project")),
        "trainer.experiment_name": f"{spec['setting']}-{spec['variant']}-s{spec['seed']}",
        "reward.custom_reward_function.path": "pkg://scout.verl.reward",
        "reward.custom_reward_function.name": "compute_score",
    }


def _teacher(spec: dict, method, pools: dict, prompt: int, response: int) -> dict:
    """The teacher's engine and the distillation loss, for every method that has a teacher."""
    return {
        "distillation.enabled": True,
        "distillation.nnodes": pools["teacher_nodes"],
        "distillation.n_gpus_per_node": pools["teacher_gpus"],
        "distillation.teacher_models.teacher_model.model_path": spec["teacher"],
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size": 1,
        "distillation.distillation_loss.loss_mode": loss_mode(method),
        "distillation.distillation_loss.use_policy_gradient": True,
        "distillation.distillation_loss.use_task_rewards": False,
        "distillation.distillation_loss.clip_ratio": spec["clip"],
        "distillation.distillation_loss.clip_ratio_low": spec["clip"],
        "distillation.distillation_loss.clip_ratio_high": spec["clip"],
        # the engine serves prompt + response tokens, not the model's full context (262k for
        # Qwen3-4B-Instruct-2507), and has its GPUs to itself but while a shared teacher trains
        f"{TEACHER_INFERENCE}.max_model_len": prompt + response + 1,  # verl: plus one scored token
        f"{TEACHER_INFERENCE}.gpu_memory_utilization": TEACHER_GPU_MEMORY,
        f"{TEACHER_INFERENCE}.max_num_batched_tokens": TEACHER_BATCHED_TOKENS,
        # CUDA graphs: verl's distillation defaults run the teacher engine eager; the student's
        # engine runs graphs and takes a weight update every step through the same path
        f"{TEACHER_INFERENCE}.enforce_eager": False,
    }


def _method_parts(spec: dict, method, res: dict, pools: dict, o: dict, extra: dict) -> None:
    """What a method's parts add (``scout.verl.parts``: Prune-OPD's top-k, Relay-OPD's student
    top-k, SCOUT's weight sync and teacher pool), its agent loop, and a served teacher."""
    loop = agent_loop(spec["method"])
    if loop:
        o["actor_rollout_ref.rollout.agent.default_agent_loop"] = loop
        o["actor_rollout_ref.rollout.agent.agent_loop_config_path"] = str(AGENT_LOOPS)
    # verl then reads each sample's rollout log-probs back; an agent loop that mixes two models'
    # tokens (Relay-OPD) has none, and the actor recomputes the old log-probs anyway
    o["actor_rollout_ref.rollout.calculate_log_probs"] = loop not in LOOPS_WITHOUT_LOGPROBS
    if res.get("teacher_served") and method.scores_with_frozen_teacher:
        # no teacher pool (distillation.nnodes 0): the trainer scores against the server the
        # driver finds for the cell (scout.verl.trainer.ServedTeacher)
        extra["+scout.teacher_served"] = True
    for part in parts.parts(method):
        for key, value in (part.overrides(spec, pools) if part.overrides else {}).items():
            (extra if key.startswith("+") else o)[key] = value


def _hydra(v) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_hydra(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hydra(x)}" for k, x in v.items()) + "}"
    if isinstance(v, str) and any(c in v for c in " ,=:'\"()[]{}"):
        return "'" + v.replace("'", "\\'") + "'"
    return str(v)


def compose(over: list[str]):
    """verl's ppo_trainer config with ``over`` applied (Hydra's compose; no training starts)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=over)


def worker_env(spec: dict, out_dir: str = ".") -> dict[str, str]:
    """Environment of every Ray process of the job: verl imports the plugin there, the registered
    losses read the cell's method settings, and verl's trackers write into the run folder
    (TensorBoard always; W&B offline unless credentials are given; MLflow to a local store unless
    a tracking URI is)."""
    env = {"VERL_USE_EXTERNAL_MODULES": PLUGIN, METHOD_CFG_ENV: json.dumps(spec.get("method_cfg", {}))}
    env[METHOD_ENV] = spec["method"]
    env |= {
        "TENSORBOARD_DIR": f"{out_dir}/{TB_DIR}",
        "WANDB_DIR": out_dir,
        TRACKING_ENV: os.environ.get(TRACKING_ENV, "{}"),
    }
    if not os.environ.get("WANDB_API_KEY"):
        env["WANDB_MODE"] = "offline"
    env.setdefault(
        "MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI") or f"file:{Path(out_dir).resolve()}/mlruns"
    )
    return env


def check(cfg) -> None:
    """verl's own validation of a composed config (batch sizes, micro-batches, loss aggregation,
    the distillation teacher pool), plus the section dataclasses verl builds at run time."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    import scout.verl.plugin  # noqa: F401  (the registries the config names)

    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    for section in (cfg.algorithm, cfg.actor_rollout_ref.rollout, cfg.distillation):
        omega_conf_to_dataclass(section)
    if cfg.algorithm.adv_estimator not in ("gae", "grpo", *ADV_ESTIMATOR_REGISTRY):
        raise ValueError(f"unknown advantage estimator {cfg.algorithm.adv_estimator!r}")
    optr = method_cfg(cfg).get("optr", {})
    if cfg.distillation.distillation_loss.loss_mode == "scout_optr" and optr["outlier"] != "mask":
        raise ValueError(f"OPTR's outlier loss {optr['outlier']!r} is not in the verl path (docs/verl-backend.md)")
    batch, mini = cfg.data.train_batch_size, cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    if batch % mini:  # verl finds this only at the first update (or never, with dynamic batch sizes)
        raise ValueError(f"ppo_mini_batch_size {mini} does not divide train_batch_size {batch}")


def build(spec: dict, res: dict, out_dir: str):
    """The checked verl config of one job; VerlConfigError names the cell and what verl said."""
    cell = f"{spec['setting']}/{spec['variant']}/s{spec['seed']}"
    try:
        cfg = compose(overrides(spec, res, out_dir))
    except PlacementError as exc:
        raise VerlConfigError(f"{cell}: {exc}") from exc
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.runtime_env = {"env_vars": worker_env(spec, out_dir)}
    if spec.get("device") == "cpu":  # no GPU: verl on the CPU platform, vLLM's CPU build (scout.verl.cpu)
        from scout.verl import cpu

        cpu.cpu_config(cfg, fake_gpus=res["nodes"] * res["gpus_per_node"])
    try:
        check(cfg)
    except Exception as exc:  # verl raises ValueError, AssertionError or hydra's InstantiationException
        raise VerlConfigError(f"{cell}: verl refuses the config: {exc}") from exc
    return cfg
