"""verl's teacher client for a teacher served by URL (``scout.teacher_server``): what verl's
``AsyncTeacherLLMServerManager`` calls to score a student's sequence, answered by an
OpenAI-compatible vLLM server instead of a teacher engine of the job's own.

The manager calls ``generate(prompt_ids=..., sampling_params={"prompt_logprobs": k, ...})`` and
reads ``extra_fields["prompt_ids"]`` and ``["prompt_logprobs"]``, one row per token
(``teacher_server.verl_layout``). ``scout.verl.trainer.ServedTeacher`` hands it to verl in place
of the teacher engines a served cell's job no longer starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from scout.teacher_server import TeacherClient, reconnect, verl_layout


class ServedTeacherClient(LLMServerClient):
    """An ``LLMServerClient`` whose one server is the URL's (no Ray load balancer)."""

    def __init__(self, url: str, model: str, user: str = ""):
        super().__init__(config=None, load_balancer_handle=None)
        self.url, self.model = url, model
        self.reconnect = reconnect(model, user)  # a server the workflow launches: found again if it goes

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:  # fmt: skip
        k = int(sampling_params.get("prompt_logprobs") or 0)
        client = TeacherClient(self.url, self.model, reconnect=self.reconnect)
        (entries,) = await asyncio.to_thread(client.prompt_logprobs, [prompt_ids], k)
        self.url = client.url
        ids, logprobs = verl_layout(entries, prompt_ids, k)
        return TokenOutput(token_ids=[], stop_reason="completed",
                           extra_fields={"prompt_ids": ids, "prompt_logprobs": logprobs})  # fmt: skip
