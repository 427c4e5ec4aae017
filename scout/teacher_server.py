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
from pathlib import Path

from scout import schema, serving
from scout.serving import TeacherServerError

RETRIES = 4  # tries of one request before the server counts as gone
BACKOFF = 2.0  # seconds before the second try, doubled before each further one
RECONNECTS = 3  # times a client of a workflow-started server finds it again after it went away

__all__ = ["TeacherServerError", "TeacherClient", "Scored", "client_for", "export", "served_by_workflow"]


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
    so that there is one row per token. Where token j + 1 ranks below k it takes the k-th slot with
    its exact log-prob, as in scout's patch of verl's own teacher server for Prune-OPD
    (``scout.verl.plugin.topk_with_sampled``): a served cell reads what an engine of its own gives."""
    whole = parse_sequence(entries, ids, 1, k)
    if k == 0:
        rows = [([t], [lp]) for t, lp in zip(ids[1:], whole.logp, strict=True)]
    else:
        rows = []
        for token, lp, top in zip(ids[1:], whole.logp, whole.topk, strict=True):
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            if token not in top:
                ranked[-1] = (token, lp)
            rows.append(([t for t, _ in ranked], [v for _, v in ranked]))
    width = max(k, 1)
    return [r[0] for r in rows] + [[0] * width], [r[1] for r in rows] + [[0.0] * width]


class TeacherClient:
    """Scores token ids with a served teacher (``url``: the server's base, e.g. http://host:8000;
    ``model``: the name it serves the teacher under)."""

    def __init__(self, url: str, model: str, timeout: float = 600.0, retries: int = RETRIES,
                 backoff: float = BACKOFF, sleep: Callable[[float], None] = time.sleep,
                 reconnect: Callable[[], str] | None = None):  # fmt: skip
        self.url, self.model, self.timeout = url.rstrip("/"), model, timeout
        self.retries, self.backoff, self.sleep = retries, backoff, sleep
        self.reconnect = reconnect  # a server the workflow starts: find (or launch) it again when it is gone

    def _post(self, path: str, body: dict) -> dict:
        for found in range(RECONNECTS + 1):
            try:
                return self._post_once(path, body)
            except TeacherServerError as exc:
                if self.reconnect is None or found == RECONNECTS or "refused the request" in str(exc):
                    raise
                self.url = self.reconnect().rstrip("/")
        raise AssertionError("unreachable")

    def _post_once(self, path: str, body: dict) -> dict:
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

ENV = "SCOUT_TEACHER_SERVERS"  # JSON {setting: {"url", "model"} or {"spec", "wait_minutes"}}: exported to every job
SERVE = "serve"  # settings.<s>.teacher_server: serve -- the workflow starts one server per teacher model


def served_by_workflow(config: dict) -> dict[str, list[str]]:
    """Teacher model -> the settings whose teacher the workflow serves (``teacher_server: serve``)."""
    out: dict[str, list[str]] = {}
    for name, s in config["settings"].items():
        if s.get("teacher_server") == SERVE:
            out.setdefault(s["teacher"], []).append(name)
    return out


def export(config: dict, specs: dict[str, dict]) -> None:
    """Tell every job which settings' teachers are served (the config's ``settings.*.teacher_server``):
    a URL, or the spec of the server the workflow starts for the teacher model (``specs``: model ->
    ``jobs.teacher_server_spec``). Kept out of the jobs' specs: a run scored by the server equals
    one scored by its own teacher up to float rounding, so turning a server on or off, or moving it,
    retrains nothing."""
    wait = float(schema.setting(config, "teacher_serving.wait_minutes"))
    servers = {s: v["teacher_server"] for s, v in config["settings"].items() if isinstance(v.get("teacher_server"), dict)}
    for model, settings in served_by_workflow(config).items():
        servers |= {s: {"spec": specs[model], "wait_minutes": wait} for s in settings}
    os.environ[ENV] = json.dumps(servers, sort_keys=True)


def server_for(setting: str) -> dict | None:
    """What the workflow exported for a setting's teacher: {url, model}, {spec, wait_minutes}, or None."""
    return json.loads(os.environ.get(ENV) or "{}").get(setting)


def client_for(setting: str, user: str = "", log: Callable[[str], None] = print) -> TeacherClient | None:
    """The client of a setting's teacher server, or None where its cells keep their own teacher.
    A server the workflow starts is found (or launched) and held (a lease) while this job runs, and
    found again if it goes away meanwhile."""
    server = server_for(setting)
    if not server:
        return None
    if "spec" not in server:
        return TeacherClient(server["url"], server["model"])
    spec = server["spec"]
    run, how = os.environ.get(serving.RUN_ENV, ""), os.environ.get(serving.LAUNCH_ENV, "local")
    user = str(Path(user).resolve()) if user else user  # as the server (elsewhere, maybe) reads it

    def find() -> str:
        return serving.ensure(spec, user, run, how, wait_s=60 * server["wait_minutes"], log=log)["url"]

    url = find()
    serving.Lease(Path(spec["folder"]) / "leases", user).start()
    return TeacherClient(url, spec["model"], reconnect=find)


def reconnect(model: str, user: str, log: Callable[[str], None] = print) -> Callable[[], str] | None:
    """For a client built from a URL alone (verl's, in a Ray worker): how to find the workflow's
    server of ``model`` again when it goes away, or None where it is not one the workflow launches."""
    for server in json.loads(os.environ.get(ENV) or "{}").values():
        if "spec" in server and server["spec"]["model"] == model:
            spec, wait = server["spec"], 60 * server["wait_minutes"]
            run, how = os.environ.get(serving.RUN_ENV, ""), os.environ.get(serving.LAUNCH_ENV, "local")
            return lambda: serving.ensure(spec, user, run, how, wait_s=wait, log=log)["url"]
    return None
