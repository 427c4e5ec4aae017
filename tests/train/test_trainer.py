"""The embedded backend: every method trains, SCOUT's teacher phase behaves as specified,
runs are deterministic, and a killed run resumes to the same result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from scout import algorithms as alg
from scout.embedded import lm, sampling
from scout.embedded.trainer import Trainer
from scout.grid import Grid
from scout.methods import METHODS
from tests.support.toy import params_vector
from tests.support.trainer import Alternating, metrics_without_time


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_and_writes_outputs(method, spec_for, tmp_path):
    spec = spec_for(method, total_steps=2, steps_per_epoch=2, save_every=1)
    if METHODS[method].trains_teacher:
        spec["method_cfg"]["scout"]["interval"] = 1
    summary = Trainer(spec, tmp_path, device="cpu").run(log=lambda _: None)
    assert summary["steps"] == 2
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in lines)
    assert (tmp_path / "model" / "final" / "model.safetensors").exists()
    assert (tmp_path / "train.json").exists()
    if METHODS[method].needs_teacher:  # the teacher self-test: at the start, and after each teacher update
        tested = [m["step"] for m in lines if "teacher_selftest_diff" in m]
        assert tested == ([1, 2] if METHODS[method].trains_teacher else [1])
        assert all(m["teacher_selftest_diff"] <= m["teacher_selftest_limit"] for m in lines if m["step"] in tested)
    else:
        assert not any("teacher_selftest_diff" in m for m in lines)
    if METHODS[method].trains_teacher:
        assert all(m.get("teacher_update") == 1 for m in lines)
        assert (tmp_path / "model" / "final-teacher" / "model.safetensors").exists()
        want_ratio = 0.0 if METHODS[method].teacher_phase == "prefix0" else None
        if want_ratio is not None:
            assert all(m["teacher_prefix_ratio"] == 0.0 for m in lines)


def test_scout_teacher_changes_only_on_teacher_steps_and_feeds_next_student_step(spec_for, tmp_path, monkeypatch):
    spec = spec_for("scout", total_steps=4, steps_per_epoch=4)
    spec["method_cfg"]["scout"]["interval"] = 2
    tr = Trainer(spec, tmp_path, device="cpu")
    tr.grader.close()
    tr.grader = Alternating()
    initial = params_vector(tr.models.teacher)
    seen = []
    real = lm.response_logits

    def spy(model, *a, **kw):
        seen.append((id(model), params_vector(model)))
        return real(model, *a, **kw)

    monkeypatch.setattr(lm, "response_logits", spy)
    history = [initial]
    scored_with = []
    for step in range(4):
        seen.clear()
        metrics = tr.student_step(step)
        # the first call scoring with the teacher is the OPD scoring of this student step
        teacher_calls = [v for i, v in seen if i == id(tr.models.teacher)]
        scored_with.append(teacher_calls[0])
        history.append(params_vector(tr.models.teacher))
        assert ("teacher_update" in metrics) == (step % 2 == 1)
    changed = [not torch.equal(history[i], history[i + 1]) for i in range(4)]
    assert changed == [False, True, False, True]
    # student steps score with the teacher as it stands after the latest teacher update
    assert torch.equal(scored_with[0], initial) and torch.equal(scored_with[1], initial)
    assert torch.equal(scored_with[2], history[2]) and not torch.equal(scored_with[2], initial)
    assert torch.equal(scored_with[3], history[2])


def test_scout_teacher_loss_is_on_its_own_continuation_tokens(spec_for, tmp_path, monkeypatch):
    """The teacher-phase loss covers the continuation tokens and nothing else: the student prefix
    (k tokens) is context, the padding past each continuation carries no gradient."""
    spec = spec_for("scout", total_steps=2, steps_per_epoch=2)
    spec["method_cfg"]["scout"].update(interval=1, prefix_ratio=[0.5, 0.5])
    tr = Trainer(spec, tmp_path, device="cpu")
    tr.grader.close()
    tr.grader = Alternating()  # every GRPO group informative, whatever the test world's teacher writes
    captured = {}
    real_loss, real_logp = alg.clipped_pg_loss, lm.continuation_logp

    def spy(logp, old, adv, mask, clip=0.2):
        logp.retain_grad()
        captured["logp"], captured["mask"] = logp, mask
        return real_loss(logp, old, adv, mask, clip)

    def scored(model, prefixes, conts, group, pad_id, **kw):
        captured.setdefault("scored", (prefixes, conts, group))
        return real_logp(model, prefixes, conts, group, pad_id, **kw)

    rows = tr.batch_rows(0)
    prompts = [tr.prompt_ids(r) for r in rows]
    responses = [[5, 6, 7, 8] + [tr.eos] for _ in rows]
    monkeypatch.setattr(alg, "clipped_pg_loss", spy)
    monkeypatch.setattr(lm, "continuation_logp", scored)
    metrics = tr.teacher_step(0, rows, prompts, responses)
    assert metrics["teacher_prefix_ratio"] == 0.5
    prefixes, conts, group = captured["scored"]
    assert group == spec["method_cfg"]["scout"]["k"] and len(conts) == group * len(rows)
    assert prefixes == [p + [5, 6] for p in prompts]  # k = floor(0.5 * 4) = 2 prefix tokens per response
    mask, grad = captured["mask"], captured["logp"].grad
    assert mask.sum(1).tolist() == [float(len(c)) for c in conts]
    assert (grad[mask == 0] == 0).all() and (grad[mask == 1] != 0).any()


def _final_weights(out: Path) -> dict:
    return load_file(str(out / "model" / "final" / "model.safetensors"))


def test_same_seed_same_result(spec_for, tmp_path):
    spec = spec_for("scout", total_steps=3, steps_per_epoch=3)
    spec["method_cfg"]["scout"]["interval"] = 1
    a, b = tmp_path / "a", tmp_path / "b"
    Trainer(spec, a, device="cpu").run(log=lambda _: None)
    Trainer(spec, b, device="cpu").run(log=lambda _: None)
    assert metrics_without_time(a / "metrics.jsonl") == metrics_without_time(b / "metrics.jsonl")
    wa, wb = _final_weights(a), _final_weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_killed_run_resumes_to_the_same_result(spec_for, tmp_path):
    spec = spec_for("scout", total_steps=6, steps_per_epoch=6, save_every=2)
    spec["method_cfg"]["scout"]["interval"] = 2
    ref = tmp_path / "uninterrupted"
    Trainer(spec, ref, device="cpu").run(log=lambda _: None)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "scout.cli", "train", "--spec", json.dumps(spec), "--out", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 120
    for line in proc.stdout:  # kill it after step 3 (checkpoint at step 2, step 3 not saved)
        if "step 3/6" in line or time.time() > deadline:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "train.json").exists()
    assert (out / "checkpoints" / "step_2").exists()

    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    assert "resumed from step 2" in rerun.stdout
    wa, wb = _final_weights(ref), _final_weights(out)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert metrics_without_time(ref / "metrics.jsonl") == metrics_without_time(out / "metrics.jsonl")


def test_ctrl_c_says_where_the_run_resumes_without_a_traceback(spec_for, tmp_path):
    """A person's Ctrl-C (SIGINT to the job, here under --log as the workflow runs it) is not a
    failure: one line on the console says so and where the same command picks the run up."""
    spec = spec_for("opd", total_steps=400, steps_per_epoch=400, save_every=2)
    out, log = tmp_path / "run", tmp_path / "train.log"
    cmd = [sys.executable, "-m", "scout.cli", "--log", str(log), "train", "--spec", json.dumps(spec), "--out", str(out)]
    # a terminal's job hears Ctrl-C; a background job of a non-interactive shell (as CI may be
    # started) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.time() + 120

    def saved() -> list[int]:  # the trainer keeps its latest checkpoint only: step_4 lives for two steps
        return [int(d.name.split("_")[1]) for d in (out / "checkpoints").glob("step_*[0-9]")]

    while not any(s >= 4 for s in saved()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    step = max(saved())
    assert step >= 4 and "Traceback" not in err and "failed" not in err
    assert "scout train was interrupted" in err
    assert f"scout train: interrupted; the same command (or snakemake) resumes it from its checkpoint at step {step}" in err


def test_prune_budget_adapts_during_training(spec_for, tmp_path):
    spec = spec_for("prune_opd", total_steps=4, steps_per_epoch=4)
    spec["method_cfg"]["prune_opd"] = {**spec["method_cfg"]["prune_opd"], "hit_fraction": 0.0}
    tr = Trainer(spec, tmp_path, device="cpu")
    tr.run(log=lambda _: None)
    budgets = [json.loads(x)["response_budget"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    b = spec["method_cfg"]["prune_opd"]["budget"]
    # hit_fraction 0 means every step counts as a hit: L grows by `step` up to `max`
    assert budgets == [min(b["initial"] + i * b["step"], b["max"]) for i in range(4)]


def test_relay_rollout_hands_over_to_teacher_on_reflection(world):
    """Force a trigger: a teacher that always prefers ' Wait' and a student that never does."""
    tok = lm.load_tokenizer(world["student"])
    student = lm.load_model(world["student"], torch.device("cpu")).eval()
    teacher = lm.load_model(world["teacher"], torch.device("cpu")).eval()
    wait = tok.convert_tokens_to_ids(" Wait")
    blank = tok.convert_tokens_to_ids("\n\n")
    with torch.no_grad():
        emb = teacher.get_output_embeddings()
        bias = torch.zeros(emb.weight.shape[0])
        bias[wait] = 50.0
        bias[blank] = 40.0
        emb.register_forward_hook(lambda m, i, o: o + bias)
        s_emb = student.get_output_embeddings()
        s_bias = torch.zeros(emb.weight.shape[0])
        s_bias[wait] = -50.0
        s_emb.register_forward_hook(lambda m, i, o: o + s_bias)
    reflect, blanks = sampling.vocab_flags(tok, emb.weight.shape[0])
    cfg = alg.RelayConfig(max_legs=2, max_paragraphs=1, max_leg_tokens=5, student_topk=5)
    res = sampling.relay_sample(
        student,
        teacher,
        [lm.prompt_ids(tok, "Compute 1+2.")],
        sampling.Sampling(30),
        cfg,
        reflect,
        blanks,
        tok.eos_token_id,
        tok.pad_token_id,
        torch.Generator().manual_seed(0),
    )
    r, owned = res.responses[0], res.teacher_owned[0]
    assert res.triggers == 2  # two legs, then the rollout stops
    assert r[0] == wait and owned[0] == 1  # the teacher's argmax replaces the student's token
    assert sum(owned) == len(owned) or owned[-1] == 1  # the rollout ends with the second leg
    assert len(r) <= 2 * cfg.max_leg_tokens


def test_matched_checkpoints_of_the_probes_are_exported_with_their_teacher(spec_for, tmp_path):
    spec = spec_for("scout", total_steps=4, steps_per_epoch=4, probe_steps=[2])
    spec["method_cfg"]["scout"]["interval"] = 1
    Trainer(spec, tmp_path, device="cpu").run(log=lambda _: None)
    exported = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert exported == ["final", "final-teacher", "step2", "step2-teacher"]


def test_chunked_scoring_equals_one_padded_batch(world):
    """The teacher phase scores its continuations in chunks of similar length: the same log-probs
    (up to float rounding) as one padded batch, and gradients flow through them."""
    model = lm.load_model(world["teacher"], torch.device("cpu"))
    prompts = [[5] * (4 + i % 3) for i in range(10)]
    responses = [[7, 8, 9][: 1 + i % 3] * (1 + i % 4) for i in range(10)]
    logits, tokens, mask = lm.response_logits(model, prompts, responses, 0)
    whole = lm.token_logp(logits, tokens) * mask
    chunked = lm.response_logp(model, prompts, responses, 0, chunk=3)
    assert chunked.shape == whole.shape and torch.allclose(chunked, whole, atol=1e-5)
    chunked.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    # the logits too (a student step scores its rollouts so), masked past each row's end
    c_logits, c_tokens, c_mask = lm.response_logits(model, prompts, responses, 0, chunk=3)
    assert c_logits.shape == logits.shape and torch.equal(c_tokens, tokens) and torch.equal(c_mask, mask)
    assert torch.allclose(c_logits * mask[..., None], logits * mask[..., None], atol=1e-5)


def test_continuations_score_as_full_sequences_with_each_prefix_computed_once(world):
    """The teacher phase scores K continuations per prefix from one pass over the prefix: the same
    log-probs as scoring prefix + continuation in full, and the same gradients, up to float rounding;
    0 past a row's end (an empty continuation is all 0)."""
    model = lm.load_model(world["teacher"], torch.device("cpu"))
    prefixes = [[5, 6, 7, 8], [9], [10, 11, 12, 13, 14, 15, 16]]
    conts = [[7, 8, 9], [4], [], [5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17]]
    full = lm.response_logp(model, [p for p in prefixes for _ in range(2)], conts, 0)
    full.sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = lm.continuation_logp(model, prefixes, conts, group=2, pad_id=0, chunk=2)
    assert shared.shape == (6, 6) and torch.allclose(shared, full, atol=1e-5)
    assert (shared[2] == 0).all() and (shared[1, 1:] == 0).all() and (shared[0, :3] < 0).all()
    shared.sum().backward()
    for w, p in zip(want, model.parameters(), strict=True):
        assert torch.allclose(p.grad, w, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(lm.continuation_logp(model, prefixes, conts, 2, 0), full, atol=1e-5)
    with pytest.raises(ValueError, match="5 continuations for 3 prefixes x 2"):
        lm.continuation_logp(model, prefixes, conts[:5], 2, 0)


def test_the_teacher_self_test_stops_a_job_whose_scoring_disagrees_with_its_weights(spec_for, tmp_path, monkeypatch):
    """A scoring path that returns log-probs at temperature 1.5 (a batched forward's logits scaled;
    the reference forward, one response alone, is not): the first step stops, naming both numbers."""
    spec = spec_for("opd", total_steps=2, steps_per_epoch=2)
    tr = Trainer(spec, tmp_path, device="cpu")
    plain = lm.score
    monkeypatch.setattr(lm, "score", lambda model, ids, att: plain(model, ids, att) / (1.5 if len(ids) > 1 else 1.0))
    with pytest.raises(alg.TeacherSelfTestError) as err:
        tr.run(log=lambda _: None)
    text = str(err.value)
    assert text.startswith("teacher self-test failed at step 1: the engine's log-probs differ from a reference forward")
    assert "above the limit" in text and "of the per-token signal" in text
    assert not (tmp_path / "model" / "final").exists()


def test_the_config_places_the_toy_jobs_not_the_presence_of_a_gpu(spec_for, tmp_path, monkeypatch):
    """On a machine where torch finds a GPU, a toy job trains and evaluates on the CPU unless the
    config says otherwise: the device is the config's (``device``: cpu by default, cuda, auto), in
    the spec only away from the CPU, so that no spec made before the key changes."""
    import copy

    from scout import jobs
    from scout.embedded import lm
    from scout.embedded.backend import EMBEDDED
    from scout.generation import make_generator
    from tests.support.toy import toy_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine, as torch sees it
    spec = spec_for("opd", total_steps=1, steps_per_epoch=1, save_every=1)
    assert "device" not in spec
    assert EMBEDDED.train(spec, str(tmp_path / "run"), log=lambda _: None)["device"] == "cpu"
    assert make_generator(spec["student"]).device == torch.device("cpu")
    assert lm.pick_device("auto") == torch.device("cuda")  # what auto would take there
    cfg = toy_config()
    cell = Grid.of(cfg).find("toy-l-s-math", "scout", 1)
    before = (jobs.train_job_spec(Grid.of(cfg), cell), jobs.eval_spec(Grid.of(cfg), "toy-l-s-math", "scout", 1, "final"))
    assert "device" not in cfg and all("device" not in s for s in before)  # the CPU, by default
    for device in ("cuda", "auto"):
        other = copy.deepcopy(cfg) | {"device": device}
        other["evaluation"]["device"] = device
        after = (jobs.train_job_spec(Grid.of(other), cell), jobs.eval_spec(Grid.of(other), "toy-l-s-math", "scout", 1, "final"))
        assert [s.get("device") for s in after] == [device, device]
        assert {k: v for k, v in after[0].items() if k != "device"} == before[0]
    cfg["device"] = cfg["evaluation"]["device"] = "cpu"  # written at their default: the same specs
    assert (jobs.train_job_spec(Grid.of(cfg), cell), jobs.eval_spec(Grid.of(cfg), "toy-l-s-math", "scout", 1, "final")) == before


def test_a_gpu_asked_for_where_torch_has_none_is_said_so_not_a_damaged_model(spec_for, tmp_path, monkeypatch, capsys):
    """device: cuda on a machine without one (here: torch says so) stops the job with what to
    change; it used to fail loading the student as if its file were damaged, naming a remake of
    the model that would retrain everything built on it."""
    from scout import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = {**spec_for("opd", total_steps=1, steps_per_epoch=1, save_every=1), "device": "cuda"}
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "--spec", json.dumps(spec), "--out", str(tmp_path / "run")])
    said = str(stop.value)
    assert said.startswith("scout train: device: cuda, but torch ") and "set device: cpu (or auto)" in said
    assert "damaged" not in said and "remake" not in said
