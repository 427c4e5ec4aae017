"""SCOUT's pieces registered into verl's registries, wrapping ``scout.algorithms`` (not rewritten).

verl imports this module in every process it starts (trainer, actor workers, rollout servers) in
two supported ways: as a ``verl.plugins`` entry point of the installed package (loaded on
``import verl``), and through ``VERL_USE_EXTERNAL_MODULES``, which the driver sets for the Ray
job so that a failure to import is loud rather than logged at debug level.

Registered:
- advantage estimator ``scout_grpo``: group-normalised outcome advantages (GRPO and the SCOUT
  teacher phase), grouping by verl's ``uid``;
- distillation loss ``scout_optr``: OPTR's trust-region K1 (tokens with P_trust below the
  threshold get no OPD signal);
- distillation loss ``scout_prune``: Prune-OPD's K1 with the cumulative top-k-overlap weights,
  and the counts its budget rule needs (``budget_metrics``).

Method settings the loss functions need (threshold, tau, ...) reach the workers as JSON in
``SCOUT_METHOD_CFG`` (``scout.verl.env``; verl's loss config dataclasses refuse unknown fields).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from scout import algorithms as alg
from scout.verl import lora_sync
from scout.verl.env import METHOD_ENV, method_cfg, method_section

# Prune-OPD's adaptive budget: the trainer passes L to the actor's loss under BUDGET_KEY and reads
# back the two counts the budget rule needs.
BUDGET_KEY = "scout_prune_budget"
BUDGET_HITS = "distillation/prune_budget_hits"
BUDGET_SAMPLES = "distillation/prune_budget_samples"




def shaped(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The distillation advantage after the cell's method's ``advantage`` function, if it names one
    (``scout.methods``); the same function the embedded backend applies."""
    from scout.methods import METHODS  # in a worker, on its first call: the registries load first

    method = METHODS.get(os.environ.get(METHOD_ENV, ""))
    fn = method.advantage_fn() if method else None
    if fn is None:
        return adv
    return fn(adv, mask, method_cfg().get(method.id, {}))



# -- advantage estimator -------------------------------------------------------------------------


def scout_grpo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, config=None, **_):
    """verl advantage-estimator signature around ``alg.grpo_advantages_by_id`` (groups by verl's
    uid, of any size: verl pads batches with samples that share one); returns (adv, returns)."""
    scores = token_level_rewards.sum(dim=-1)
    adv = alg.grpo_advantages_by_id(scores, [str(u) for u in index]).to(scores.dtype)
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


# -- distillation losses -----------------------------------------------------------------------------
# verl's contract: fn(config, distillation_config, model_output, data) -> (per-token losses
# (bsz, resp_len), metrics); in policy-gradient mode verl uses -losses.detach() as the advantage.


def _padded(t: torch.Tensor, data) -> torch.Tensor:
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(t, data)


def _dense(t: torch.Tensor, fill=0) -> torch.Tensor:
    return t.to_padded_tensor(fill) if t.is_nested else t


def k1_losses(config, distillation_config, model_output, data):
    """OPD's K1 term for methods whose row reshapes the advantage (verl's built-in k1 otherwise)."""
    mask = _dense(data["response_mask"]).to(torch.float32)
    teacher = _padded(data["teacher_logprobs"], data).squeeze(-1)
    old = _dense(data["old_log_probs"], 0.0)
    return -shaped(alg.k1_advantage(teacher, old) * mask, mask), {}


def optr_losses(config, distillation_config, model_output, data):
    oc = method_section("optr")
    if oc["outlier"] != "mask":
        raise NotImplementedError("OPTR on verl supports outlier=mask (top-k forward KL needs verl's top-k path)")
    mask = _dense(data["response_mask"]).to(torch.float32)
    teacher = _padded(data["teacher_logprobs"], data).squeeze(-1)
    old = _dense(data["old_log_probs"], 0.0)
    trusted = alg.optr_mask(alg.optr_trust(teacher, old), mask, oc["threshold"])
    adv = alg.k1_advantage(teacher, old) * trusted
    frac = float(trusted.sum() / mask.sum().clamp_min(1.0))
    return -shaped(adv, mask), {"distillation/optr_trusted_frac": frac}


def teacher_logp_of_sampled(teacher_ids: torch.Tensor, teacher_lp: torch.Tensor, tokens: torch.Tensor):
    """The teacher's log-prob of each sampled token from its top-k lists, and whether it was there.

    With ``keep_sampled_logprob`` patched into the teacher's server, the sampled token is always
    in the lists with its exact log-prob; should it be missing, the k-th log-prob (an upper bound)
    stands in and ``found`` says so."""
    hit = teacher_ids == tokens.unsqueeze(-1)
    found = hit.any(dim=-1)
    exact = (teacher_lp * hit).sum(dim=-1)
    return torch.where(found, exact, teacher_lp.min(dim=-1).values), found


def prune_losses(config, distillation_config, model_output, data):
    pc = method_section("prune_opd")
    mask = _dense(data["response_mask"]).to(torch.float32)
    k = distillation_config.distillation_loss.topk
    overlap = _padded(model_output["overlap_count"], data).to(torch.float32) / k
    teacher_ids = _padded(data["teacher_ids"], data)
    teacher_lp = _padded(data["teacher_logprobs"], data)
    tokens = _dense(data["responses"], 0)
    t_logp, found = teacher_logp_of_sampled(teacher_ids, teacher_lp, tokens)
    old = _dense(data["old_log_probs"], 0.0)
    w = alg.prune_weights(overlap, mask, pc["tau"], pc["w_drop"])
    adv = alg.k1_advantage(t_logp, old) * (w + pc["w_base"]) * mask
    metrics = {
        "distillation/prune_overlap": float(alg.masked_mean(overlap, mask)),
        "distillation/prune_effective_len": float((w > 0).sum(dim=1).float().mean()),
        "distillation/prune_sampled_in_teacher_topk": float(alg.masked_mean(found.float(), mask)),
    }
    metrics |= budget_metrics(w, mask, data, pc["budget"]["margin"])
    return -shaped(adv, mask), metrics


def budget_metrics(w: torch.Tensor, mask: torch.Tensor, data, margin: int) -> dict:
    """What the trainer's budget update needs from this micro-batch: how many samples used the
    budget L up (``alg.budget_hits``) out of how many. Summed over micro-batches (verl's SUM
    aggregation); verl's padding samples (no response tokens) are not counted. Reported only when
    the trainer passed L (``BUDGET_KEY``)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import AggregationType, Metric

    budget = tu.get_non_tensor_data(data, BUDGET_KEY, None)
    if budget is None:
        return {}
    real = mask.sum(dim=1) > 0
    effective = (w > 0).sum(dim=1)[real].tolist()
    return {
        BUDGET_HITS: Metric(AggregationType.SUM, alg.budget_hits(effective, int(budget), margin)),
        BUDGET_SAMPLES: Metric(AggregationType.SUM, len(effective)),
    }


# -- the teacher's prompt log-probs for Prune-OPD ------------------------------------------------------
# verl's vLLM server keeps only the top-k of each prompt position (extract_prompt_logprobs drops the
# sampled token when it ranks below k), so the K1 term would use the k-th log-prob, an upper bound,
# exactly where teacher and student disagree most. vLLM does return the sampled token's exact
# log-prob; for Prune-OPD cells scout patches the extraction to keep it.

SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"


def topk_with_sampled(position: dict, k: int) -> tuple[list[int], list[float]]:
    """One position of vLLM's ``prompt_logprobs`` (token id -> an object with ``logprob`` and
    ``rank``) -> the top-k ids and log-probs by rank; when the sampled token ranks below k (vLLM then
    adds it as a (k+1)-th entry) it takes the k-th slot, with its exact log-prob."""
    ids, lps = [None] * k, [None] * k
    outside = None
    for token, lp in position.items():
        if lp.rank > k:
            outside = (int(token), lp.logprob)
            continue
        ids[lp.rank - 1], lps[lp.rank - 1] = int(token), lp.logprob
    if outside is not None:
        ids[k - 1], lps[k - 1] = outside
    return ids, lps


def extract_prompt_logprobs_keeping_sampled(output, num_prompt_logprobs, result_dict: dict) -> None:
    """verl's ``extract_prompt_logprobs`` (same layout: a dummy first-token entry dropped, a dummy
    entry last), with ``topk_with_sampled`` for each position."""
    if num_prompt_logprobs is None:
        return
    ids_ls, lps_ls = [], []
    for position in output.prompt_logprobs[1:]:
        if num_prompt_logprobs == 0:
            token, lp = next(iter(position.items()))
            ids_ls.append([int(token)])
            lps_ls.append([lp.logprob])
        else:
            ids, lps = topk_with_sampled(position, num_prompt_logprobs)
            ids_ls.append(ids)
            lps_ls.append(lps)
    lps_ls.append([0.0] * max(num_prompt_logprobs, 1))
    ids_ls.append([0] * max(num_prompt_logprobs, 1))
    result_dict["prompt_ids"], result_dict["prompt_logprobs"] = ids_ls, lps_ls


def patch_on_import(module: str, attribute: str, value) -> None:
    """Set ``attribute`` of ``module`` to ``value`` now if it is loaded, else as soon as it is
    imported (the server imports verl's function by name, so the module attribute is what it calls)."""
    from scout.verl.import_hooks import patch_on_import as on_import  # only where a patch is installed

    on_import(module, lambda m: setattr(m, attribute, value))


def register() -> None:
    """Idempotent: verl's registries refuse a second registration under the same name."""
    from verl.trainer.distillation.losses import (
        DISTILLATION_LOSS_REGISTRY,
        DistillationLossSettings,
        register_distillation_loss,
    )
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    if "scout_grpo" not in ADV_ESTIMATOR_REGISTRY:
        register_adv_est("scout_grpo")(scout_grpo)
    if "scout_k1" not in DISTILLATION_LOSS_REGISTRY:
        register_distillation_loss(DistillationLossSettings(names=["scout_k1"], use_estimator=True))(k1_losses)
    if "scout_optr" not in DISTILLATION_LOSS_REGISTRY:
        register_distillation_loss(DistillationLossSettings(names=["scout_optr"], use_estimator=True))(optr_losses)
    if "scout_prune" not in DISTILLATION_LOSS_REGISTRY:
        register_distillation_loss(DistillationLossSettings(names=["scout_prune"], use_topk=True))(prune_losses)
    if "prune_opd" in method_cfg(required=False):  # the teacher's server of a Prune cell
        patch_on_import(SERVER_MODULE, "extract_prompt_logprobs", extract_prompt_logprobs_keeping_sampled)



register()
lora_sync.install()
