"""A LoRA teacher's weight sync in verl 0.9.1: only the adapter goes to the teacher's engine.

SCOUT's teacher trains on a pool of its own and pushes its weights into its vLLM engine through a
checkpoint engine (NCCL on GPUs, scout's gloo one on CPU). verl has adapter-only sync for LoRA
only on the colocated ("naive") path; on the checkpoint-engine path 0.9.1 sends the frozen base
and never the adapter (verl issue #7495; on vLLM 0.30 the base push then fails outright). These
patches backport the fix of verl PR #7496 (open upstream) with what SCOUT needs around it:

- the sender (``ActorRolloutRefWorker.update_weights``, verl/workers/engine_workers.py:758-766)
  asks its engine for the adapter (``base_sync_done``) and sends that: the teacher's engine
  loaded the base, the initial teacher, from disk, so a base push is never needed;
- the receiver (``CheckpointEngineWorker.update_weights``, verl/checkpoint_engine/base.py:353-360)
  sees adapter tensors arriving and hands them to verl's vLLM adapter with the adapter's peft
  config (built from the engine's model config), which loads them as an in-memory LoRA
  (``TensorLoRARequest``) that every later request of the engine uses;
- the teacher engine's model config carries the LoRA settings (verl builds it from the model
  path alone, verl/experimental/teacher_loop/teacher_model.py:79-84), so vLLM starts with LoRA
  enabled and the receiver knows the adapter's shape;
- vLLM 0.29 renamed ``WeightsMapper.get_unstacked_mapper``, which verl's in-memory LoRA loader
  calls on vLLM 0.25 and later (verl/utils/vllm/utils.py:82-83): the old name is given back where
  the new one exists (vLLM 0.24, the GPU install's, has neither and needs neither);
- vLLM applies an LM-head LoRA per sequence even on a prompt log-prob pass, which fails there (the
  teacher scores the student that way): with no adapter on the head, the plain head runs, called
  with whatever arguments the installed vLLM passes (0.24: three; 0.29 and later add
  ``skip_gather``).

Applied in every process of a cell whose teacher trains LoRA (``scout.verl.plugin``), at import of
each patched module.
"""

from __future__ import annotations

from scout.verl.env import method_cfg

LORA_KEY = "teacher_lora"


def teacher_lora_from_env() -> dict | None:
    """The cell's LoRA teacher settings, as every process of its job sees them (``SCOUT_METHOD_CFG``)."""
    lora = method_cfg(required=False).get("scout", {}).get(LORA_KEY)
    return lora if lora and lora["rank"] > 0 else None


def peft_config(model_config) -> dict | None:
    """The adapter's peft config from an engine's model config (None without LoRA): what verl's
    vLLM loader needs beside the adapter tensors (rank, alpha, targets)."""
    rank = getattr(model_config, "lora_rank", 0) or 0
    if rank <= 0:
        return None
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": int(rank),
        "lora_alpha": getattr(model_config, "lora_alpha", 16),
        "target_modules": list(model_config.target_modules),
        "bias": "none",
    }


# verl's own methods, kept here for the calls a patch hands back to them. The patched methods are
# module-level functions, so that Ray pickles them by reference: a closure over verl's original
# would be pickled by value, with every global it reads (``torch.distributed.config`` cannot be).
_ORIGINAL: dict = {}


async def send_adapter_or_delegate(self, global_steps: int = None, mode: str = "auto"):
    """``ActorRolloutRefWorker.update_weights``: over a checkpoint engine, a LoRA actor sends its
    adapter tensors alone (the engine holds the base); everything else is verl's own."""
    effective = mode if mode != "auto" else self.config.rollout.checkpoint_engine.backend
    if effective in ("naive", "delta_sharded") or not getattr(self.actor.engine, "_is_lora", False):
        return await _ORIGINAL["sender"](self, global_steps=global_steps, mode=mode)
    layered = self.config.rollout.get("layered_summon", False)  # as verl's own sync reads it
    params, config = self.actor.engine.get_per_tensor_param(layered_summon=layered, base_sync_done=True)
    if config is None:
        raise RuntimeError("the LoRA teacher's engine returned no adapter (is model.lora.merge set?)")
    metrics = await self.checkpoint_engine.send_weights(params, global_steps=global_steps)
    return metrics or {}


async def receive_adapter_or_delegate(self, global_steps: int = None):
    """``CheckpointEngineWorker.update_weights``: an engine with LoRA loads the adapter tensors it
    receives as its LoRA; everything else is verl's own."""
    config = peft_config(self.model_config)
    wire = getattr(self.checkpoint_engine, "wire_format", "named_tensors")
    if config is None or wire != "named_tensors":
        return await _ORIGINAL["receiver"](self, global_steps=global_steps)
    weights = self.checkpoint_engine.receive_weights(global_steps=global_steps)
    first = await anext(weights, None)
    if first is None:
        return
    if "lora_" not in first[0]:
        raise RuntimeError(f"the LoRA teacher's engine received {first[0]!r}, not an adapter tensor")

    async def stream():
        yield first
        async for item in weights:
            yield item

    await self.server_adapter.update_weights(
        stream(), global_steps=global_steps, wire_format=wire, peft_config=config, base_sync_done=True
    )


def _replace(cls, name: str, key: str, function) -> None:
    from verl.single_controller.base.decorator import Dispatch, register

    if key in _ORIGINAL:
        return
    _ORIGINAL[key] = getattr(cls, name)
    setattr(cls, name, register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)(function))


def patch_sender(module) -> None:
    _replace(module.ActorRolloutRefWorker, "update_weights", "sender", send_adapter_or_delegate)


def patch_receiver(module) -> None:
    _replace(module.CheckpointEngineWorker, "update_weights", "receiver", receive_adapter_or_delegate)


def patch_teacher_engine(module) -> None:
    """The teacher engine's replicas get the LoRA settings in their model config."""
    lora = teacher_lora_from_env()
    get_class = module.get_rollout_replica_class
    if lora is None or getattr(get_class, "_scout_lora", False):
        return

    def get_rollout_replica_class(name):
        from omegaconf import OmegaConf

        base = get_class(name)

        class LoraTeacherReplica(base):
            def __init__(self, *args, model_config, **kwargs):
                extra = {"lora_rank": int(lora["rank"]), "lora_alpha": lora["alpha"],
                         "target_modules": list(lora["target_modules"])}  # fmt: skip
                super().__init__(*args, model_config=OmegaConf.merge(model_config, extra), **kwargs)

        return LoraTeacherReplica

    get_rollout_replica_class._scout_lora = True
    module.get_rollout_replica_class = get_rollout_replica_class


def head_without_adapter(self, hidden_states, lm_head, *args, **kwargs):
    """``LogitsProcessorWithLoRA._get_logits`` where no adapter has head weights: the plain head.
    vLLM applies the head's LoRA per sequence (``sampler_indices``), which breaks on a prompt
    log-prob pass (one row per prompt token: "einsum(): subscript b has size 3 ... 25"); the
    teacher's adapters never touch the head (``target_modules`` are its projections), so its LoRA
    delta there is zero and the plain head is exact. The rest of the call (the bias, and
    ``skip_gather`` from vLLM 0.29 on) goes through as vLLM gave it."""
    if getattr(self, "_scout_head_lora", False):
        return _ORIGINAL["head"](self, hidden_states, lm_head, *args, **kwargs)
    head = getattr(lm_head, "base_layer", lm_head)
    return type(self.base_layer)._get_logits(self.base_layer, hidden_states, head, *args, **kwargs)


def head_adapter_set(self, index, lora_a, lora_b):
    self._scout_head_lora = True  # an adapter with head weights: vLLM's own path from now on
    return _ORIGINAL["head_set"](self, index, lora_a, lora_b)


def patch_vllm_head(module) -> None:
    cls = module.LogitsProcessorWithLoRA
    if "head" not in _ORIGINAL:
        _ORIGINAL["head"], _ORIGINAL["head_set"] = cls._get_logits, cls.set_lora
        cls._get_logits, cls.set_lora = head_without_adapter, head_adapter_set


def patch_vllm_mapper(module) -> None:
    cls = module.WeightsMapper
    if not hasattr(cls, "get_unstacked_mapper") and hasattr(cls, "get_rename_mapper"):
        cls.get_unstacked_mapper = cls.get_rename_mapper


def install() -> None:
    """The patches, each applied when its module is imported (idempotent); only for a LoRA teacher."""
    from scout.verl.import_hooks import patch_on_import  # only for a LoRA teacher

    if teacher_lora_from_env() is None:
        return
    patch_on_import("verl.workers.engine_workers", patch_sender)
    patch_on_import("verl.checkpoint_engine.base", patch_receiver)
    patch_on_import("verl.experimental.teacher_loop.teacher_model", patch_teacher_engine)
    patch_on_import("vllm.model_executor.models.utils", patch_vllm_mapper)
    patch_on_import("vllm.lora.layers.logits_processor", patch_vllm_head)
