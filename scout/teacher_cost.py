"""What SCOUT's teacher costs in GPUs, by how it trains and where it sits: the cost its paper names
as its main limitation, for ``scout plan`` and the preflight.

A SCOUT cell on verl has three pools (``scout.placement``): the student's (as OPD's),
the teacher's inference engine (as OPD's) and the teacher's trainer (SCOUT's own). What the
trainer holds per parameter of the teacher, sharded over its GPUs by FSDP:

- a full teacher (the paper): fp32 weights, gradients and Adam's two moments (16 B), plus the
  frozen reference for the KL to the initial weights (a second fp32 copy, 4 B: verl's default
  ``model_dtype``);
- a LoRA teacher: the frozen fp32 base (4 B), which is also the reference (adapters off), and 16 B
  per adapter parameter.

And two placements:

- own pool (the paper's): the trainer on GPUs of its own;
- shared (``resources: {teacher_trainer: shared}``): the trainer on the engine's GPUs; the engine
  sleeps while the teacher trains (vLLM's level-1 sleep: weights to host memory, KV cache freed)
  and the trainer's state waits in host memory while the engine serves (FSDP offload). The pools
  are OPD's, so SCOUT takes OPD's nodes.

Beside its share of the state, each GPU holds one micro-batch's activations (verl's dynamic batch:
``ppo_max_token_len_per_gpu`` tokens, prompt + response): the logits (bf16, and fp32 log-softmax:
6 B per token and vocabulary entry), every layer's checkpointed input (bf16) and the recomputed
layer's MLP intermediates (four bf16 tensors). A LoRA teacher needs the same activations: its
gradients flow through the frozen base. A trainer fits when state and activations take at most
``USABLE`` of each GPU (the rest: CUDA context, allocator slack, communication buffers). These are
estimates from the architecture, not measurements. Each weight sync sends the trainer's fp32
tensors: the whole teacher, or a LoRA teacher's adapters alone (``scout.verl.lora_sync``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scout.methods import LORA_TARGETS
from scout.placement import PlacementError, placement

GIB = 1 << 30
TRAINED_BYTES = 16  # fp32 weights, gradients, Adam's two moments
FROZEN_BYTES = 4  # an fp32 copy that does not train (a full teacher's reference; a LoRA teacher's base)
SYNC_BYTES = 4  # the trainer's fp32 tensors, as the checkpoint engine sends them
USABLE = 0.9  # of a GPU's memory for the training state and activations
WHAT_IF_RANK = 16  # the LoRA rank the plan costs where the config trains full teachers


def lora_parameters(arch: dict, rank: int, targets: tuple[str, ...] | list[str] = LORA_TARGETS) -> int:
    """Adapter parameters of a Qwen-style decoder: rank x (fan-in + fan-out) per adapted projection
    per layer (A is rank x in, B is out x rank). ``arch``: Hugging Face config keys."""
    h, inter, heads = arch["hidden_size"], arch["intermediate_size"], arch["num_attention_heads"]
    kv = arch.get("num_key_value_heads", heads)
    hd = arch.get("head_dim") or h // heads
    shapes = {
        "q_proj": (h, heads * hd), "k_proj": (h, kv * hd), "v_proj": (h, kv * hd), "o_proj": (heads * hd, h),
        "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h),
    }  # fmt: skip
    return arch["num_hidden_layers"] * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)


def trainer_bytes(params: float, adapters: float = 0.0) -> float:
    """The teacher trainer's state in bytes: a full teacher's (``adapters`` 0) or a LoRA teacher's."""
    if adapters:
        return params * FROZEN_BYTES + adapters * TRAINED_BYTES
    return params * (TRAINED_BYTES + FROZEN_BYTES)


def sync_bytes(params: float, adapters: float = 0.0) -> float:
    """Bytes one weight sync moves into the engine: the teacher, or its adapters."""
    return (adapters or params) * SYNC_BYTES


def activation_bytes(arch: dict, tokens: int) -> float:
    """One micro-batch's activations on a GPU: logits, checkpointed layer inputs, one layer's MLP."""
    per_token = 6 * arch["vocab_size"] + 2 * arch["hidden_size"] * arch["num_hidden_layers"]
    return tokens * (per_token + 8 * arch["intermediate_size"])


def fits(state: float, activations: float, gpus: int, gpu_gib: float) -> bool:
    return gpus > 0 and state / gpus + activations <= USABLE * gpu_gib * GIB


@dataclass(frozen=True)
class Option:
    """One way of running a SCOUT cell: its nodes and GPUs, and what its teacher trainer holds."""

    name: str
    nodes: int
    gpus: int
    trainer_gpus: int
    state_gib_per_gpu: float
    activation_gib: float
    sync_mib: float
    fits: bool


def _option(name: str, nodes: int, gpus_per_node: int, gpu_gib: float, params: float, adapters: float,
            shared: bool, activations: float) -> Option:  # fmt: skip
    # shared: the trainer on the engine's pool, placed as OPD's teacher (the student's node and the engine's)
    res = {"nodes": nodes, "gpus_per_node": gpus_per_node, "teacher_trainer": "shared" if shared else "own"}
    pools = placement("scout", res)
    trainer = pools["train_nodes"] * pools["train_gpus"]
    state = trainer_bytes(params, adapters)
    return Option(name, nodes, nodes * gpus_per_node, trainer, state / max(trainer, 1) / GIB, activations / GIB,
                  sync_bytes(params, adapters) / (1 << 20), fits(state, activations, trainer, gpu_gib))  # fmt: skip


def fewest_nodes(name: str, gpus_per_node: int, gpu_gib: float, params: float, adapters: float, shared: bool,
                 activations: float, least: int = 2, most: int = 16) -> Option:  # fmt: skip
    """The smallest placement (from OPD's nodes, ``least``, up) whose teacher trainer fits its GPUs."""
    for nodes in range(least, max(least, most) + 1):
        try:
            opt = _option(name, nodes, gpus_per_node, gpu_gib, params, adapters, shared, activations)
        except PlacementError:  # too few GPUs on one node for three pools
            continue
        if opt.fits:
            return opt
    return opt


def options(params_b: float, arch: dict, tokens: int, configured_nodes: int, gpus_per_node: int, gpu_gib: float,
            rank: int = 0, targets: tuple[str, ...] | list[str] = LORA_TARGETS, opd_nodes: int = 2) -> list[Option]:  # fmt: skip
    """SCOUT's options for one teacher (``params_b`` billions, ``arch`` its config.json keys, ``tokens``
    a micro-batch): the configured placement with a full teacher, then the fewest nodes, from OPD's
    (``opd_nodes``) up, for a full teacher and a LoRA one (``rank``, or ``WHAT_IF_RANK`` where the
    config trains full teachers), each on a pool of its own and on the engine's GPUs."""
    p, act = params_b * 1e9, activation_bytes(arch, tokens)
    r = rank or WHAT_IF_RANK
    a = lora_parameters(arch, r, targets)
    g, m = gpus_per_node, gpu_gib
    return [
        _option("full teacher, own pool (configured)", configured_nodes, g, m, p, 0, False, act),
        fewest_nodes("full teacher, own pool", g, m, p, 0, False, act, opd_nodes),
        fewest_nodes("full teacher, shared", g, m, p, 0, True, act, opd_nodes),
        fewest_nodes(f"LoRA r{r} teacher, own pool", g, m, p, a, False, act, opd_nodes),
        fewest_nodes(f"LoRA r{r} teacher, shared", g, m, p, a, True, act, opd_nodes),
    ]


def gpu_hours(gpus: int, runtime_min: float) -> float:
    return gpus * runtime_min / 60




# -- a frozen teacher served once (scout.teacher_server): how many students one server keeps up with
# Scoring a student's batch is prefill alone: about 2 FLOPs per teacher parameter and token.
PEAK_TFLOPS = 312.0  # ASSUMPTION: an A100's dense bf16 peak (the paper config's GPUs)
PREFILL_MFU = 0.4  # ASSUMPTION: the share of that peak a prefill-only vLLM server reaches
MEAN_FILL = 0.5  # ASSUMPTION: mean prompt and response lengths as shares of their limits


def scored_tokens_per_second(params: float, gpus: int, peak_tflops: float = PEAK_TFLOPS,
                             mfu: float = PREFILL_MFU) -> float:  # fmt: skip
    """Tokens a teacher of ``params`` parameters scores per second on ``gpus`` GPUs (modelled)."""
    return gpus * peak_tflops * 1e12 * mfu / (2 * params)


def students_per_server(tokens_per_second: float, tokens_per_step: float, step_seconds: float) -> int:
    """Students a server keeps up with: how many students' steps it scores while one step runs."""
    return max(1, math.floor(tokens_per_second * step_seconds / tokens_per_step))
