"""A rollout that keeps failing stops the job instead of hanging it.

verl's sync trainer refills every failed group with a fresh prompt (``sync_refill_failed_groups``,
which scout turns on so that a rare fault, a grader error or a lost teacher request, costs one
prompt and a count, never the job). A fault on every sample (an agent loop that cannot import
what it needs, a teacher server that refuses every request) then refills forever: the step never
ends and the job holds its GPUs until Slurm's time limit. ``RolloutWatch`` counts the prompts one
step refills and stops the job, naming the step and the count, once they pass ``refill_limit``.
No verl import here: the mixin sits before verl's trainer in scout's trainers (``scout.verl.trainer``).
"""

from __future__ import annotations

# a step may refill this many batches' worth of prompts before its rollout counts as broken
BATCHES = 4
FLOOR = 16  # ... and never fewer prompts than this (a batch of 4 toy prompts may lose 16 by chance)


class RolloutFailing(RuntimeError):
    """The rollout failed more prompts in one step than chance explains."""


def refill_limit(batch_size: int) -> int:
    """Prompts one step may refill before the job stops."""
    return max(FLOOR, BATCHES * batch_size)


def check_refills(step: int, refilled: int, batch_size: int) -> None:
    """Raise once a step has refilled more prompts than :func:`refill_limit` allows."""
    limit = refill_limit(batch_size)
    if refilled > limit:
        raise RolloutFailing(
            f"step {step}: the rollout failed {refilled} prompts (more than {limit}, {BATCHES} batches of "
            f"{batch_size}), each refilled with a new one: a failure on every sample is a fault in the rollout "
            "(the agent loop, the grader or the teacher's server), not chance. The workers' log (the job's "
            "log, 'Error in _run_prompt') says which; training/rollout_failure/* counts them per step."
        )


class RolloutWatch:
    """Counts the prompts verl refills in a step (``_add_prompts_to_generate``, its refill hook)
    and stops the job past the limit; the count starts again with every step."""

    _refilled = 0

    def step(self, metrics: dict, timing_raw: dict):
        self._refilled = 0
        return super().step(metrics, timing_raw)

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        self._refilled += num_prompts
        check_refills(self.global_steps, self._refilled, self.config.data.train_batch_size)
        return super()._add_prompts_to_generate(num_prompts)
