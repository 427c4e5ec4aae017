"""A frozen teacher served once and reached by URL: the student's token ids scored by an
OpenAI-compatible vLLM server through its public completions API.

One request scores a batch of sequences (prompt ids + response ids) with ``max_tokens: 1`` and
``prompt_logprobs: k``: vLLM returns, for every position after the first, the log-prob of the token
there and the ``k`` most likely tokens with theirs (raw model log-probs, keyed by token id). The
response's part of that is what distillation needs: the sampled tokens' log-probs (K1) and, for
Prune-OPD and OPTR, the teacher's top-k. A request is retried a few times with backoff; an answer
that lacks any position or token is refused whole, so a job never trains on a partial answer.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scout.io import JobStopped

RETRIES = 4  # tries of one request before the server counts as gone
BACKOFF = 2.0  # seconds before the second try, doubled before each further one


class TeacherServerError(JobStopped):
    """The teacher server cannot be reached, or its answer is not a whole one."""


@dataclass
class Scored:
    """One sequence's response part: each response token's log-prob, and the top-k per position
    (token id -> log-prob; empty dicts when no top-k was asked for)."""

    logp: list[float]
    topk: list[dict[int, float]]


def parse_sequence(entries: Sequence[dict | None], ids: Sequence[int], prompt_len: int, k: int) -> Scored:
    """The response part of one sequence's ``prompt_logprobs`` (position i: the log-prob of ids[i]
    given ids[:i], as {token id: {"logprob", "rank"}}). Raises when a position or its token is
    missing: a partial answer is no answer."""
    if len(entries) != len(ids):
        raise TeacherServerError(f"the server scored {len(entries)} positions of a {len(ids)}-token sequence")
    logp, topk = [], []
    for i in range(prompt_len, len(ids)):
        entry = entries[i]
        got = entry.get(str(ids[i])) if entry else None
        if got is None:
            raise TeacherServerError(f"the server's answer has no log-prob for token {ids[i]} at position {i}")
        logp.append(float(got["logprob"]))
        ranked = {int(t): float(v["logprob"]) for t, v in entry.items() if v.get("rank", k + 1) <= k}
        if len(ranked) < k:
            raise TeacherServerError(f"the server returned {len(ranked)} of the top {k} tokens at position {i}")
        topk.append(ranked)
    return Scored(logp, topk)


def verl_layout(entries: Sequence[dict | None], ids: Sequence[int], k: int) -> tuple[list[list[int]], list[list[float]]]:
    """One sequence's answer in the layout verl's teacher manager reads (that of
    ``verl.workers.rollout.vllm_rollout.utils.extract_prompt_logprobs``): row j is token j + 1's
    log-prob alone (``k`` = 0) or the top ``k`` by rank, ids beside log-probs, and a zero row last,
    so that there is one row per token."""
    whole = parse_sequence(entries, ids, 1, k)
    if k == 0:
        rows = [([t], [lp]) for t, lp in zip(ids[1:], whole.logp, strict=True)]
    else:
        rows = [tuple(map(list, zip(*sorted(top.items(), key=lambda kv: -kv[1]), strict=True))) for top in whole.topk]
    width = max(k, 1)
    return [r[0] for r in rows] + [[0] * width], [r[1] for r in rows] + [[0.0] * width]


class TeacherClient:
    """Scores token ids with a served teacher (``url``: the server's base, e.g. http://host:8000;
    ``model``: the name it serves the teacher under)."""

    def __init__(self, url: str, model: str, timeout: float = 600.0, retries: int = RETRIES,
                 backoff: float = BACKOFF, sleep: Callable[[float], None] = time.sleep):  # fmt: skip
        self.url, self.model, self.timeout = url.rstrip("/"), model, timeout
        self.retries, self.backoff, self.sleep = retries, backoff, sleep

    def _post(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        wait, last = self.backoff, None
        for attempt in range(1, self.retries + 1):
            req = urllib.request.Request(f"{self.url}{path}", data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                if exc.code < 500:  # the request is wrong: trying again cannot help
                    raise TeacherServerError(f"the teacher server at {self.url} refused the request "
                                             f"(HTTP {exc.code}): {detail}") from exc  # fmt: skip
                last = f"HTTP {exc.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as exc:
                last = str(getattr(exc, "reason", exc))
            if attempt < self.retries:
                self.sleep(wait)
                wait *= 2
        raise TeacherServerError(f"the teacher server at {self.url} is gone: {self.retries} tries failed, "
                                 f"the last with {last}")  # fmt: skip

    def prompt_logprobs(self, seqs: Sequence[Sequence[int]], k: int = 0) -> list[list[dict | None]]:
        """The server's ``prompt_logprobs`` of each whole sequence (None first), as it answers them."""
        body = {"model": self.model, "prompt": [list(s) for s in seqs], "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": max(k, 0)}  # fmt: skip
        out = self._post("/v1/completions", body)
        choices = sorted(out.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(seqs):
            raise TeacherServerError(f"the server answered {len(choices)} of {len(seqs)} sequences")
        return [c.get("prompt_logprobs") or [] for c in choices]

    def score(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], k: int = 0) -> list[Scored]:
        """Each response's token log-probs given its prompt, and the teacher's top ``k`` per token."""
        seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        return [parse_sequence(e, s, len(p), k)
                for e, s, p in zip(self.prompt_logprobs(seqs, k), seqs, prompts, strict=True)]  # fmt: skip


# -- which cells score against a server -------------------------------------------------------------

ENV = "SCOUT_TEACHER_SERVERS"  # JSON {setting: {"url", "model"}}: exported by the workflow to every job


def export(config: dict) -> None:
    """Tell every job which settings' teachers are served (the config's ``settings.*.teacher_server``).
    Kept out of the specs: a run scored by the server equals one scored by its own teacher up to
    float rounding, so turning a server on or off, or moving it, retrains nothing."""
    servers = {s: v["teacher_server"] for s, v in config["settings"].items() if v.get("teacher_server")}
    os.environ[ENV] = json.dumps(servers, sort_keys=True)


def client_for(setting: str) -> TeacherClient | None:
    """The client of a setting's teacher server, or None where its cells keep their own teacher."""
    server = json.loads(os.environ.get(ENV) or "{}").get(setting)
    return TeacherClient(server["url"], server["model"]) if server else None
