"""Checks of a paper-grid config that need no GPU, against the installed verl: run before
``--profile profiles/slurm`` (``scout preflight``), and once by the workflow before the first
training job. Each check goes through verl's own code where verl's code runs on CPU.

Per cell: the composed config (verl's validators); both ends of SCOUT's weight sync; the steps
verl's dataloader will run on the prepared data against the planned step count; for each vLLM
engine, the KV cache its context needs against the GPU memory its node gives it; the rollout's
log-prob setting against the agent loop. Per model: the first prompt as verl's own agent loop
renders it from the prepared data (thinking or not).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1 << 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}
VLLM_RESERVE = 0.1  # share of an engine's memory left for activations and CUDA graphs (assumption)


@dataclass
class Row:
    """One cell's line of the preflight table."""

    cell: str
    checks: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def ok(self, name: str, text: str) -> None:
        self.checks[name] = text

    def fail(self, name: str, text: str) -> None:
        self.checks[name] = f"FAIL: {text}"
        self.problems.append(f"{name}: {text}")


def rendered_prompt(cfg, tokenizer, messages: list[dict], loop_name: str | None = None) -> list[int]:
    """The prompt ids exactly as verl's agent loop for ``cfg`` renders ``messages`` (its continuous
    token builder, with the config's ``data.apply_chat_template_kwargs``)."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    agent = cfg.actor_rollout_ref.rollout.agent
    name = loop_name or agent.default_agent_loop
    loops = dict(_agent_loop_registry)
    if agent.get("agent_loop_config_path"):
        loops |= {c.name: c for c in OmegaConf.load(agent.agent_loop_config_path)}
    loop = hydra.utils.instantiate(
        loops[name], trainer_config=DictConfigWrap(config=cfg), server_manager=None, tokenizer=tokenizer,
        processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    return loop.loop.run_until_complete(loop.ct_build_initial_tokens(messages))


def kv_bytes_per_token(model_config: dict, dtype: str = "bfloat16") -> int:
    """KV cache bytes one token takes in every layer: 2 (K and V) x layers x KV heads x head_dim."""
    heads = model_config["num_attention_heads"]
    kv = model_config.get("num_key_value_heads", heads)
    head_dim = model_config.get("head_dim") or model_config["hidden_size"] // heads
    return 2 * model_config["num_hidden_layers"] * kv * head_dim * DTYPE_BYTES.get(dtype, 2)


def weight_bytes(model_config: dict, dtype: str = "bfloat16") -> int:
    """Parameter bytes of a decoder-only transformer from its config (embeddings, attention, MLP)."""
    h, v, layers = model_config["hidden_size"], model_config["vocab_size"], model_config["num_hidden_layers"]
    heads = model_config["num_attention_heads"]
    kv = model_config.get("num_key_value_heads", heads)
    hd = model_config.get("head_dim") or h // heads
    attn = h * hd * (heads + 2 * kv) + heads * hd * h
    mlp = 3 * h * model_config["intermediate_size"]
    embed = v * h * (1 if model_config.get("tie_word_embeddings") else 2)
    return (layers * (attn + mlp) + embed) * DTYPE_BYTES.get(dtype, 2)


def kv_fit(model_config: dict, max_model_len: int, gpu_gib: float, utilization: float, tp: int,
           dtype: str = "bfloat16") -> tuple[bool, str]:  # fmt: skip
    """Does one sequence of ``max_model_len`` tokens fit in the KV cache vLLM can allocate?"""
    budget = gpu_gib * GIB * utilization * tp * (1 - VLLM_RESERVE) - weight_bytes(model_config, dtype)
    need = kv_bytes_per_token(model_config, dtype) * max_model_len
    text = f"KV {need / GIB:.1f} GiB for {max_model_len} tokens, {max(budget, 0) / GIB:.1f} GiB free"
    return need <= budget, text


def steps_per_epoch(rows: int, batch: int) -> int:
    """verl's dataloader drops the last partial batch: floor, not ceil."""
    return rows // batch


def count_after_filter(cfg, tokenizer, parquet: str) -> int:
    """Rows verl's RLHFDataset keeps after its overlong-prompt filter (its own code, its own kwargs)."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return len(RLHFDataset(data_files=parquet, tokenizer=tokenizer, config=cfg.data))
