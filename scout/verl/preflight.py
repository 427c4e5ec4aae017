"""Checks of a paper-grid config that need no GPU, against the installed verl: run before
``--profile profiles/slurm`` (``scout preflight``), and once by the workflow before the first
training job. Each check goes through verl's own code where verl's code runs on CPU.

Per cell: the composed config (verl's validators); both ends of SCOUT's weight sync; the steps
verl's dataloader will run on the prepared data against the planned step count; for each vLLM
engine, the KV cache its context needs against the GPU memory its node gives it; for SCOUT, its
teacher trainer's state (full or LoRA) and activations against its pool's GPUs; the rollout's
log-prob setting against the agent loop. Per model: the first prompt as verl's own agent loop
renders it from the prepared data (thinking or not).
"""

from __future__ import annotations

from pathlib import Path

from scout import teacher_cost as tc
from scout.backends import CellCheck, PairCheck
from scout.io import read_jsonl
from scout.methods import METHODS
from scout.pairing import Checklist, check_pair
from scout.prompts import view_key
from scout.verl import config as vc
from scout.verl import data as vdata
from scout.verl.env import method_section

GIB = 1 << 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}
VLLM_RESERVE = 0.1  # share of an engine's memory left for activations and CUDA graphs (assumption)


Row = Checklist  # one cell's line of the preflight table: a check per column


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


def prefill_logits_fit(batched_tokens: int, vocab: int, gpu_gib: float, utilization: float,
                       resident_bytes: float = 0.0) -> tuple[bool, str]:  # fmt: skip
    """Do the logits of a prompt-log-prob prefill fit beside vLLM's share of the GPU? vLLM sizes
    its memory without them: every position of a chunk of ``batched_tokens`` gets full-vocabulary
    logits and their fp32 log-probs (about 6 bytes a token and vocabulary entry), outside its
    ``utilization`` share, beside whatever else lives on the GPU (``resident_bytes``: the
    colocated FSDP actor's share of weights, gradients and Adam state)."""
    need = batched_tokens * vocab * 6
    free = gpu_gib * GIB * (1 - utilization) - resident_bytes
    text = f"prefill logits {need / GIB:.1f} GiB for {batched_tokens} tokens, {max(free, 0) / GIB:.1f} GiB outside vLLM"
    return need <= free, text


def _teacher_state(cfg, arch: dict) -> tuple[float, str]:
    """The teacher trainer's state in bytes (``scout.teacher_cost``) and what kind of teacher it is."""
    from scout.verl.teacher_phase import teacher_lora

    lora = teacher_lora(cfg)
    adapters = tc.lora_parameters(arch, lora["rank"], lora["target_modules"]) if lora else 0
    return tc.trainer_bytes(weight_bytes(arch, "float32") / 4, adapters), f"LoRA r{lora['rank']}" if lora else "full"


def teacher_trainer_fit(cfg, arch: dict, gpu_gib: float) -> tuple[bool, str]:
    """Does SCOUT's teacher trainer (full or LoRA, ``scout.teacher_cost``) fit the GPUs of its pool:
    its state sharded over them and one micro-batch's activations on each? A shared trainer has
    the engine's GPUs to itself while it trains (the engine asleep), so the same check holds."""
    from scout.verl.teacher_phase import shared_trainer

    tt = cfg.scout.teacher_train
    gpus = tt.nnodes * tt.n_gpus_per_node
    state, kind = _teacher_state(cfg, arch)
    act = tc.activation_bytes(arch, cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu)
    where = "the engine's" if shared_trainer(cfg) else "its own"
    text = (f"{kind} teacher on {where} {gpus} GPUs: state {state / max(gpus, 1) / GIB:.3g} + activations "
            f"{act / GIB:.3g} GiB a GPU, {tc.USABLE * gpu_gib:.3g} usable")  # fmt: skip
    return tc.fits(state, act, gpus, gpu_gib), text


def shared_host_fit(cfg, arch: dict, mem_mb: float) -> tuple[bool, str]:
    """A shared trainer's state waits in host memory while the engine serves, and the engine's
    weights while it trains (vLLM's level-1 sleep): do both fit a node's memory at once? Each
    node holds its share of the FSDP state and one weight copy per engine replica on it."""

    tt = cfg.scout.teacher_train
    inference = cfg.distillation.teacher_models.teacher_model.inference
    state, kind = _teacher_state(cfg, arch)
    replicas = tt.n_gpus_per_node // max(inference.tensor_model_parallel_size, 1)
    engine = replicas * weight_bytes(arch, str(inference.dtype))
    need, have = state / max(tt.nnodes, 1) + engine, tc.USABLE * mem_mb * (1 << 20)
    text = (f"{kind} teacher state {state / max(tt.nnodes, 1) / GIB:.3g} + {replicas} sleeping engine copies "
            f"{engine / GIB:.3g} GiB a node, {have / GIB:.3g} usable of its host memory")  # fmt: skip
    return need <= have, text


def steps_per_epoch(rows: int, batch: int) -> int:
    """verl's dataloader drops the last partial batch: floor, not ceil."""
    return rows // batch


def count_after_filter(cfg, tokenizer, parquet: str) -> int:
    """Rows verl's RLHFDataset keeps after its overlong-prompt filter (its own code, its own kwargs)."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return len(RLHFDataset(data_files=parquet, tokenizer=tokenizer, config=cfg.data))


# ------------------------------------------------------------------------------------------------
# The preflight of a config
# ------------------------------------------------------------------------------------------------

LOGPROB_LOOPS = {"", "scout_budget"}  # agent loops that return the rollout's log-probs ('': verl's own)


def _local(path: str) -> str:
    """``path`` where it is a local folder; an OSError that says so where it names one that is not
    there (transformers took it for a malformed hub id: "Repo id must be in the form ...")."""
    if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().is_dir():
        raise OSError(f"no folder at {path} (a local path; a hub id has the form namespace/name)")
    return path


def _model_config(path: str) -> dict:
    """A model's architecture (its config.json)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(_local(path)).to_dict()


def _engines(cfg, item: CellCheck) -> list[dict]:
    """Each vLLM engine of a cell: name, model id, max_model_len, gpu_memory_utilization, tensor
    parallel size, batched tokens, whether it serves prompt log-probs (the teacher scores every
    response; a student engine asked for log-probs, Relay-OPD's, checks its own top-k), and what shares its GPUs (the student
    rollout is colocated with the FSDP actor)."""
    spec, res, teacher_id = item.spec, item.resources, item.teacher
    r = cfg.actor_rollout_ref.rollout
    length = r.get("max_model_len") or (r.prompt_length + r.response_length)
    method = METHODS[spec["method"]]
    out = [{"name": "student rollout", "model": item.student, "length": length, "util": r.gpu_memory_utilization,
            "tp": r.tensor_model_parallel_size, "batched": r.max_num_batched_tokens,
            "prompt_logprobs": "max_logprobs" in r.get("engine_kwargs", {}).get("vllm", {}), "actor_gpus": res["nodes"] * res["gpus_per_node"]}]  # fmt: skip
    if teacher_id and method.needs_teacher:
        t = cfg.distillation.teacher_models.teacher_model.inference
        out.append({"name": "teacher engine", "model": teacher_id, "length": t.max_model_len,
                    "util": t.gpu_memory_utilization, "tp": t.tensor_model_parallel_size,
                    "batched": t.max_num_batched_tokens, "prompt_logprobs": True, "actor_gpus": None})  # fmt: skip
    return out


def check_cell(item: CellCheck, tokenizers: dict, counts: dict, log=print) -> Row:
    """Every check of one cell; ``tokenizers`` and ``counts`` are caches shared by the cells."""
    spec, res = item.spec, item.resources
    row = Row(item.key)
    try:
        cfg = vc.build(spec, res, item.out_dir)
    except vc.VerlConfigError as exc:
        row.fail("config", str(exc))
        return row
    row.ok("config", "valid")
    _check_weight_sync(row, cfg)
    _check_teacher_batch(row, cfg)
    loop = vc.agent_loop(spec["method"])
    wants = cfg.actor_rollout_ref.rollout.calculate_log_probs
    if wants and loop not in LOGPROB_LOOPS:
        row.fail("log-probs", f"calculate_log_probs is on but the {loop} loop returns no rollout log-probs")
    else:
        row.ok("log-probs", f"{'on' if wants else 'off'} ({loop or 'single_turn_agent'})")
    _check_memory(row, cfg, item)
    return _check_steps(row, cfg, item, tokenizers, counts, log)


def _check_weight_sync(row: Row, cfg) -> None:
    """SCOUT's teacher sync: the trainer sends with what the engine receives with, never NCCL
    between two ranks of one GPU."""
    from scout.verl.teacher_phase import shared_trainer, teacher_worker_config  # ray and verl's trainer: as above

    if "scout" in cfg:
        if "teacher_train" in cfg.scout:
            sender = teacher_worker_config(cfg).rollout.checkpoint_engine.backend
            receiver = cfg.distillation.teacher_models.teacher_model.inference.get("checkpoint_engine", {}).get(
                "backend", "naive"
            )
            if sender != receiver or receiver == "naive":
                row.fail("weight sync", f"trainer sends with {sender}, the teacher engine receives with {receiver}")
            elif sender == "nccl" and shared_trainer(cfg):
                row.fail("weight sync", "a trainer on the engine's GPUs cannot sync over NCCL (two ranks on one GPU)")
            else:
                row.ok("weight sync", f"{sender} -> {receiver}")


def _check_teacher_batch(row: Row, cfg) -> None:
    """A teacher phase trains on all its batch x K continuations in one update, which verl splits
    over the trainer's data-parallel ranks without padding: a remainder stops the job at its first
    phase, on GPUs."""
    if "scout" in cfg and "teacher_train" in cfg.scout:
        rows = cfg.data.train_batch_size * method_section("scout", cfg)["k"]
        tt = cfg.scout.teacher_train
        ranks = tt.nnodes * tt.n_gpus_per_node
        if rows % ranks:
            row.fail("teacher batch", f"{rows} continuations (batch x K) do not split over the teacher trainer's {ranks} GPUs")
        else:
            row.ok("teacher batch", f"{rows} continuations over {ranks} GPUs")


def _check_memory(row: Row, cfg, item: CellCheck) -> None:
    """Each engine's KV cache (and a prompt log-prob engine's prefill logits), and a trained
    teacher's state, against the GPUs' memory."""
    from scout.verl.teacher_phase import shared_trainer

    res = item.resources
    gpu_gb = res.get("gpu_mem_gb")
    for e in _engines(cfg, item):
        name = e["name"]
        if not gpu_gb:
            row.fail(f"{name} KV", "resources give no gpu_mem_gb to check the KV cache against")
            continue
        try:
            arch = _model_config(item.arch[e["model"]])
        except (OSError, ValueError) as exc:
            row.fail(f"{name} KV", f"cannot read the config of {e['model']}: {str(exc).splitlines()[0][:120]}")
            continue
        fits, text = kv_fit(arch, e["length"], gpu_gb, e["util"], e["tp"])
        (row.ok if fits else row.fail)(f"{name} KV", f"{text} ({gpu_gb} GB GPUs at {e['util']})")
        if e["prompt_logprobs"]:
            # fp32 weights, gradients and two Adam moments of the colocated actor, sharded over its GPUs
            resident = 16 * weight_bytes(arch, "float32") / 4 / e["actor_gpus"] if e["actor_gpus"] else 0.0
            fits, text = prefill_logits_fit(e["batched"] or 8192, arch["vocab_size"], gpu_gb, e["util"], resident)
            (row.ok if fits else row.fail)(f"{name} prefill", text)
    if gpu_gb and "scout" in cfg and "teacher_train" in cfg.scout:
        try:
            arch = _model_config(item.arch[item.teacher])
        except (OSError, ValueError) as exc:
            row.fail("teacher trainer", f"cannot read the teacher's config: {str(exc).splitlines()[0][:120]}")
        else:
            fits, text = teacher_trainer_fit(cfg, arch, gpu_gb)
            (row.ok if fits else row.fail)("teacher trainer", text)
            if shared_trainer(cfg):
                fits, text = shared_host_fit(cfg, arch, res["mem_mb"])
                (row.ok if fits else row.fail)("teacher host memory", text)


def _check_steps(row: Row, cfg, item: CellCheck, tokenizers: dict, counts: dict, log=print) -> Row:
    """The steps verl's dataloader runs over the prepared data against the plan's."""
    spec = item.spec
    data = item.data_path
    if not Path(data).exists():
        row.fail("steps", f"{data} is not prepared (snakemake ... prepare_data targets first)")
        return row
    view = item.view
    key = (item.train_data, view_key(view))
    if key not in counts:
        tok = _cached_tokenizer(tokenizers, view["tokenizer"])
        if isinstance(tok, str):
            row.fail("steps", tok)
            return row
        parquet = vdata.export(data, vc.parquet_path(data))
        counts[key] = count_after_filter(cfg, tok, str(parquet))
        first = rendered_prompt(cfg, tok, _first_prompt(data))
        log(f"first prompt of {item.train_data} as verl renders it for {view['tokenizer']} "
            f"(chat options {view['chat'] or 'none'}):\n{tok.decode(first)}\n")  # fmt: skip
    verl_steps = steps_per_epoch(counts[key], spec["batch_size"]) * spec["epochs"]
    planned = spec["total_steps"]
    if planned > verl_steps:  # verl's epochs would end first: no final checkpoint, an early export
        row.fail("steps", f"verl's dataloader runs {verl_steps} steps ({counts[key]} rows kept), the plan has "
                 f"{planned}: prepare the data again, then restart snakemake")  # fmt: skip
    else:
        row.ok("steps", f"{planned} planned, verl runs up to {verl_steps} ({counts[key]} rows kept)")
    return row


def _tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_local(name))


def _cached_tokenizer(tokenizers: dict, path: str):
    """A tokenizer, loaded once for all checks; where it cannot be loaded, why (a string)."""
    if path not in tokenizers:
        try:
            tokenizers[path] = _tokenizer(path)
        except (OSError, ValueError) as exc:  # not downloaded, no hub, or not a tokenizer
            tokenizers[path] = f"cannot load the tokenizer of {path}: {str(exc).splitlines()[0][:160]}"
    return tokenizers[path]


def _first_prompt(path: str) -> list[dict]:
    return _prompts(path, 1)[0]


def _prompts(path: str, n: int) -> list[list[dict]]:
    """The first ``n`` prompts of a prepared dataset, as chat messages."""

    rows = read_jsonl(path)[:n]
    return [r["prompt"] if isinstance(r["prompt"], list) else [{"role": "user", "content": r["prompt"]}] for r in rows]


# A stand-in prompt where the training data is not prepared yet: the template check needs a conversation
STAND_IN = [[{"role": "user", "content": "Find the sum of 2 and 3. Put the final answer in \\boxed{}."}]]


def pairs(items: list[PairCheck], tokenizers: dict) -> list:
    """The tokenizer and template check (``scout.pairing``) of each teacher-student pair."""
    out = []
    for item in items:
        toks = []
        for path in item.tokenizers:
            toks.append(_cached_tokenizer(tokenizers, path))
        unread = [t for t in toks if isinstance(t, str)]
        if unread:
            failed = Checklist(item.name)
            failed.fail("tokenizers", "; ".join(dict.fromkeys(unread)))
            out.append(failed)
            continue
        convs = _prompts(item.data_path, 4) if Path(item.data_path).exists() else STAND_IN
        out.append(check_pair(item.name, *toks, convs, *item.chats))
    return out


def run(items: list[CellCheck], tokenizers: dict, log=print) -> list[Row]:
    """Every check of each cell."""
    counts: dict = {}
    return [check_cell(item, tokenizers, counts, log) for item in items]
