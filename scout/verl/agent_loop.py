"""scout's agent loops for verl's rollout: Prune-OPD's per-step budget and Relay-OPD's teacher legs.

verl loads both from ``agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``),
so no verl module is patched.

- ``BudgetAgentLoop`` (Prune-OPD): verl's agent loops take the response length from the config, fixed
  for the run. ``PruneTrainer`` stamps the moving budget L on each prompt batch
  (``teacher_phase.MAX_TOKENS``, the per-request field the SCOUT teacher phase also uses) and this
  loop, verl's single-turn loop otherwise, hands it to the server as ``max_tokens``.
- ``RelayAgentLoop`` (Relay-OPD): the teacher takes over the student's rollout at reflection points.
  An agent loop is given only the student's server, so ``RelayAgentLoopManager`` starts workers that
  also hand it the teacher's. The rollout itself (``relay_rollout``) runs against the two servers'
  generate calls: the student samples ahead; one prefill on each server (``prompt_logprobs``) gives
  the teacher's argmax and the student's top-k at every new position; the first trigger
  (``alg.relay_trigger``) cuts the student's tokens there, the teacher's argmax is emitted and the
  teacher generates the rest of its leg. Discarding the student's tokens after a trigger and
  sampling again from the new prefix leaves the rollout's distribution that of token-by-token
  checking. All response tokens, the teacher's included, carry the K1 loss (no importance
  correction), so the response mask is all ones.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import ray
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.trainer.ppo.v1 import AgentLoopManagerTQ
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.utils.profiler import simple_timer

from scout import algorithms as alg
from scout.verl.env import method_section
from scout.verl.teacher_phase import MAX_TOKENS

# -- Prune-OPD ---------------------------------------------------------------------------------------


def budget_params(sampling_params: dict[str, Any], budget: int | None, response_length: int) -> dict[str, Any]:
    """The request's sampling params under budget L (never above the configured response length,
    which fixes verl's tensor widths)."""
    if budget is None:
        return sampling_params
    return {**sampling_params, "max_tokens": max(1, min(int(budget), response_length))}


class BudgetAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        params = budget_params(sampling_params, kwargs.get(MAX_TOKENS), self.response_length)
        return await super().run(params, **kwargs)


# -- Relay-OPD ---------------------------------------------------------------------------------------

Generate = Callable[[list[int], dict[str, Any]], Awaitable[Any]]  # (prompt ids, sampling params) -> TokenOutput


@dataclass
class RelayRollout:
    response: list[int] = field(default_factory=list)
    teacher_owned: list[int] = field(default_factory=list)
    triggers: int = 0
    extra_fields: dict = field(default_factory=dict)  # the student's sampling calls' (verl's weight versions)


PREFILL_FIELDS = ("prompt_ids", "prompt_logprobs")  # a prefill's top-k lists: never carried into the sample


def merge_student_fields(acc: dict, new: dict) -> None:
    """verl's multi-turn rule (tool_agent_loop.py:261-267): the first call's fields, then the
    weight versions widened: min of the mins, max of the maxes (None = not reported)."""
    new = {k: v for k, v in (new or {}).items() if k not in PREFILL_FIELDS}
    if not acc:
        acc.update(new)
        return
    for key, pick in (("min_global_steps", min), ("max_global_steps", max)):
        vals = [v for v in (acc.get(key), new.get(key)) if v is not None]
        if vals:
            acc[key] = pick(vals)


def leg_length(tokens: list[int], blank: torch.Tensor, cfg: alg.RelayConfig) -> int:
    """How many of a leg's tokens (the trigger token first) the teacher keeps: up to the token that
    closes its ``max_paragraphs``-th paragraph or its ``max_leg_tokens``-th token."""
    paragraphs = 0
    for n, tok in enumerate(tokens, start=1):
        paragraphs += int(tok < len(blank) and bool(blank[tok]))
        if alg.relay_leg_done(paragraphs, n, cfg.max_paragraphs, cfg.max_leg_tokens):
            return n
    return len(tokens)


def first_trigger(
    chunk: list[int], teacher_argmax: list[int], student_topk: list[list[int]], reflect: torch.Tensor
) -> int | None:
    """The first position of the student's chunk where the teacher takes over, if any."""
    if not chunk:
        return None
    size = max(len(reflect), max(teacher_argmax) + 1)
    table = torch.cat([reflect, torch.zeros(size - len(reflect), dtype=torch.bool)])
    fire = alg.relay_trigger(torch.tensor(teacher_argmax), torch.tensor(chunk), torch.tensor(student_topk), table)
    hits = fire.nonzero()
    return int(hits[0]) if len(hits) else None


async def prompt_topk(generate: Generate, ids: list[int], k: int, start: int) -> list[list[int]]:
    """The server's top-k token ids of the distribution at each position from ``start`` on (the
    one predicting token ``start``), from a prefill with ``prompt_logprobs`` as verl's vLLM server
    returns them (entry j predicts token j + 1)."""
    out = await generate(ids, {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": k, "detokenize": False})
    tops = out.extra_fields["prompt_ids"]
    return [list(t[:k]) for t in tops[start - 1 : len(ids) - 1]]


async def relay_rollout(
    prompt: list[int],
    student: Generate,
    teacher: Generate,
    sampling_params: dict[str, Any],
    max_tokens: int,
    cfg: alg.RelayConfig,
    reflect: torch.Tensor,
    blank: torch.Tensor,
    eos_id: int,
) -> RelayRollout:
    """One Relay-OPD rollout against a student and a teacher server (see the module docstring)."""
    out = RelayRollout()
    legs = 0
    while len(out.response) < max_tokens:
        prefix = prompt + out.response
        sampled = await student(prefix, {**sampling_params, "max_tokens": max_tokens - len(out.response)})
        merge_student_fields(out.extra_fields, sampled.extra_fields)
        chunk = list(sampled.token_ids)
        if not chunk:
            break
        seq = prefix + chunk
        t_arg = [t[0] for t in await prompt_topk(teacher, seq, 1, len(prefix))]
        s_top = await prompt_topk(student, seq, cfg.student_topk, len(prefix))
        at = first_trigger(chunk, t_arg, s_top, reflect) if legs < cfg.max_legs else None
        if at is None:
            out.response += chunk
            out.teacher_owned += [0] * len(chunk)
            break
        out.response += chunk[:at]
        out.teacher_owned += [0] * at
        out.triggers += 1
        leg, stopped = [t_arg[at]], t_arg[at] == eos_id
        room = min(cfg.max_leg_tokens, max_tokens - len(out.response))
        if not stopped and room > 1:
            cont = list(
                (await teacher(prompt + out.response + leg, {**sampling_params, "max_tokens": room - 1})).token_ids
            )
            stopped = len(cont) < room - 1  # the teacher ended the answer (EOS or another stop token)
            leg += cont
        keep = min(room, leg_length(leg, blank, cfg))
        stopped = stopped and keep == len(leg)  # unless the leg was cut before its stop token
        out.response += leg[:keep]
        out.teacher_owned += [1] * keep
        legs += 1
        if stopped or legs >= cfg.max_legs:
            break
    return out


@functools.lru_cache(maxsize=4)
def _vocab_flags(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    from scout.embedded.sampling import vocab_flags  # the embedded backend's model code: Relay-OPD's loop only

    return vocab_flags(tokenizer, len(tokenizer))


def _client_generate(client) -> Generate:
    async def generate(ids: list[int], params: dict[str, Any]):
        return await client.generate(request_id=uuid4().hex, prompt_ids=ids, sampling_params=dict(params))

    return generate


_TEACHER: dict[str, Any] = {}  # this worker process's teacher clients (RelayAgentLoopWorker)


class RelayAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with the student's generation replaced by ``relay_rollout``."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        if "default" not in _TEACHER:
            raise RuntimeError("Relay-OPD's agent loop needs the teacher's server: run it under RelayAgentLoopManager")
        cfg = alg.RelayConfig(**method_section("relay_opd"))
        reflect, blank = _vocab_flags(self.tokenizer)
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        metrics: dict[str, Any] = {}
        with simple_timer("generate_sequences", metrics):
            relay = await relay_rollout(
                prompt_ids, _client_generate(self.server_manager), _client_generate(_TEACHER["default"]),
                {k: v for k, v in sampling_params.items() if k != "logprobs"}, self.response_length, cfg,
                reflect, blank, self.tokenizer.eos_token_id,
            )  # fmt: skip
        merged, mask, _ = await self.ct_merge_assistant_token(prompt_ids, relay.response, [], None)
        response = merged.token_ids[-len(mask) :] if mask else []
        return AgentLoopOutput(  # the teacher's tokens are assistant tokens: the K1 loss covers them too
            prompt_ids=merged.token_ids[: len(merged.token_ids) - len(mask)],
            response_ids=response[: self.response_length],
            response_mask=mask[: self.response_length],
            multi_modal_data={},
            num_turns=2,
            metrics=metrics,
            extra_fields={**relay.extra_fields, "turn_scores": [], "tool_rewards": [], "relay_triggers": relay.triggers,
                          "relay_teacher_tokens": sum(relay.teacher_owned)},
        )  # fmt: skip


class RelayAgentLoopWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's TransferQueue agent-loop worker that keeps the teacher's servers for ``RelayAgentLoop``
    (each worker is a Ray actor process of its own, so a module-level table is per worker)."""

    def __init__(self, config, llm_client, teacher_client=None, reward_loop_worker_handles=None):
        super().__init__(config, llm_client, teacher_client, reward_loop_worker_handles)
        _TEACHER.update(teacher_client or {})


class RelayAgentLoopManager(AgentLoopManagerTQ):
    """verl's TransferQueue agent-loop manager, starting ``RelayAgentLoopWorker``s."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(RelayAgentLoopWorker)
