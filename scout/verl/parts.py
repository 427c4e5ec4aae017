"""What each method part asks of verl, found by its kind (``scout.methods.PARTS``).

A method is the sum of its parts: its distillation loss, agent loop and trainer are the first a
part names, and its Hydra overrides are every part's. A part of a new kind is a row here beside
its row in ``scout.methods.PARTS`` and its embedded form (``scout.embedded.parts``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from scout.methods import METHODS, PARTS, form
from scout.verl.env import SYNC_CHECKSUM_ENGINE, SYNC_CHECKSUM_ENV

TEACHER_INFERENCE = "distillation.teacher_models.teacher_model.inference"
RELAY_STUDENT_BATCHED_TOKENS = 4096  # Relay-OPD's student engine serves top-k prefills like the teacher's
# SCOUT's teacher trainer -> teacher engine (separate processes: never naive): NCCL on GPUs, scout's
# gloo engine (scout/verl/gloo_sync.py) on CPU; the weight-sync buffers, the same size at both ends
WEIGHT_SYNC = {"cuda": ("nccl", 512), "cpu": ("gloo", 64)}
# a trainer on the engine's GPUs: NCCL refuses two ranks of one group on one GPU ("Duplicate GPU
# detected"), so the sync goes through host memory (gloo), as on CPU
SHARED_WEIGHT_SYNC = {"cuda": ("gloo", 512), "cpu": ("gloo", 64)}


def weight_sync(spec: dict, shared: bool = False) -> tuple[str, int]:
    """(checkpoint-engine backend, bucket MB) of SCOUT's teacher sync on the cell's device, with the
    trainer on a pool of its own or on the engine's GPUs (``shared``)."""
    return (SHARED_WEIGHT_SYNC if shared else WEIGHT_SYNC)[spec["device"]]  # a verl spec always names it


def _prune(spec: dict, pools: dict) -> dict:
    return {"distillation.distillation_loss.topk": spec["method_cfg"]["prune_opd"]["topk"]}


def _relay(spec: dict, pools: dict) -> dict:
    """The relay loop reads the student's top-k from prefills, whose prompt log-prob logits (full
    vocabulary, every position) vLLM's sizing does not count."""
    return {
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs": spec["method_cfg"]["relay_opd"]["student_topk"],
        "actor_rollout_ref.rollout.max_num_batched_tokens": RELAY_STUDENT_BATCHED_TOKENS,
    }


def _teacher_sync(spec: dict, pools: dict) -> dict:
    """The receiving end of the teacher's weight sync (the sender: scout.verl.trainer) and the
    teacher trainer's pool."""
    o = {f"+{TEACHER_INFERENCE}.checkpoint_engine._target_": "verl.workers.config.CheckpointEngineConfig"}
    backend, bucket_mb = weight_sync(spec, pools["train_shared"])
    if backend == "nccl" and os.environ.get(SYNC_CHECKSUM_ENV) == "1":  # the GPU check's (sync_checksum.py)
        backend = SYNC_CHECKSUM_ENGINE
        o[f"+{TEACHER_INFERENCE}.checkpoint_engine.custom_backend_module"] = "scout.verl.sync_checksum"
    o[f"+{TEACHER_INFERENCE}.checkpoint_engine.backend"] = backend
    o[f"+{TEACHER_INFERENCE}.checkpoint_engine.update_weights_bucket_megabytes"] = bucket_mb
    o["+scout.teacher_train.nnodes"] = pools["train_nodes"]
    o["+scout.teacher_train.n_gpus_per_node"] = pools["train_gpus"]
    o["+scout.teacher_train.shared"] = pools["train_shared"]
    if pools["train_shared"]:  # the engine sleeps while its GPUs train (verl's defaults, stated)
        o[f"{TEACHER_INFERENCE}.free_cache_engine"] = True
        o[f"+{TEACHER_INFERENCE}.enable_sleep_mode"] = True  # a dataclass default, not in the yaml
    return o


@dataclass(frozen=True)
class Part:
    loss_mode: str = ""  # scout's distillation loss it needs (registered by scout.verl.plugin)
    agent_loop: str = ""  # scout's agent loop for the student's rollout (agent_loops.yaml)
    loop_manager: str = ""  # "module:class" of the agent-loop manager its loop needs
    trainer: str = ""  # the trainer that runs it (scout.verl.trainer.TRAINERS)
    response_length: Callable[[dict], int] | None = None  # the student rollout's, from the spec
    overrides: Callable[[dict, dict], dict] | None = None  # (spec, pools) -> Hydra overrides


PLAIN = Part()
RELAY_MANAGER = "scout.verl.agent_loop:RelayAgentLoopManager"  # the relay loop needs the teacher's server
VERL_PARTS: dict[str, dict[str, Part]] = {
    "student_loss": {"opd": PLAIN, "optr": Part(loss_mode="scout_optr"), "grpo": PLAIN},
    "rollout": {"student": PLAIN, "relay": Part(agent_loop="scout_relay", loop_manager=RELAY_MANAGER, overrides=_relay)},
    "budget": {
        "full": PLAIN,
        # ESR distils on the first N tokens of each student rollout
        "esr": Part(response_length=lambda spec: spec["method_cfg"]["esr"]["max_tokens"]),
        "prune": Part(loss_mode="scout_prune", agent_loop="scout_budget", trainer="prune", overrides=_prune),
    },
    "teacher_phase": {
        "none": PLAIN,
        "scout": Part(trainer="scout", overrides=_teacher_sync),
        "prefix0": Part(trainer="scout", overrides=_teacher_sync),
    },
}


def parts(method) -> list[Part]:
    """A method's parts in ``PARTS`` order, which decides where two name a loss or a loop."""
    return [form(VERL_PARTS, name, getattr(method, name), "verl") for name in PARTS]


def first(method, field: str) -> str:
    """The first of a method's parts to name ``field`` (a loss, a loop, a trainer), or ''."""
    return next((getattr(p, field) for p in parts(method) if getattr(p, field)), "")


def agent_loop_manager(method_id: str):
    """verl's agent-loop manager, or the one a part names, imported where it is used (verl's
    processes, never the planner's)."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    name = first(METHODS[method_id], "loop_manager")
    if not name:
        return AgentLoopManagerTQ
    module, cls = name.split(":")
    return getattr(importlib.import_module(module), cls)
