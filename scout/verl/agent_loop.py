"""Prune-OPD's per-step response budget inside verl's rollout.

verl's agent loops take the response length from the config, fixed for the run. Prune-OPD's budget
L moves every step, so ``PruneTrainer`` stamps L on each prompt batch (``teacher_phase.MAX_TOKENS``,
the same per-request field the SCOUT teacher phase uses) and this loop, verl's single-turn loop
otherwise, hands it to the server as ``max_tokens``. verl loads it from ``agent_loops.yaml``
(``actor_rollout_ref.rollout.agent.agent_loop_config_path``), so no verl module is patched.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from scout.verl.teacher_phase import MAX_TOKENS


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
