"""A frozen teacher scored through a server (scout.teacher_server): the answer's parsing by hand,
a server that is gone, and for real on CPU: the toy teacher served by vLLM's CPU build, its
log-probs against the embedded teacher's, and the toy world's OPD (and Prune-OPD, which reads the
teacher's top-k) trained through the server against the same runs with their own teacher."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request

import pytest
import torch
import yaml
from safetensors.torch import load_file

from scout import teacher_server as ts
from scout.embedded import lm
from scout.embedded.trainer import Trainer
from scout.toy.world import build_model
from tests.conftest import TINY
from tests.test_vllm_cpu import vllm_or_skip
from tests.vllm_server import openai_server


def test_an_answer_is_read_by_hand_and_a_partial_one_is_refused():
    """Positions 2 and 3 of a 2-token prompt + 2-token response: the tokens' log-probs, and the
    top 2 by rank (the sampled token is in the entry even when it is not among them)."""
    entries = [None, {"7": {"logprob": -1.0, "rank": 1}},
               {"8": {"logprob": -2.5, "rank": 3}, "4": {"logprob": -0.5, "rank": 1}, "5": {"logprob": -1.5, "rank": 2}},
               {"9": {"logprob": -0.1, "rank": 1}, "3": {"logprob": -3.0, "rank": 2}}]  # fmt: skip
    got = ts.parse_sequence(entries, [6, 7, 8, 9], prompt_len=2, k=2)
    assert got.logp == [-2.5, -0.1]
    assert got.topk == [{4: -0.5, 5: -1.5}, {9: -0.1, 3: -3.0}]
    with pytest.raises(ts.TeacherServerError, match="scored 3 positions of a 4-token sequence"):
        ts.parse_sequence(entries[:3], [6, 7, 8, 9], 2, 2)
    with pytest.raises(ts.TeacherServerError, match="no log-prob for token 8 at position 2"):
        ts.parse_sequence([*entries[:2], {"4": {"logprob": -0.5, "rank": 1}}, entries[3]], [6, 7, 8, 9], 2, 0)
    with pytest.raises(ts.TeacherServerError, match="returned 1 of the top 2 tokens at position 3"):
        ts.parse_sequence([*entries[:3], {"9": {"logprob": -0.1, "rank": 1}}], [6, 7, 8, 9], 2, 2)


def test_a_server_that_is_gone_fails_after_its_retries_with_one_clear_error():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits = []
    client = ts.TeacherClient(f"http://127.0.0.1:{port}", "toy", retries=3, backoff=0.5, sleep=waits.append)
    with pytest.raises(ts.TeacherServerError, match=rf"at http://127.0.0.1:{port} is gone: 3 tries failed, the last"):
        client.score([[1, 2]], [[3]])
    assert waits == [0.5, 1.0]


@pytest.fixture(scope="module")
def served(world, tmp_path_factory):
    """The toy teacher (head_dim 32, which vLLM's CPU attention supports) behind vLLM's
    OpenAI-compatible server on a free local port."""
    vllm_or_skip()
    root = tmp_path_factory.mktemp("served")
    model, tok = build_model({**TINY, "hidden_size": 64}, world["root"] / "tokenizer", seed=64)
    model.save_pretrained(root / "teacher")
    tok.save_pretrained(root / "teacher")
    with openai_server(root / "teacher", root / "server.log", "toy-teacher") as url:
        yield {"url": url, "model": "toy-teacher", "teacher": str(root / "teacher")}


def test_the_servers_log_probs_and_top_k_equal_the_embedded_teachers(served):
    client = ts.TeacherClient(served["url"], served["model"])
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 100, (int(n),), generator=g).tolist() for n in torch.randint(3, 30, (12,), generator=g)]
    responses = [torch.randint(5, 100, (int(n),), generator=g).tolist() for n in torch.randint(1, 40, (12,), generator=g)]
    got = client.score(prompts, responses, k=5)
    model = lm.load_model(served["teacher"], "cpu").eval()
    with torch.no_grad():
        logits, tokens, _ = lm.response_logits(model, prompts, responses, 0)
    ours = lm.token_logp(logits, tokens)
    top = torch.log_softmax(logits, dim=-1).topk(5, dim=-1).indices
    gap = max(abs(ours[i, j].item() - s.logp[j]) for i, s in enumerate(got) for j in range(len(responses[i])))
    print(f"\nserver vs embedded teacher: largest |log-prob gap| {gap:.2e} over {sum(map(len, responses))} tokens")
    assert gap < 1e-4
    assert all(set(s.topk[j]) == set(top[i, j].tolist()) for i, s in enumerate(got) for j in range(len(responses[i])))


@pytest.mark.parametrize("method", ["opd", "prune_opd"])
def test_opd_through_the_server_trains_as_with_its_own_teacher(method, served, spec_for, tmp_path, monkeypatch):
    """The same run twice, its teacher once local and once served: the self-test passes against
    the server, and the weights agree up to float rounding."""
    spec = spec_for(method, total_steps=3, steps_per_epoch=3, teacher=served["teacher"])
    own = Trainer(spec, tmp_path / "own", device="cpu")
    own.run(log=lambda _: None)
    monkeypatch.setenv(ts.ENV, json.dumps({spec["setting"]: {"url": served["url"], "model": served["model"]}}))
    via = Trainer(spec, tmp_path / "served", device="cpu")
    assert via.served is not None
    via.run(log=lambda _: None)
    lines = {k: [json.loads(x) for x in (tmp_path / k / "metrics.jsonl").read_text().splitlines()] for k in ("own", "served")}
    assert lines["served"][0]["teacher_selftest_diff"] < 1e-4
    a, b = (load_file(tmp_path / k / "model" / "final" / "model.safetensors") for k in ("own", "served"))
    gap = max(float((a[n] - b[n]).abs().max()) for n in a)
    kl = [(x["reverse_kl_k1"], y["reverse_kl_k1"]) for x, y in zip(lines["own"], lines["served"], strict=True)]
    print(f"\n{method} through the server vs its own teacher: largest weight gap {gap:.2e}; reverse KL per step {kl}")
    assert gap < 1e-4
    assert all(abs(x - y) < 1e-4 for x, y in kl)


def test_verls_layout_by_hand():
    """verl's teacher manager reads one row per token: row j is token j + 1's log-prob (or the top
    k by rank, the token itself in the k-th slot where it ranks below k, as scout's patch of verl's
    own server keeps it), and a zero row closes the sequence."""
    entries = [None, {"7": {"logprob": -1.0, "rank": 1}}, {"8": {"logprob": -2.5, "rank": 3},
               "4": {"logprob": -0.5, "rank": 1}, "5": {"logprob": -1.5, "rank": 2}}]  # fmt: skip
    assert ts.verl_layout(entries[:2] + [{"8": {"logprob": -2.5, "rank": 3}}], [6, 7, 8], 0) == (
        [[7], [8], [0]], [[-1.0], [-2.5], [0.0]])  # fmt: skip
    entries[1]["3"] = {"logprob": -2.0, "rank": 2}
    assert ts.verl_layout(entries, [6, 7, 8], 2) == ([[7, 3], [4, 8], [0, 0]], [[-1.0, -2.0], [-0.5, -2.5], [0.0, 0.0]])
    from types import SimpleNamespace

    from scout.verl.plugin import topk_with_sampled  # the same rule as verl's own server, patched

    position = {t: SimpleNamespace(logprob=v["logprob"], rank=v["rank"]) for t, v in entries[2].items()}
    assert topk_with_sampled(position, 2) == ([4, 8], [-0.5, -2.5])


def test_verls_own_teacher_manager_scores_through_the_server(served):
    """verl's AsyncTeacherLLMServerManager (its OPD teacher path) with the served client: the
    log-probs it hands the loss are the embedded teacher's, row j for token j + 1."""
    import asyncio

    import yaml

    pytest.importorskip("verl", reason="needs verl (pip install '.[verl]')")
    from verl.experimental.teacher_loop.teacher_manager import AsyncTeacherLLMServerManager
    from verl.utils.config import omega_conf_to_dataclass

    from scout import grid, resources
    from scout.verl import config as vc
    from scout.verl.teacher_client import ServedTeacherClient
    from tests.conftest import REPO

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cell = grid.find_cell(paper, "q4b-q1.7b-math", "opd", 1)
    cfg = vc.build(grid.cell_spec(paper, cell), resources.job_resources(paper, "train", cell.setting, "opd", "opd"), "out")
    keys = list(omega_conf_to_dataclass(cfg.distillation).teacher_models)  # verl's routing keys
    manager = AsyncTeacherLLMServerManager(cfg, {k: ServedTeacherClient(served["url"], served["model"]) for k in keys})
    seq = [5, 17, 23, 40, 41, 12, 8, 9, 30]
    ids, logprobs = asyncio.run(manager.compute_teacher_logprobs_single(seq))
    model = lm.load_model(served["teacher"], "cpu").eval()
    with torch.no_grad():
        logits, tokens, _ = lm.response_logits(model, [seq[:1]], [seq[1:]], 0)
    ours = lm.token_logp(logits, tokens)[0]
    assert ids[:-1, 0].tolist() == seq[1:] and logprobs.shape == (len(seq), 1)
    gap = float((logprobs[:-1, 0] - ours).abs().max())
    print(f"\nverl's teacher manager through the server vs the embedded teacher: largest gap {gap:.2e}")
    assert gap < 1e-4


# -- a server the workflow starts ------------------------------------------------------------------


def test_when_a_workflow_server_stops_by_hand():
    """Needed while a lease is live; after every user has finished and none has held it for the
    grace period (once one has); or once none has held it for the idle time."""
    stop = ts.stop_reason
    idle, grace = 600.0, 15.0
    assert stop(100.0, 0.0, 100.0, True, 50.0, idle, grace) is None  # a user holds it
    assert stop(100.0, 0.0, None, False, 0.0, idle, grace) is None  # every output exists, no user came yet
    assert stop(100.0, 0.0, 90.0, False, 90.0, idle, grace) is None  # finished 10 s ago: within the grace
    assert stop(106.0, 0.0, 90.0, False, 90.0, idle, grace) == "every user has finished"
    assert stop(106.0, 0.0, 90.0, False, None, idle, grace) is None  # a user is still to come
    assert stop(691.0, 0.0, 90.0, False, None, idle, grace) == "no user for 10 minutes"
    assert stop(599.0, 0.0, None, False, None, idle, grace) is None
    assert stop(601.0, 0.0, None, False, None, idle, grace) == "no user for 10 minutes"


def test_a_lease_is_live_while_its_job_runs_and_seen_after_it_ends(tmp_path):
    lease = ts.Lease(tmp_path, "results/train/a/train.json").start()
    now = time.time()
    assert ts.read_leases(tmp_path, now) == (["results/train/a/train.json"], {"results/train/a/train.json"},
                                             lease.path.stat().st_mtime)  # fmt: skip
    os.utime(lease.path, (now - ts.STALE - 1, now - ts.STALE - 1))  # a job killed outright: no heartbeat
    assert ts.read_leases(tmp_path, now)[0] == []
    lease._write(released=True)  # what the job does at its end
    live, seen, last = ts.read_leases(tmp_path, time.time())
    assert live == [] and seen == {"results/train/a/train.json"} and last >= now


def test_a_served_cell_without_its_server_fails_with_what_to_run(tmp_path, monkeypatch):
    """A cell targeted alone, whose server is not part of the run, waits and then names the target."""
    address = tmp_path / "results" / "servers" / "toy-large" / "address.json"
    monkeypatch.setenv(ts.ENV, json.dumps({"toy-l-s-math": {"address": str(address), "wait_minutes": 0.002}}))
    with pytest.raises(ts.TeacherServerError, match=r"no teacher server came up in 0.002 minutes.*served.json"):
        ts.client_for("toy-l-s-math", user="x/train.json", log=lambda _: None)
    assert ts.client_for("toy-mg-s-math") is None


def test_the_workflow_serves_the_teacher_while_its_cells_train(tmp_path):
    """One node, through Snakemake: OPD and Prune-OPD of a setting with ``teacher_server: serve``.
    The serve_teacher job starts vLLM's CPU server on the setting's teacher, both cells find it by
    its address and hold it by their leases while they train, and it stops once both have
    finished, its address gone and its port closed. SCOUT's cell in the same run keeps its own
    teacher. The server's record is temporary: a later run with nothing to train plans no server."""
    vllm_or_skip()
    from tests.conftest import mini_config
    from tests.test_workflow import snakemake

    cfg = mini_config("results")
    cfg["models"]["toy-large"]["toy"]["hidden_size"] = 64  # head_dim 32, as vLLM's CPU attention needs
    cfg["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
    cfg["teacher_serving"] = {"idle_minutes": 3, "args": ["--dtype", "float32", "--enforce-eager",
                                                          "--kv-cache-memory-bytes", "268435456"]}  # fmt: skip
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "prune_opd", "scout"], "seeds": [1]}}
    cfg["claims"] = []  # the config's own claims are about experiments left out here
    (tmp_path / "mini.yaml").write_text(yaml.safe_dump(cfg))
    train = [f"results/train/toy-l-s-math/{m}/s1/train.json" for m in ("opd", "prune_opd", "scout")]
    snakemake(tmp_path, *train, "results/servers/toy-large/served.json")
    record = json.loads((tmp_path / "results/logs/servers/toy-large.log").read_text().strip().splitlines()[-1])
    print(f"\nthe workflow's teacher server: {record}")
    assert record["stopped"] == "every user has finished"
    assert sorted(record["users"]) == train[:2]
    assert record["requests"] > 0
    assert not (tmp_path / "results/servers/toy-large/address.json").exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{record['url']}/v1/models", timeout=5)
    for t in train:  # each served cell tested its teacher against the server; SCOUT its own
        first = json.loads((tmp_path / t).parent.joinpath("metrics.jsonl").read_text().splitlines()[0])
        assert first["teacher_selftest_diff"] < 1e-4, t
    rest = snakemake(tmp_path, "-n")  # the rest of the grid: evaluations, the report, no server
    assert "rule serve_teacher" not in rest.stdout and "rule evaluate" in rest.stdout
