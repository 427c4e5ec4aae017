"""A frozen teacher scored through a server (scout.teacher_server): the answer's parsing by hand,
a server that is gone, and for real on CPU: the toy teacher served by vLLM's CPU build, its
log-probs against the embedded teacher's, and the toy world's OPD (and Prune-OPD, which reads the
teacher's top-k) trained through the server against the same runs with their own teacher."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from benchmarks.gpu_check import openai_server
from scout import serving
from scout import teacher_server as ts
from scout.embedded import lm
from scout.embedded.trainer import Trainer
from scout.grid import Grid
from scout.toy.world import build_model
from tests.support.engines import vllm_or_skip
from tests.support.toy import TINY


def stop_record(log: Path, timeout: float = 90) -> dict:
    """A server's last word: the record it logs once its engine has stopped, which is after its
    address is gone and it no longer answers (seconds later under load)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        lines = log.read_text().strip().splitlines() if log.exists() else []
        if lines and '"stopped"' in lines[-1]:
            return json.loads(lines[-1])
        time.sleep(0.3)
    raise AssertionError(f"{log}: no stop record after {timeout} s; it ends:\n{log.read_text()[-2000:]}")


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


def test_a_client_of_a_launched_server_finds_it_again_before_it_gives_up():
    """A cell's server that goes away: after each round of retries the client finds it again (the
    workflow's server: waits, or launches one) and tries there, RECONNECTS times, then fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    found = []
    client = ts.TeacherClient(dead, "toy", retries=2, backoff=0.1, sleep=lambda _: None,
                              reconnect=lambda: found.append(dead) or dead)  # fmt: skip
    with pytest.raises(ts.TeacherServerError, match="is gone: 2 tries failed"):
        client.score([[1, 2]], [[3]])
    assert len(found) == ts.RECONNECTS


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
    _compare_with_embedded(served, "vLLM's server")


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

    from scout import resources
    from scout.verl import config as vc
    from scout.verl.teacher_client import ServedTeacherClient
    from tests.support.toy import REPO

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cell = Grid.of(paper).find("q4b-q1.7b-math", "opd", 1)
    cfg = vc.build(Grid.of(paper).spec(cell), resources.job_resources(paper, "train", cell.setting, "opd", "opd"), "out")
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
    """Wanted while a run that may use it lives, up to the idle time after its last use; once no
    such run lives, a grace period after that."""
    stop = serving.stop_reason
    idle, grace = 600.0, 15.0
    assert stop(100.0, 100.0, True, None, idle, grace) is None  # a user holds it or waits for it
    assert stop(700.0, 100.0, True, None, idle, grace) is None  # idle 600 s: not yet over
    assert stop(701.0, 100.0, True, None, idle, grace) == "no user for 10 minutes"
    assert stop(110.0, 100.0, False, 100.0, idle, grace) is None  # its run ended 10 s ago
    assert stop(115.0, 100.0, False, 100.0, idle, grace) == "no run needs it"


def test_a_lease_is_live_while_its_job_runs_and_seen_after_it_ends(tmp_path):
    lease = serving.Lease(tmp_path, "results/train/a/train.json").start()
    now = time.time()
    assert serving.read_leases(tmp_path, now) == (["results/train/a/train.json"], {"results/train/a/train.json"},
                                                  lease.path.stat().st_mtime)  # fmt: skip
    os.utime(lease.path, (now - serving.STALE - 1, now - serving.STALE - 1))  # a job killed outright: no heartbeat
    assert serving.read_leases(tmp_path, now)[0] == []
    lease._write(released=True)  # what the job does at its end
    live, seen, last = serving.read_leases(tmp_path, time.time())
    assert live == [] and seen == {"results/train/a/train.json"} and last >= now


def test_a_demand_waits_until_its_cell_has_trained_and_only_while_its_run_lives(tmp_path):
    """A cell's demand counts until its train.json is newer than it, and only for a run whose
    heartbeat is fresh; leftovers of runs that are gone (demands, await flags) are cleared."""
    results = tmp_path / "results"
    where = serving.folder(results, "toy-large")
    user = str(tmp_path / "train" / "opd" / "train.json")
    serving.add_demand(where, user, "run1")
    assert serving.pending(where, {"run1"}) == [user] and serving.pending(where, {"run2"}) == []
    Path(user).parent.mkdir(parents=True)
    Path(user).write_text("{}")  # trained after the demand: no longer waiting
    assert serving.pending(where, {"run1"}) == []
    os.utime(user, (time.time() - 60, time.time() - 60))  # an old train.json (a forced rerun's): waiting again
    assert serving.pending(where, {"run1"}) == [user]
    (where / "leases").mkdir(parents=True)
    lease = serving.Lease(where / "leases", user)
    lease._write(released=False)  # the cell's job holds the server
    assert serving.pending(where, {"run1"}) == [user]
    lease._write(released=True)  # and ends without a newer train.json (it failed): met, marked so
    assert serving.pending(where, {"run1"}) == []
    lease.path.unlink()  # a later server starts without the old leases: still met
    assert serving.pending(where, {"run1"}) == []
    serving.add_demand(where, user, "run1")  # the cell planned again (a retry's gate, a later run)
    assert serving.pending(where, {"run1"}) == [user]
    flag = where / "await" / "toy-l-s-math" / "opd" / "s1.json"
    flag.parent.mkdir(parents=True)
    flag.write_text(json.dumps({"run": "run1"}))
    serving.start_run(results, "run1")
    assert serving.live_runs(results) == {"run1"} and serving.clear_stale(results) == []
    (serving.runs_folder(results) / "run1").unlink()  # run1 gone (killed: its heartbeat stops)
    assert sorted(serving.clear_stale(results)) == sorted([flag, where / "demand" / f"{serving._key(user)}.json"])
    assert not flag.exists()


@pytest.fixture(scope="module")
def toy_teacher(world, tmp_path_factory):
    root = tmp_path_factory.mktemp("teacher")
    model, tok = build_model({**TINY, "hidden_size": 64}, world["root"] / "tokenizer", seed=64)
    model.save_pretrained(root / "teacher")
    tok.save_pretrained(root / "teacher")
    return str(root / "teacher")


def _spec(path: str, results: Path, **extra) -> dict:
    return {"model": "toy-large", "path": path, "results": str(results), "folder": str(serving.folder(results, "toy-large")),
            "max_model_len": 256, "max_logprobs": 20, "gpus": 0, "engine": "embedded", "grace_s": 2, "poll_s": 0.5,
            "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1, "mem_mb": 1000, "runtime": 10}, **extra}  # fmt: skip


def test_the_embedded_servers_answers_are_the_embedded_teachers(toy_teacher, tmp_path):
    """The embedded engine's server (what the toy world serves without vLLM) answers as vLLM's does:
    the tokens' log-probs and the top k, within float rounding of the embedded teacher's forward."""
    serving.start_run(tmp_path, "r")
    found = serving.ensure(_spec(toy_teacher, tmp_path), str(tmp_path / "u.json"), "r", "local", wait_s=120, poll=0.5)
    try:
        _compare_with_embedded({"url": found["url"], "model": "toy-large", "teacher": toy_teacher}, "embedded engine")
    finally:
        serving.end_run(tmp_path, "r")


def _compare_with_embedded(served: dict, what: str) -> None:
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
    print(f"\n{what} vs embedded teacher: largest |log-prob gap| {gap:.2e} over {sum(map(len, responses))} tokens")
    assert gap < 1e-4
    assert all(set(s.topk[j]) == set(top[i, j].tolist()) for i, s in enumerate(got) for j in range(len(responses[i])))


def test_a_server_is_launched_once_found_again_relaunched_when_killed_and_stopped_with_its_run(toy_teacher, tmp_path):
    """The lifecycle on one machine: the first waiter launches the server, a second finds the same
    one; a server killed outright (SIGKILL, its engine with it) leaves an address that is not
    trusted, and the next waiter launches another; an address of a server of another model is not
    trusted either; once its run ends the server stops, and deletes its own address only."""
    results = tmp_path / "results"
    spec = _spec(toy_teacher, results)
    where = Path(spec["folder"])
    serving.start_run(results, "run1")
    first = serving.ensure(spec, str(tmp_path / "a.json"), "run1", "local", wait_s=120, poll=0.5)
    assert serving.ensure(spec, str(tmp_path / "b.json"), "run1", "local", wait_s=120, poll=0.5)["id"] == first["id"]
    os.kill(first["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    while serving.answers(first["url"], "toy-large", timeout=1) and time.monotonic() - t0 < 20:
        time.sleep(0.2)
    assert json.loads((where / "address.json").read_text())["id"] == first["id"]  # left behind ...
    assert serving.live_server(where, "toy-large") is None  # ... and not trusted
    second = serving.ensure(spec, str(tmp_path / "a.json"), "run1", "local", wait_s=120, poll=0.5)
    assert second["id"] != first["id"] and json.loads((where / "launch.json").read_text())["id"] == second["id"]
    assert serving.live_server(where, "another-model") is None
    serving.end_run(results, "run1")
    t0 = time.monotonic()
    while serving.answers(second["url"], "toy-large", timeout=1) and time.monotonic() - t0 < 30:
        time.sleep(0.5)
    assert not serving.answers(second["url"], "toy-large") and not (where / "address.json").exists()
    log = Path(json.loads((where / "launch.json").read_text())["log"])
    assert stop_record(log)["stopped"] == "no run needs it"


def test_a_server_near_its_time_limit_hands_over_to_a_successor(toy_teacher, tmp_path):
    """A server whose cells outlive its job (its Slurm end time, here the spec's) launches its
    successor handover_minutes before it, at most half its job's time (here 30 s: 15 s), serves until
    the successor answers, then stops; the cells find the successor at the same address file, with
    no wait for a queue after the limit. The successor (a job of its own) does not relay at once."""
    results = tmp_path / "results"
    spec = _spec(toy_teacher, results, end_at=time.time() + 30, handover_minutes=60)
    where = Path(spec["folder"])
    serving.start_run(results, "run1")
    first = serving.ensure(spec, str(tmp_path / "a.json"), "run1", "local", wait_s=120, poll=0.5)
    record = stop_record(where / f"server-{first['id']}.log", timeout=120)
    assert record["stopped"].startswith("handed over to ") and record["id"] == first["id"]
    second = serving.live_server(where, "toy-large")
    assert second and second["id"] != first["id"] and record["stopped"] == f"handed over to {second['id']} before its time limit"
    assert not serving.answers(first["url"], "toy-large") and json.loads((where / "launch.json").read_text())["id"] == second["id"]
    assert "end_at" not in json.loads((where / f"spec-{second['id']}.json").read_text())  # the successor is a plain server
    serving.end_run(results, "run1")
    assert stop_record(where / f"server-{second['id']}.log")["stopped"] == "no run needs it"


def test_a_server_that_stopped_idle_is_launched_again_by_the_next_cell(toy_teacher, tmp_path):
    """While its run lives, a server with no cell holding it or waiting for it stops after
    idle_minutes, a normal end; the next cell that needs it launches another."""
    results = tmp_path / "results"
    spec = _spec(toy_teacher, results, idle_minutes=0.03)
    serving.start_run(results, "run1")
    user = tmp_path / "train" / "a" / "train.json"
    first = serving.ensure(spec, str(user), "run1", "local", wait_s=120, poll=0.5)
    user.parent.mkdir(parents=True)
    user.write_text("{}")  # the cell has trained: nobody waits for the server now
    t0 = time.monotonic()
    while serving.answers(first["url"], "toy-large", timeout=1) and time.monotonic() - t0 < 30:
        time.sleep(0.3)
    log = Path(json.loads((Path(spec["folder"]) / "launch.json").read_text())["log"])
    assert stop_record(log)["stopped"] == "no user for 0.03 minutes"
    second = serving.ensure(spec, str(tmp_path / "train" / "b" / "train.json"), "run1", "local", wait_s=120, poll=0.5)
    assert second["id"] != first["id"] and serving.live_server(Path(spec["folder"]), "toy-large")["id"] == second["id"]
    serving.end_run(results, "run1")


def test_a_server_that_never_answers_fails_its_waiter_after_its_launches(tmp_path):
    """A server whose engine cannot start (its weights are missing) is launched LAUNCHES times,
    then the waiter fails naming the last launch's log; no cell was given a server."""
    results = tmp_path / "results"
    serving.start_run(results, "run1")
    with pytest.raises(serving.TeacherServerError, match=r"launched 3 times and never answered.*server-\w+\.log"):
        serving.ensure(_spec(str(tmp_path / "no-model"), results), str(tmp_path / "a.json"), "run1", "local", poll=0.3)
    serving.end_run(results, "run1")


def test_a_served_cell_without_a_server_in_its_environment_keeps_its_own_teacher(monkeypatch):
    monkeypatch.setenv(ts.ENV, json.dumps({"toy-l-s-math": {"url": "http://x:1", "model": "m"}}))
    assert ts.client_for("toy-mg-s-math") is None
    assert ts.client_for("toy-l-s-math").url == "http://x:1"


def test_the_workflow_serves_the_teacher_while_its_cells_train(tmp_path):
    """One node, through Snakemake: OPD and Prune-OPD of a setting with ``teacher_server: serve``.
    Their await_teacher jobs launch one server (the embedded engine), both cells find it and hold it
    by their leases, and it stops once the run has ended. A later run with nothing to train plans no
    await job. (Where it breaks: on the Slurm test cluster, tests/workflow/test_slurm.py.)"""
    from tests.support.toy import mini_config
    from tests.support.workflow import snakemake

    cfg = mini_config("results")
    cfg["settings"]["toy-l-s-math"]["teacher_server"] = "serve"
    cfg["teacher_serving"] = {"engine": "embedded"}
    cfg["experiments"] = {"main": {"settings": ["toy-l-s-math"], "methods": ["opd", "prune_opd"], "seeds": [1]}}
    cfg["claims"] = []  # the config's own claims are about experiments left out here
    cfg.pop("analysis")  # (it probes SCOUT's teachers, which this grid has not)
    (tmp_path / "mini.yaml").write_text(yaml.safe_dump(cfg))
    train = [f"results/train/toy-l-s-math/{m}/s1/train.json" for m in ("opd", "prune_opd")]
    out = snakemake(tmp_path, *train)
    assert out.stdout.count("rule await_teacher") + out.stderr.count("rule await_teacher") == 2
    where = tmp_path / "results/servers/toy-large"
    launches = sorted(where.glob("server-*.log"))
    assert len(launches) == 1
    for t in train:  # each served cell tested its teacher against the server
        first = json.loads((tmp_path / t).parent.joinpath("metrics.jsonl").read_text().splitlines()[0])
        assert first["teacher_selftest_diff"] < 1e-4, t
    users = {json.loads(p.read_text())["user"] for p in where.glob("leases/*.lease")}
    assert users == {str(tmp_path / t) for t in train}
    record = stop_record(launches[0])  # the run has ended: the server stops within its grace
    assert not (where / "address.json").exists()
    assert record["stopped"] == "no run needs it" and record["requests"] > 0
    rest = snakemake(tmp_path, *train, "-n")
    assert "await_teacher" not in rest.stdout + rest.stderr
