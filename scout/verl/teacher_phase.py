"""SCOUT's teacher phase on verl's data structures, as pure functions.

Every ``interval`` student steps the teacher continues the student's own trajectories: for each
prompt, one student response is cut at k = floor(ratio * |y|) (``alg.split_points``), the teacher
samples ``K`` continuations of prompt + y[:k], each is graded as prefix + continuation, and the
teacher takes a GRPO step on those K-sample groups with the loss on its own tokens only
(``alg.continuation_mask``). The response is prefix + continuation, as verl's actor takes it, so
the teacher's log-probs over the prefix are computed but masked out (the embedded backend computes
each prefix once for its K continuations, ``lm.continuation_logp``: the same loss).

``continuation_requests`` builds the generation batch; ``teacher_train_batch`` builds the update
batch from what the teacher generated. The trainer (``scout.verl.trainer``) only moves these
batches between verl's worker groups.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from omegaconf import DictConfig, open_dict

from scout import algorithms as alg
from scout.verl.env import method_section

PROMPT_IDS = "scout_prompt_ids"  # the original prompt tokens (no padding)
PREFIX_IDS = "scout_prefix_ids"  # the student prefix y[:k]
MAX_TOKENS = "scout_max_tokens"  # per-request continuation budget: response length - k


def _rows(t: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(t, mask, strict=True)]


def objects(items: list) -> np.ndarray:
    """A 1-d object array of lists (np.array would make a 2-d array of equal-length lists)."""
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def first_of_each_group(uids: np.ndarray) -> list[int]:
    """One trajectory per prompt (the first of each uid group), as the embedded trainer takes."""
    seen: set = set()
    keep = []
    for i, u in enumerate(uids):
        if u not in seen:
            seen.add(u)
            keep.append(i)
    return keep


def left_pad(seqs: list[list[int]], pad_id: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    width = width or max(1, max(map(len, seqs)))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
    return ids, mask


def right_pad(seqs: list[list[int]], pad_id: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    width = width or max(1, max(map(len, seqs)))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def padded_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int, width: int | None = None) -> dict:
    """verl's padded layout: left-padded prompts, right-padded responses, and the joined ids,
    attention mask and positions."""
    p_ids, p_mask = left_pad(prompts, pad_id)
    r_ids, r_mask = right_pad(responses, pad_id, width)
    attn = torch.cat([p_mask, r_mask], dim=1)
    return {
        "prompts": p_ids,
        "responses": r_ids,
        "input_ids": torch.cat([p_ids, r_ids], dim=1),
        "attention_mask": attn,
        "position_ids": position_ids(attn),
    }


def self_test_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int, ranks: int):
    """The self-test's input to the teacher's trainer: its prompt + response rows in verl's layout,
    filled up to a multiple of the trainer's data-parallel ``ranks`` by verl's own padding (the
    first rows again). verl's dispatch splits a worker's input without padding it (an assertion
    otherwise), and the self-test's four responses are fewer than eight GPUs; the caller reads the
    first ``len(prompts)`` results."""
    from verl import DataProto
    from verl.protocol import pad_dataproto_to_divisor

    tensors = padded_batch(prompts, responses, pad_id)
    tensors["response_mask"] = tensors["attention_mask"][:, tensors["prompts"].shape[1] :]
    batch, _ = pad_dataproto_to_divisor(DataProto.from_dict(tensors=tensors), ranks)
    return worker_batch(batch, calculate_entropy=False, compute_loss=False, temperature=1.0)


def data_parallel_size(worker_group, mesh: str = "actor") -> int:
    """A worker group's data-parallel ranks, read as verl's trainer reads them (``_balance_batch``)."""
    if mesh not in worker_group._dispatch_info:
        worker_group._dispatch_info[mesh] = worker_group._query_dispatch_info(mesh)
    return max(worker_group._dispatch_info[mesh]) + 1


def continuation_requests(
    batch,
    ratio: float,
    k: int,
    eos_id: int,
    pad_id: int,
    response_length: int,
):
    """The teacher's generation batch: K copies of prompt + student prefix per prompt.

    ``batch`` is the student's rollout DataProto (left-padded ``prompts``, right-padded
    ``responses``, ``attention_mask``, non-tensor ``uid`` and the dataset fields). Each request
    carries its prefix ids (prefix + continuation is what is graded), its budget and a fresh group
    id shared by its K copies."""
    from verl import DataProto

    P = batch.batch["prompts"].shape[1]
    attn = batch.batch["attention_mask"]
    prompts = _rows(batch.batch["prompts"], attn[:, :P])
    responses = _rows(batch.batch["responses"], attn[:, P:])
    keep = first_of_each_group(batch.non_tensor_batch["uid"])
    bodies = [responses[i][:-1] if responses[i] and responses[i][-1] == eos_id else responses[i] for i in keep]
    ks = alg.split_points(torch.tensor([len(b) for b in bodies]), ratio).tolist()
    rep = [j for j in range(len(keep)) for _ in range(k)]
    src = [keep[j] for j in rep]
    prefix = [bodies[j][: ks[j]] for j in rep]
    inputs = [prompts[keep[j]] + prefix[i] for i, j in enumerate(rep)]
    ids, mask = left_pad(inputs, pad_id)
    non_tensor = {key: col[src] for key, col in batch.non_tensor_batch.items()}
    non_tensor["uid"] = np.array([f"{u}/teacher" for u in non_tensor["uid"]], dtype=object)
    non_tensor[PROMPT_IDS] = objects([prompts[keep[j]] for j in rep])
    non_tensor[PREFIX_IDS] = objects(prefix)
    non_tensor[MAX_TOKENS] = objects([response_length - ks[j] for j in rep])
    non_tensor["raw_prompt_ids"] = objects(inputs)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids(mask)},
        non_tensors=non_tensor,
        meta_info={"scout_prefix_ratio": ratio, "scout_group_size": k},
    )


def teacher_train_batch(requests, continuations: list[list[int]], rewards: list[float], pad_id: int, width: int):
    """The teacher's update batch: response = prefix + continuation (right-padded to ``width``),
    ``response_mask`` 1 on continuation tokens only, the outcome reward on the last real token."""
    from verl import DataProto

    nt = requests.non_tensor_batch
    prompts = list(nt[PROMPT_IDS])
    prefixes = list(nt[PREFIX_IDS])
    if not (len(prompts) == len(continuations) == len(rewards)):
        raise ValueError(f"{len(prompts)} requests, {len(continuations)} continuations, {len(rewards)} rewards")
    full = [list(p) + list(c) for p, c in zip(prefixes, continuations, strict=True)]
    too_long = [i for i, f in enumerate(full) if len(f) > width]
    if too_long:
        raise ValueError(f"prefix + continuation exceeds the response width {width} for requests {too_long}")
    tensors = padded_batch(prompts, full, pad_id, width)
    ks = torch.tensor([len(p) for p in prefixes])
    lengths = torch.tensor([len(f) for f in full])
    response_mask = alg.continuation_mask(ks, lengths, width)
    scores = torch.zeros((len(full), width), dtype=torch.float32)
    last = (lengths - 1).clamp(min=0)
    scores[torch.arange(len(full)), last] = torch.tensor(rewards, dtype=torch.float32)
    non_tensor = {key: col for key, col in nt.items() if key not in (PROMPT_IDS, PREFIX_IDS, "raw_prompt_ids")}
    return DataProto.from_dict(
        tensors={
            **tensors,
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
        },
        non_tensors=non_tensor,
        meta_info=dict(requests.meta_info),
    )


def engine_agreement(trainer_logp: torch.Tensor, prefix_lengths: list[int], engine_logp: list[list[float]]) -> float:
    """Pearson correlation of the continuation tokens' probabilities under the teacher's engine
    (returned with the samples) and under its trainer (``trainer_logp`` [N, width] over the
    response = prefix + continuation): near 1 when the engine serves the weights the trainer
    holds, that is, when the last weight sync delivered them (verl's rollout/actor check, for the
    teacher). NaN without two tokens or without spread."""
    a, b = [], []
    for row, k, lps in zip(trainer_logp, prefix_lengths, engine_logp, strict=True):
        a += row[k : k + len(lps)].tolist()
        b += list(lps)
    if len(a) < 2:
        return float("nan")
    x, y = np.exp(np.asarray(a, dtype=np.float64)), np.exp(np.asarray(b, dtype=np.float64))
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


# -- the teacher's trainer and its phase's cadence ------------------------------------------------


def teacher_worker_config(cfg: DictConfig) -> DictConfig:
    """The ``actor_rollout_ref``-shaped config of the teacher's trainer: the student's, with the
    teacher's model, its own LR, KL 0.001 to its initial weights, and the weight sync its inference
    engine receives with (``scout.verl.parts.weight_sync``; separate processes, so never naive). A
    trainer on the engine's GPUs keeps its weights and optimizer state in host memory between uses
    (verl's FSDP offload), leaving the GPUs to the engine."""
    sc = method_section("scout", cfg)
    t = copy.deepcopy(cfg.actor_rollout_ref)
    with open_dict(t):
        t.model.path = cfg.distillation.teacher_models.teacher_model.model_path
        t.actor.optim.lr = sc["teacher_lr"]
        t.actor.optim.total_training_steps = max(1, cfg.scout.total_steps // sc["interval"])
        t.actor.use_kl_loss = sc["kl_beta"] > 0
        t.actor.kl_loss_coef = sc["kl_beta"]
        t.actor.kl_loss_type = "low_var_kl"
        t.actor.ppo_mini_batch_size = cfg.data.train_batch_size * sc["k"]
        t.rollout.n = sc["k"]
        receiver = cfg.distillation.teacher_models.teacher_model.inference.checkpoint_engine
        t.rollout.checkpoint_engine.backend = receiver.backend  # the sender matches the engine's end
        t.rollout.checkpoint_engine.update_weights_bucket_megabytes = receiver.update_weights_bucket_megabytes
        t.rollout.checkpoint_engine.custom_backend_module = receiver.get("custom_backend_module")
        lora = teacher_lora(cfg)
        if lora:  # verl's FSDP LoRA (peft), frozen base; the reference is the base, adapter off
            t.model.lora_rank = int(lora["rank"])
            t.model.lora_alpha = lora["alpha"]
            t.model.target_modules = list(lora["target_modules"])
            # unmerged: each sync sends the adapter alone (scout.verl.lora_sync). layered_summon
            # takes verl's low-memory gather: FSDP1 (verl's strategy on GPUs) would otherwise
            # un-shard the whole float32 teacher on every GPU at each sync, beside its engine (16 GB
            # for a 4B teacher). Its layer-by-layer pass finds no adapter under peft 0.21 (peft drops
            # the layer's relative keys) and verl falls back to a gather into host memory, a unit
            # at a time: either way no GPU holds more than one unit unsharded
            t.model.lora.merge = False
            t.rollout.layered_summon = True
        if shared_trainer(cfg):
            t.actor.fsdp_config.param_offload = True
            t.actor.fsdp_config.optimizer_offload = True
            t.ref.fsdp_config.param_offload = True
    return t


def shared_trainer(cfg: DictConfig) -> bool:
    """Does the teacher's trainer sit on its engine's GPUs (``teacher_trainer: shared``)?"""
    return bool(cfg.scout.teacher_train.get("shared", False))


def teacher_lora(cfg: DictConfig) -> dict | None:
    """The teacher's LoRA settings (``methods.scout.teacher_lora`` resolved per cell), or None for a
    full teacher."""
    lora = method_section("scout", cfg).get("teacher_lora")
    return lora if lora and lora["rank"] > 0 else None


def teacher_step_due(global_step: int, interval: int) -> bool:
    """verl counts steps from 1; ``alg.is_teacher_step`` from 0."""
    return alg.is_teacher_step(global_step - 1, interval)


def teacher_ratio(cfg: DictConfig, global_step: int) -> float:
    sc = method_section("scout", cfg)
    if sc["prefix_zero"]:
        return 0.0
    return alg.prefix_ratio(global_step - 1, cfg.scout.total_steps, *sc["prefix_ratio"])


def teacher_update_metrics(raw: dict) -> dict:
    """The teacher update's metrics as verl's own actor update reduces them (``reduce_metrics``:
    verl's workers return every metric as a list over micro-batches)."""
    from verl.utils.metric import reduce_metrics

    flat = {k.removeprefix("actor/"): v for k, v in raw.items()}
    return {f"scout/teacher_{k}": float(v) for k, v in reduce_metrics(flat).items()}


def graded_texts(tokenizer, prefixes, continuations) -> list[str]:
    """Prefix + continuation decoded in one call, as verl's reward manager decodes a response
    (special tokens skipped): decoding the two apart and joining them would change what is graded
    wherever a multi-byte character is cut at the split or the prefix holds a special token."""
    return [
        tokenizer.decode(list(p) + list(c), skip_special_tokens=True)
        for p, c in zip(prefixes, continuations, strict=True)
    ]


def sampling_params(cfg: DictConfig, max_tokens: int) -> dict:
    r = cfg.actor_rollout_ref.rollout
    return {"max_tokens": int(max_tokens), "temperature": r.temperature, "top_p": r.top_p}


def batch_from_tq(td, pad_id: int):
    """A step's student batch as TransferQueue holds it (jagged ``prompts``/``responses``, dataset
    fields as non-tensor stacks) -> a DataProto with verl's padded layout."""
    from verl import DataProto

    prompts = [p.tolist() for p in td["prompts"].unbind()]
    responses = [r.tolist() for r in td["responses"].unbind()]
    non_tensor = {k: objects(list(td[k])) for k in ("uid", "data_source", "reward_model", "extra_info") if k in td}
    return DataProto.from_dict(tensors=padded_batch(prompts, responses, pad_id), non_tensors=non_tensor)


def worker_batch(batch, **meta):
    """verl's worker input: the padded batch in no-padding (jagged) form, plus metadata. Only the
    tensors the workers read travel: no non-tensor field (the rows in ``extra_info``, code test
    suites among them, would go to the workers three times a teacher phase otherwise)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    keys = ["prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"]
    keys += [k for k in ("old_log_probs", "ref_log_prob", "advantages") if k in batch.batch.keys()]
    td = left_right_2_no_padding(batch.select(batch_keys=keys, non_tensor_batch_keys=[], meta_info_keys=[]).to_tensordict())
    tu.assign_non_tensor(td, **meta)
    return td
