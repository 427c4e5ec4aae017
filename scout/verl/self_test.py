"""The teacher self-test on verl (``algorithms.teacher_self_test``): the log-probs verl's teacher
engine, or a teacher server, gave a few of a step's student responses, against a reference
forward of the same weights, before the step's update reads them.

The engine's answer is verl's layout (one row per token of prompt + response: row j is the
log-prob of token j + 1, alone or with the top k beside it; ``teacher_server.verl_layout``). The
reference is a Hugging Face forward of the teacher's weights in float32 for a frozen teacher
(``hf_reference``, on the trainer's host), and SCOUT's teacher trainer for a teacher that trains
(``scout.verl.trainer.ScoutTrainer``), whose weights the engine holds after each sync.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from scout import algorithms as alg

CHUNK = 512  # positions whose full-vocabulary log-probs a reference forward holds at once


def engine_rows(ids: torch.Tensor, logp: torch.Tensor, prompt_len: int, response_len: int):
    """The response's rows of one sequence's engine answer ([S, K] each): rows P - 1 .. P + R - 2
    score the response tokens."""
    rows = slice(prompt_len - 1, prompt_len - 1 + response_len)
    if ids.shape[0] != prompt_len + response_len:
        raise ValueError(f"the teacher's answer has {ids.shape[0]} rows for a {prompt_len}+{response_len}-token sequence")
    return ids[rows].long(), logp[rows].float()


@contextmanager
def every_core() -> Iterator[int]:
    """torch's threads: every CPU this process may use, for the span of a CPU forward. Ray starts
    an actor that asks for no CPUs (verl's task runner, where the reference runs) with one thread,
    at which a 4-8B teacher's float32 forward over four long responses takes most of an hour."""
    before = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def hf_reference(model, prompts: list[list[int]], responses: list[list[int]], ids: list[torch.Tensor]):
    """Per sequence, the reference's log-probs of the engine's listed ids [R, K] and of the sampled
    tokens [R], from a forward of prompt + response alone, on every core of the host; the
    vocabulary's log-softmax is taken ``CHUNK`` positions at a time, so a long response never holds
    [R, vocabulary] at once."""
    head, body = model.get_output_embeddings(), model.get_decoder()
    at_ids, sampled = [], []
    with torch.no_grad(), every_core():
        for p, r, listed in zip(prompts, responses, ids, strict=True):
            seq = torch.tensor([list(p) + list(r)])
            hidden = body(input_ids=seq).last_hidden_state[0, len(p) - 1 : len(p) - 1 + len(r)]
            tokens = torch.tensor(r).unsqueeze(-1)
            parts = [(torch.log_softmax(head(h).float(), dim=-1), slice(i, i + CHUNK))
                     for i, h in zip(range(0, len(r), CHUNK), hidden.split(CHUNK), strict=True)]  # fmt: skip
            at_ids.append(torch.cat([lp.gather(-1, listed[s]) for lp, s in parts]))
            sampled.append(torch.cat([lp.gather(-1, tokens[s]) for lp, s in parts]).squeeze(-1))
    return at_ids, sampled


def stacked(rows: list[torch.Tensor]) -> torch.Tensor:
    """Rows of different lengths, zero-padded into one tensor."""
    return torch.nn.utils.rnn.pad_sequence([r.float() for r in rows], batch_first=True)


def check(engine: list[torch.Tensor], at_ids: list[torch.Tensor], sampled: list[torch.Tensor],
          student: list[torch.Tensor], masks: list[torch.Tensor], where: str) -> dict[str, float]:  # fmt: skip
    """``algorithms.teacher_self_test`` on per-sequence rows; stops the job above the limit."""
    found = alg.teacher_self_test(
        stacked(engine), stacked(at_ids), stacked(student), stacked(masks), reference_sampled=stacked(sampled)
    )
    alg.check_self_test(found, where)
    return found
