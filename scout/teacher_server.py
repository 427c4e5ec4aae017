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

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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

ENV = "SCOUT_TEACHER_SERVERS"  # JSON {setting: {"url", "model"} or {"address", ...}}: exported to every job
SERVE = "serve"  # settings.<s>.teacher_server: serve -- the workflow starts one server per teacher model
HEARTBEAT = 30.0  # seconds between a user's touches of its lease
STALE = 3 * HEARTBEAT  # a lease untouched this long belongs to a job that is gone


def served_by_workflow(config: dict) -> dict[str, list[str]]:
    """Teacher model -> the settings whose teacher the workflow serves (``teacher_server: serve``)."""
    out: dict[str, list[str]] = {}
    for name, s in config["settings"].items():
        if s.get("teacher_server") == SERVE:
            out.setdefault(s["teacher"], []).append(name)
    return out


def server_folder(config: dict, model: str) -> Path:
    return Path(config.get("results", "results")) / "servers" / model


def export(config: dict) -> None:
    """Tell every job which settings' teachers are served (the config's ``settings.*.teacher_server``):
    a URL, or the address file of the server the workflow starts. Kept out of the specs: a run
    scored by the server equals one scored by its own teacher up to float rounding, so turning a
    server on or off, or moving it, retrains nothing."""
    wait = float(config.get("teacher_serving", {}).get("wait_minutes", WAIT_MINUTES))
    servers = {s: v["teacher_server"] for s, v in config["settings"].items() if isinstance(v.get("teacher_server"), dict)}
    for model, settings in served_by_workflow(config).items():
        address = str((server_folder(config, model) / "address.json").resolve())
        servers |= {s: {"address": address, "wait_minutes": wait} for s in settings}
    os.environ[ENV] = json.dumps(servers, sort_keys=True)


def client_for(setting: str, user: str = "", log: Callable[[str], None] = print) -> TeacherClient | None:
    """The client of a setting's teacher server, or None where its cells keep their own teacher.
    A server the workflow starts is waited for, and held (a lease) while this job runs."""
    server = json.loads(os.environ.get(ENV) or "{}").get(setting)
    if not server:
        return None
    if "address" in server:
        found = wait_for_address(Path(server["address"]), 60 * server["wait_minutes"], log)
        Lease(Path(server["address"]).parent / "leases", user).start()
        server = found
    return TeacherClient(server["url"], server["model"])


# -- a server the workflow starts: found by its address file, held by its users' leases ----------------

WAIT_MINUTES = 30.0  # how long a served cell waits for its server's address before it fails
IDLE_MINUTES = 20.0  # how long a server stays up with no live lease before it stops
POLL = 5.0  # seconds between the server's looks at its users and a cell's looks for the address
GRACE = 15.0  # seconds every user must stay finished before the server stops


def wait_for_address(path: Path, wait_s: float, log: Callable[[str], None] = print, poll: float = POLL) -> dict:
    """The server's address once its job has written it; fails after ``wait_s`` with what to run."""
    t0 = time.monotonic()
    told = -60.0
    while not path.exists():
        waited = time.monotonic() - t0
        if waited > wait_s:
            raise TeacherServerError(
                f"no teacher server came up in {wait_s / 60:g} minutes: {path} was never written. The workflow's "
                f"serve_teacher job writes it once the server answers; name its output as a target beside this cell's "
                f"(snakemake {path.parent / 'served.json'} <this cell's train.json>) or see its log in "
                f"{path.parent}/vllm.log")  # fmt: skip
        if waited - told >= 60:
            log(f"waiting for the teacher server's address ({path}), {waited:.0f} s so far")
            told = waited
        time.sleep(min(poll, max(wait_s - waited, 0.05)))
    return json.loads(path.read_text())


class Lease:
    """A served job's claim on its server: a file it touches every ``HEARTBEAT`` seconds while it
    runs and marks released when it ends (kept, so that the server sees a user even when the job
    was shorter than its poll). A job killed outright leaves its file untouched, and the server
    counts it gone after ``STALE`` seconds."""

    def __init__(self, folder: Path, user: str = "") -> None:
        self.path = folder / f"{socket.gethostname()}-{os.getpid()}.lease"
        self.user = user

    def start(self) -> Lease:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(released=False)
        threading.Thread(target=self._beat, daemon=True).start()
        atexit.register(self._write, released=True)
        return self

    def _write(self, released: bool) -> None:
        self.path.write_text(json.dumps({"user": self.user, "released": released}))

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT)
            with contextlib.suppress(OSError):
                os.utime(self.path)


def read_leases(folder: Path, now: float) -> tuple[list[str], set[str], float | None]:
    """The users holding the server now (leases unreleased and touched within ``STALE`` seconds),
    every user a lease names, and when one last held it (its latest touch or release)."""
    live, seen, last = [], set(), None
    for p in sorted(folder.glob("*.lease")) if folder.exists() else []:
        try:
            mtime, lease = p.stat().st_mtime, json.loads(p.read_text())
        except (OSError, ValueError):  # being written
            continue
        seen.add(lease["user"])
        last = max(last or mtime, mtime)
        if not lease["released"] and now - mtime < STALE:
            live.append(lease["user"])
    return live, seen, last


def stop_reason(now: float, ready: float, last_use: float | None, live: bool, done_since: float | None,
                idle_s: float, grace_s: float = GRACE) -> str | None:  # fmt: skip
    """Why a server stops now, or None while it is needed. It stops once every user it was started
    for has finished (its ``train.json`` exists) and none has held it for ``grace_s`` seconds, after
    at least one has: a forced rerun's old outputs are removed only when its job is scheduled. Or
    once no user has held it for ``idle_s`` seconds: users that failed, or are not part of this run."""
    if live:
        return None
    if last_use is not None and done_since is not None and now - done_since >= grace_s:
        return "every user has finished"
    if now - (last_use if last_use is not None else ready) > idle_s:
        return f"no user for {idle_s / 60:g} minutes"
    return None


def vllm_command(spec: dict, port: int) -> list[str]:
    """vLLM's OpenAI-compatible server on the teacher's weights, data-parallel over the job's GPUs."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", spec["path"],
           "--served-model-name", spec["model"], "--host", "0.0.0.0", "--port", str(port),
           "--max-logprobs", str(spec["max_logprobs"]), "--max-model-len", str(spec["max_model_len"])]  # fmt: skip
    if spec.get("gpus", 0) > 1:
        cmd += ["--data-parallel-size", str(spec["gpus"])]
    return cmd + list(spec.get("args", []))


def serve(spec: dict, out: str, log: Callable[[str], None] = print, poll: float = POLL) -> dict:
    """Start the teacher's server, write its address once it answers, keep it up while its users
    need it (``stop_reason``), then stop it and write what it served to ``out``."""
    address = Path(spec["address"])
    folder = address.parent
    leases = folder / "leases"
    address.unlink(missing_ok=True)
    for old in leases.glob("*.lease") if leases.exists() else []:  # an earlier server's users
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    url = f"http://{socket.gethostname()}:{port}"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"the teacher server of {spec['model']} was stopped (SIGTERM)"))
    t0 = time.time()
    with open(folder / "vllm.log", "w") as vlog:
        proc = subprocess.Popen(vllm_command(spec, port), stdout=vlog, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_ready(url, proc, 60 * spec.get("start_minutes", 20), folder / "vllm.log", poll)
            ready = time.time()
            log(f"teacher server of {spec['model']} up at {url} in {ready - t0:.0f} s")
            tmp = address.with_suffix(".tmp")
            tmp.write_text(json.dumps({"url": url, "model": spec["model"], "pid": os.getpid(), "started": ready}))
            tmp.replace(address)
            done_since, reason = None, None
            idle = 60 * spec.get("idle_minutes", IDLE_MINUTES)
            while reason is None:
                if proc.poll() is not None:
                    raise TeacherServerError(f"vLLM's server exited with {proc.returncode}; see {folder / 'vllm.log'}")
                now = time.time()
                live, seen, last_use = read_leases(leases, now)
                done = all(Path(u).exists() for u in spec["users"])
                done_since = (done_since or now) if done else None
                reason = stop_reason(now, ready, last_use, bool(live), done_since, idle)
                if reason is None:
                    time.sleep(poll)
            served = requests_answered(url)
        finally:
            address.unlink(missing_ok=True)
            _stop(proc)
    record = {"model": spec["model"], "url": url, "ready_s": round(ready - t0, 1), "up_s": round(time.time() - ready, 1),
              "stopped": reason, "users": sorted(seen), "requests": served}  # fmt: skip
    log(f"teacher server of {spec['model']} stopped: {reason}; {served} requests from {len(seen)} users")
    log(json.dumps(record))  # the record stays in the log: the workflow's copy is temporary
    Path(out).write_text(json.dumps(record, indent=1))
    return record


def _wait_ready(url: str, proc: subprocess.Popen, limit: float, vlog: Path, poll: float) -> None:
    t0 = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=5).read()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() - t0 > limit:
                tail = vlog.read_text(errors="replace")[-2000:]
                raise TeacherServerError(f"vLLM's server did not come up; the end of {vlog}:\n{tail}") from None
            time.sleep(poll)


def requests_answered(url: str) -> int | None:
    """Completions the server answered (vLLM's ``vllm:request_success_total`` on /metrics)."""
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:request_success_total")))  # fmt: skip


def _stop(proc: subprocess.Popen) -> None:
    """The server's whole process group: vLLM's engine core runs in a process of its own."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
