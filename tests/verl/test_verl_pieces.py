"""The pieces scout registers into verl, run through the installed verl's own code paths on CPU:
the dataset reader, the reward manager, the advantage computation, the distillation loss, and
SCOUT's teacher-phase batches. No GPU: nothing here starts a rollout engine or an FSDP worker."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from scout import algorithms as alg
from scout import grid, jobs, resources, training_runs
from scout.catalogue import DataError
from scout.paths import Paths
from tests.support.toy import REPO, cell_spec

pytest.importorskip("verl", reason="needs verl (pip install '.[verl]')")
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from scout.grading.code import calls_from_asserts
from scout.grid import Grid
from scout.verl import config as vc  # noqa: E402
from scout.verl import data as vdata  # noqa: E402
from scout.verl import teacher_phase as tp  # noqa: E402

PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
MATH = {"id": "m1", "domain": "math", "prompt": "Compute 9+3-5+3.", "answer": "10"}
CODE = {
    "id": "c1",
    "domain": "code",
    "prompt": "Write f(x): add 13.",
    "tests": calls_from_asserts(["assert f(0) == 13", "assert f(5) == 18"], entry="f"),
}


@pytest.fixture(scope="module")
def tok(world):
    from transformers import AutoTokenizer  # verl's own code paths take a transformers tokenizer

    return AutoTokenizer.from_pretrained(world["student"])


def paper_cfg(variant: str, setting: str = "q4b-q1.7b-math", **spec_over):
    cell = Grid.of(PAPER).find(setting, variant, 1)
    spec = {**Grid.of(PAPER).spec(cell), **spec_over}
    cfg = vc.build(spec, resources.job_resources(PAPER, "train", setting, cell.method, variant), "out")
    return cfg


# -- data ---------------------------------------------------------------------------------------------


def test_prepared_rows_read_back_through_verls_dataset(tmp_path, tok):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    src = tmp_path / "train.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in (MATH, CODE)) + "\n")
    out = vdata.export(src, vc.parquet_path(str(src)))
    assert out.name == "train.verl.parquet"
    cfg = vc.compose(["actor_rollout_ref.rollout.name=vllm", "data.max_prompt_length=64"])
    ds = RLHFDataset(data_files=str(out), tokenizer=tok, config=cfg.data)
    assert len(ds) == 2
    m, c = ds[0], ds[1]
    assert m["raw_prompt"] == [{"role": "user", "content": MATH["prompt"]}] and m["data_source"] == "scout/math"
    assert m["reward_model"]["ground_truth"] == "10" and json.loads(m["extra_info"]["row"]) == MATH
    assert json.loads(c["reward_model"]["ground_truth"]) == CODE["tests"] and c["ability"] == "code"
    # up to date: not rewritten; a newer JSONL is converted again
    before = out.stat().st_mtime_ns
    assert vdata.export(src, out).stat().st_mtime_ns == before
    os.utime(src, ns=(before + 10**9, before + 10**9))
    assert vdata.export(src, out).stat().st_mtime_ns != before


def test_a_malformed_row_or_missing_file_is_named(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(MATH) + "\n" + json.dumps({**MATH, "id": "m2", "answer": " "}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl: row 2 \(m2\): math row without an 'answer'"):
        vdata.export(src, tmp_path / "bad.verl.parquet")
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob(".*tmp"))
    with pytest.raises(DataError, match="missing.*prepare_data"):
        vdata.export(tmp_path / "nope.jsonl", tmp_path / "nope.parquet")


QWEN3_LIKE = (  # Qwen3's rule, in words the toy vocabulary has: an empty "think" block when thinking is off
    "{% for m in messages %}[{{ m['content'] }}]\n{% endfor %}{% if add_generation_prompt %}The answer is\n"
    "{% if enable_thinking is defined and enable_thinking is false %}(Wait)\n\n{% endif %}{% endif %}"
)


@pytest.mark.parametrize("variant", ["opd", "scout", "prune_opd", "grpo"])
def test_the_student_is_trained_without_thinking_as_it_is_evaluated(world, tmp_path, variant):
    """Qwen3-1.7B is `thinking: false`: verl's agent loop (as the cell configures it) must render
    the prompt as the evaluation does, with the empty think block; a model without the flag gets
    its template's default."""
    from transformers import AutoTokenizer

    from scout.embedded import lm
    from scout.verl import preflight

    folder = tmp_path / "tok"
    AutoTokenizer.from_pretrained(world["student"]).save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(QWEN3_LIKE)
    tok = AutoTokenizer.from_pretrained(folder)
    msgs = [{"role": "user", "content": MATH["prompt"]}]
    trained = tok.decode(preflight.rendered_prompt(paper_cfg(variant), tok, msgs))
    evaluated = tok.decode(
        lm.prompt_ids(tok, msgs, jobs.eval_spec(Grid.of(PAPER), "q4b-q1.7b-math", variant, 1, "final")["chat"])
    )
    assert trained == evaluated and trained.endswith("The answer is\n(Wait)\n\n")
    sky = tok.decode(preflight.rendered_prompt(paper_cfg(variant, setting="sky7b-ds1.5b-math"), tok, msgs))
    assert sky.endswith("]\nThe answer is\n")


# -- reward ---------------------------------------------------------------------------------------------


def _reward_items(tok, cases):
    items = []
    for response, row in cases:
        r = tok.encode(response, add_special_tokens=False)
        p = tok.encode("hi", add_special_tokens=False)
        truth = row.get("answer") or json.dumps(row["tests"])
        items.append(
            DataProto.from_dict(
                tensors={
                    "prompts": torch.tensor([p]),
                    "responses": torch.tensor([r]),
                    "attention_mask": torch.ones(1, len(p) + len(r), dtype=torch.long),
                },
                non_tensors={
                    "data_source": np.array([f"scout/{row['domain']}"], dtype=object),
                    "reward_model": np.array([{"ground_truth": truth}], dtype=object),
                    "extra_info": np.array([{"row": json.dumps(row)}], dtype=object),
                },
            )
        )
    return items


def test_the_reward_function_grades_through_verls_reward_manager(tok):
    """Through verl's reward manager, configured as the cells configure it."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = paper_cfg("scout")
    fn = get_custom_reward_fn(cfg)
    cases = [("The answer is \\boxed{10}", MATH), ("The answer is \\boxed{11}", MATH),
             ("```python\ndef f(x):\n    return x + 13\n```", CODE), ("    return x + 13\n```", CODE)]  # fmt: skip

    async def run():
        mgr = NaiveRewardManager(cfg, tok, fn)
        return [(await mgr.run_single(item))["reward_score"] for item in _reward_items(tok, cases)]

    assert asyncio.run(run()) == [1.0, 0.0, 1.0, 0.0]


def _byte_level_tokenizer():
    """A byte-level BPE tokenizer (as Qwen's is) with a special token, trained here on a few words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    raw.train_from_iterator(["the answer is 42"] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")


def test_the_teacher_phase_grades_prefix_and_continuation_decoded_as_one(monkeypatch):
    """verl's reward manager decodes a whole response at once, special tokens skipped; the teacher
    phase grades prefix + continuation the same way. Decoded apart and joined, a character cut
    at the split (pi is two bytes, two tokens here) would be garbled, and a special token in the
    prefix would be graded as text."""
    from scout.verl import reward
    from scout.verl.teacher_phase import graded_texts

    tok = _byte_level_tokenizer()
    ids = tok.encode("so r = 2\u03c0, \\boxed{2\u03c0}")
    cut = ids.index(tok.encode("\u03c0")[0]) + 1  # inside the two bytes of pi
    with_special = ids[:3] + [tok.eos_token_id] + ids[3:cut]
    texts = graded_texts(tok, [ids[:cut], with_special], [ids[cut:], ids[cut:]])
    assert texts == ["so r = 2\u03c0, \\boxed{2\u03c0}"] * 2
    assert tok.decode(ids[:cut]) + tok.decode(ids[cut:]) != texts[0]  # what joining two decodes gave
    row = {"id": "p", "domain": "math", "prompt": "r?", "answer": "2\\pi"}
    assert reward.grade_batch(["scout/math"] * 2, texts, ["2\\pi"] * 2, [{"row": json.dumps(row)}] * 2) == [1.0, 1.0]


def test_the_teacher_phase_grades_its_batch_at_once(monkeypatch):
    """The same verdicts as the reward function verl calls, in one grading call per domain (the
    pools then work on the whole batch in parallel), not one call per continuation."""
    from scout.grading import Grader
    from scout.verl import reward

    cases = [("The answer is \\boxed{10}", MATH), ("The answer is \\boxed{1", MATH), ("0}", MATH),
             ("```python\ndef f(x):\n    return x + 13\n```", CODE), ("    return x + 12\n```", CODE)]  # fmt: skip
    calls = []
    real = Grader.grade
    monkeypatch.setattr(Grader, "grade", lambda self, r, rows: calls.append(len(r)) or real(self, r, rows))
    infos = [{"row": json.dumps(row)} for _, row in cases]
    truths = [row.get("answer") or json.dumps(row["tests"]) for _, row in cases]
    scores = reward.grade_batch([f"scout/{row['domain']}" for _, row in cases], [c for c, _ in cases], truths, infos)
    assert scores == [1.0, 0.0, 0.0, 1.0, 0.0] and sorted(calls) == [2, 3]


# -- advantage estimator ---------------------------------------------------------------------------------


def test_scout_grpo_matches_hand_values_and_verls_grpo_on_shuffled_groups():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import scout.verl.plugin  # noqa: F401

    uids = np.array(["a", "b", "a", "c", "b", "c", "a", "b", "c"], dtype=object)
    scores = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    B, R = len(uids), 3
    tok_scores = torch.zeros(B, R)
    tok_scores[:, 1] = torch.tensor(scores)
    mask = torch.ones(B, R)
    mask[:, 2] = 0

    def run(name):
        d = DataProto.from_dict(
            tensors={"token_level_rewards": tok_scores, "response_mask": mask, "responses": torch.zeros(B, R)},
            non_tensors={"uid": uids},
        )
        return compute_advantage(d, adv_estimator=name, num_repeat=1, config=None).batch["advantages"]

    ours, verls = run("scout_grpo"), run("grpo")
    torch.testing.assert_close(ours, verls, atol=1e-5, rtol=0)
    # a = (1, 0, 1) and b = (0, 0, 1): sd (ddof 1) 1/sqrt(3), so ±(1/3)·sqrt(3) and ±(2/3)·sqrt(3);
    # c is all right: 0
    s3 = 1 / math.sqrt(3)
    expected = torch.tensor(
        [(1 / 3) / s3, -(1 / 3) / s3, -(2 / 3) / s3, 0, -(1 / 3) / s3, 0, (1 / 3) / s3, (2 / 3) / s3, 0]
    )
    torch.testing.assert_close(ours[:, 0], expected, atol=1e-4, rtol=0)
    assert (ours[:, 2] == 0).all()


def test_scout_grpo_takes_a_batch_verl_padded():
    """verl pads a batch to a divisor with copies of its first samples (same uids): groups of
    unequal size. scout_grpo must take it, and agree with verl's own grpo on it."""
    from verl.protocol import pad_dataproto_to_divisor
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import scout.verl.plugin  # noqa: F401

    d = DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor([[1.0], [0.0], [1.0], [1.0]]), "response_mask": torch.ones(4, 1),
                 "responses": torch.zeros(4, 1)},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )  # fmt: skip
    padded, pad = pad_dataproto_to_divisor(d, 3)
    assert pad == 2 and list(padded.non_tensor_batch["uid"]) == ["a", "a", "b", "b", "a", "a"]
    ours = compute_advantage(copy.deepcopy(padded), adv_estimator="scout_grpo").batch["advantages"]
    verls = compute_advantage(copy.deepcopy(padded), adv_estimator="grpo").batch["advantages"]
    assert torch.allclose(ours, verls, atol=1e-5)


# -- distillation losses, through verl's distillation_loss --------------------------------------------


def _nested(rows, plen, last_dim=None):
    """Per-sequence tensors the way verl's workers hold them: over prompt + response, left-shifted
    by one (position p holds the value of token p + 1)."""
    seqs = []
    for r in rows:
        shape = (plen + len(r),) + ((last_dim,) if last_dim else ())
        seq = torch.zeros(shape)
        seq[plen - 1 : plen - 1 + len(r)] = torch.tensor(r, dtype=torch.float32).reshape(len(r), *shape[1:])
        seqs.append(seq)
    return torch.nested.nested_tensor(seqs, layout=torch.jagged)


def _micro_batch(resp_tokens, plen, **tensors):
    B, R = len(resp_tokens), max(map(len, resp_tokens))
    responses = torch.zeros(B, R, dtype=torch.long)
    attn = torch.zeros(B, plen + R, dtype=torch.long)
    attn[:, :plen] = 1
    for i, t in enumerate(resp_tokens):
        responses[i, : len(t)] = torch.tensor(t)
        attn[i, plen : plen + len(t)] = 1
    td = TensorDict(
        {"prompts": torch.ones(B, plen, dtype=torch.long), "responses": responses, "attention_mask": attn,
         "response_mask": attn[:, plen:].bool(), **tensors},
        batch_size=[B],
    )  # fmt: skip
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(attn[:, plen:].sum()), global_batch_size=B)
    return td


def _loss(cfg, model_output, data, monkeypatch):
    from verl.trainer.distillation.losses import distillation_loss
    from verl.utils.config import omega_conf_to_dataclass

    for k, v in cfg.ray_kwargs.ray_init.runtime_env.env_vars.items():
        monkeypatch.setenv(k, v)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return distillation_loss(actor, omega_conf_to_dataclass(cfg.distillation), model_output, data)


def test_optr_keeps_the_k1_signal_only_inside_the_trust_region(monkeypatch):
    """threshold 0.1; t - s = (0, ln 0.05, +1 | -2, 0): trust (1, .05, 1 | .135, 1), so the
    second token is masked; advantages (0, 0, 1 | -2, 0); at ratio 1 the token-mean PG loss is
    -(1 - 2) / 5 = 0.2. verl's plain K1 would give (2.9957 + 1) / 5."""
    old = [[-1.0, -2.0, -0.5], [-1.0, -1.0]]
    teacher = [[-1.0, -2.0 + math.log(0.05), 0.5], [-3.0, -1.0]]
    old_pad = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    data = _micro_batch([[5, 6, 7], [5, 6]], 2, teacher_logprobs=_nested(teacher, 2, 1), old_log_probs=old_pad)
    out = {"log_probs": _nested(old, 2).values().requires_grad_()}
    loss, metrics = _loss(paper_cfg("optr"), out, data, monkeypatch)
    assert float(loss) == pytest.approx(0.2, abs=1e-6)
    assert metrics["distillation/optr_trusted_frac"] == pytest.approx(0.8)
    k1, _ = _loss(paper_cfg("opd"), {"log_probs": _nested(old, 2).values()}, data, monkeypatch)
    assert float(k1) == pytest.approx((-math.log(0.05) - 1 + 2) / 5, abs=1e-4)


def test_a_method_rows_advantage_function_runs_in_verls_loss(monkeypatch):
    """A user's method that only reshapes the advantage (docs/extending.md, "Add a method") gets scout's K1
    loss in verl, which applies the function its row names with its config section: halving the
    advantages of the OPTR example halves verl's plain K1 loss, (-ln 0.05 - 1 + 2) / 5 / 2."""
    from scout.methods import METHODS, Method

    monkeypatch.setitem(METHODS, "opd_half", Method("opd_half", "opd", advantage="halved", label="OPD/2"))
    monkeypatch.setattr(alg, "halved", lambda adv, mask, cfg: adv * cfg["factor"] * mask, raising=False)
    cfg = paper_cfg("opd", method="opd_half", method_cfg={"opd_half": {"factor": 0.5}})
    assert cfg.distillation.distillation_loss.loss_mode == "scout_k1"
    assert paper_cfg("opd").distillation.distillation_loss.loss_mode == "k1"
    old = [[-1.0, -2.0, -0.5], [-1.0, -1.0]]
    teacher = [[-1.0, -2.0 + math.log(0.05), 0.5], [-3.0, -1.0]]
    old_pad = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    data = _micro_batch([[5, 6, 7], [5, 6]], 2, teacher_logprobs=_nested(teacher, 2, 1), old_log_probs=old_pad)
    loss, _ = _loss(cfg, {"log_probs": _nested(old, 2).values().requires_grad_()}, data, monkeypatch)
    assert float(loss) == pytest.approx((-math.log(0.05) - 1 + 2) / 5 / 2, abs=1e-4)


def test_prune_weights_the_k1_signal_by_topk_overlap(monkeypatch):
    """topk 2, tau 0.7, w_drop 0.5, w_base 0.5. Overlap (2, 1, 2)/2: position 1 is bad, so
    w = (1, .5, .5) and the factor w + w_base = (1.5, 1, 1). Teacher log-probs of the sampled
    tokens 11, 12, 13: -0.5 (in top-2), -2.0 (12 is not: the k-th, -2.0), -1.2. Old = -1:
    advantages (.75, -1, -.2), loss -(.75 - 1 - .2)/3 = 0.15."""
    pc = {**PAPER["methods"]["prune_opd"], "topk": 2, "tau": 0.7, "w_drop": 0.5, "w_base": 0.5}
    cfg = paper_cfg("prune_opd", method_cfg={"prune_opd": pc})
    ids = [[[11, 5], [3, 4], [7, 13]]]
    lps = [[[-0.5, -1.5], [-0.2, -2.0], [-1.0, -1.2]]]
    data = _micro_batch(
        [[11, 12, 13]], 2,
        teacher_ids=_nested(ids, 2, 2).to(torch.long), teacher_logprobs=_nested(lps, 2, 2),
        old_log_probs=torch.full((1, 3), -1.0),
    )  # fmt: skip
    out = {"log_probs": torch.full((5,), -1.0), "overlap_count": _nested([[2, 1, 2]], 2).values()}
    loss, metrics = _loss(cfg, out, data, monkeypatch)
    assert float(loss) == pytest.approx(0.15, abs=1e-6)
    assert metrics["distillation/prune_overlap"] == pytest.approx(2.5 / 3)
    assert metrics["distillation/prune_sampled_in_teacher_topk"] == pytest.approx(2 / 3)


def test_prune_counts_the_samples_that_used_the_budget_up(monkeypatch):
    """Three samples in one micro-batch; the third is verl's padding sample (no response tokens).
    tau 0.7, w_drop 0.5: overlaps (2, 1, 2)/2 -> one bad position -> w = (1, .5, .5), effective
    length 3; overlaps (1, 1, 2)/2 -> bad, bad -> w = (.5, 0, 0), effective length 1. With L = 4 and
    margin 1 a sample uses the budget up from 3 tokens: 1 hit of 2 samples."""
    from verl.utils.metric import AggregationType

    from scout.verl import plugin

    pc = {**PAPER["methods"]["prune_opd"], "topk": 2, "tau": 0.7, "w_drop": 0.5, "w_base": 0.5}
    pc["budget"] = {**pc["budget"], "margin": 1}
    cfg = paper_cfg("prune_opd", method_cfg={"prune_opd": pc})
    ids, lps = [[[11, 5], [3, 4], [7, 13]]] * 3, [[[-0.5, -1.5], [-0.2, -2.0], [-1.0, -1.2]]] * 3
    data = _micro_batch(
        [[11, 12, 13]] * 3, 2,
        teacher_ids=_nested(ids, 2, 2).to(torch.long), teacher_logprobs=_nested(lps, 2, 2),
        old_log_probs=torch.full((3, 3), -1.0),
    )  # fmt: skip
    data["response_mask"][2] = False
    out = {
        "log_probs": torch.full((15,), -1.0),
        "overlap_count": _nested([[2, 1, 2], [1, 1, 2], [2, 2, 2]], 2).values(),
    }
    _, metrics = _loss(cfg, out, data, monkeypatch)
    assert plugin.BUDGET_HITS not in metrics  # no budget passed: nothing to count against
    tu.assign_non_tensor(data, **{plugin.BUDGET_KEY: 4})
    _, metrics = _loss(cfg, out, data, monkeypatch)
    hits, samples = metrics[plugin.BUDGET_HITS], metrics[plugin.BUDGET_SAMPLES]
    assert (hits.values, samples.values) == ([1], [2])
    assert hits.aggregation == samples.aggregation == AggregationType.SUM


def test_budget_counts_survive_verls_metric_reduction():
    """verl's path from the loss to the trainer: per-rank micro-batch lists (append_to_dict), the
    data-parallel reduction (Metric.aggregate_dp: mean over ranks, then the SUM over micro-batches)
    and the trainer's reduce_metrics. Hits 1+0 | 1+1 of samples 2+1 | 1+1: the trainer sees
    1.5 / 2.5, the fraction 3/5."""
    from verl.utils.metric import Metric, reduce_metrics
    from verl.utils.py_functional import append_to_dict, rename_dict

    from scout.verl import checkpoints as ck
    from scout.verl import plugin

    def micro_batch(effective: list[int]) -> dict:
        w = torch.zeros(len(effective), 5)
        for i, n in enumerate(effective):
            w[i, :n] = 1.0
        return plugin.budget_metrics(w, torch.ones(len(effective), 5), {plugin.BUDGET_KEY: 5}, margin=1)

    ranks = [[[4, 1], [2]], [[5], [4]]]  # effective lengths per micro-batch; 4 and up use L = 5 up
    per_rank = []
    for mbs in ranks:
        agg: dict = {}
        for effective in mbs:
            append_to_dict(agg, micro_batch(effective))
        per_rank.append(agg)
    worker = {k: Metric.aggregate_dp([r[k] for r in per_rank]) for k in per_rank[0]}
    trainer: dict = {}
    append_to_dict(trainer, worker)
    metrics = reduce_metrics(rename_dict(trainer, "actor/"))
    assert metrics["actor/" + plugin.BUDGET_HITS] == pytest.approx(1.5)
    assert metrics["actor/" + plugin.BUDGET_SAMPLES] == pytest.approx(2.5)
    pc = {"hit_fraction": 0.6, "budget": {"min": 1, "max": 9, "step": 1, "patience": 3}}
    assert ck.prune_budget_step(alg.BudgetState(5), metrics, pc)[0] == alg.BudgetState(6, 0)


class _Server:
    """Stands in for verl's vLLM server client (GPU only): records each request's sampling params."""

    def __init__(self):
        self.params: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        self.params.append(dict(sampling_params))
        return TokenOutput(token_ids=[5, 6, 7], log_probs=[-0.1, -0.2, -0.3])


def test_the_budget_reaches_each_rollout_request_through_scouts_agent_loop(tok):
    """Loaded the way verl's AgentLoopWorker loads it: from agent_loop_config_path, instantiated by
    Hydra with the worker's arguments. L becomes the request's max_tokens, capped at the
    configured response length (16384)."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = paper_cfg("prune_opd")
    agent = cfg.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == "scout_budget"
    loops = {c.name: c for c in OmegaConf.load(agent.agent_loop_config_path)}
    server = _Server()
    loop = hydra.utils.instantiate(
        loops[agent.default_agent_loop], trainer_config=DictConfigWrap(config=cfg), server_manager=server,
        tokenizer=tok, processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    base = {"temperature": 1.0, "top_p": 1.0, "logprobs": True}
    prompt = {"raw_prompt": [{"role": "user", "content": MATH["prompt"]}]}
    outs = [  # on the event loop the agent loop was built in, as in verl's worker
        loop.loop.run_until_complete(loop.run(dict(base), **prompt, **extra))
        for extra in ({tp.MAX_TOKENS: 1124}, {tp.MAX_TOKENS: 20000}, {})
    ]
    assert [p.get("max_tokens") for p in server.params] == [1124, 16384, None]
    assert all({k: p[k] for k in base} == base for p in server.params)
    assert [o.response_ids for o in outs] == [[5, 6, 7]] * 3
    assert paper_cfg("opd").actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"


# -- Relay-OPD's agent loop ----------------------------------------------------------------------------


class _ModelServer:
    """Stands in for verl's vLLM server client (GPU only) with a real model on CPU: greedy
    generation, and ``prompt_logprobs`` prefills in the layout of verl's ``extract_prompt_logprobs``
    (entry j: the top-k ids predicting token j + 1; a dummy entry last)."""

    def __init__(self, model, eos_id: int):
        self.model, self.eos_id, self.requests = model, eos_id, 0

    @torch.no_grad()
    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        self.requests += 1
        ids = list(prompt_ids)
        k = sampling_params.get("prompt_logprobs")
        if k is not None:
            tops = self._logits(ids).topk(max(k, 1), dim=-1).indices.tolist()
            return TokenOutput(token_ids=[tops[-1][0]], extra_fields={"prompt_ids": tops[:-1] + [[0] * max(k, 1)]})
        assert sampling_params["temperature"] == 0.0
        out: list[int] = []
        while len(out) < sampling_params["max_tokens"] and (not out or out[-1] != self.eos_id):
            out.append(int(self._logits(ids + out)[-1].argmax()))
        return TokenOutput(token_ids=out)

    def _logits(self, ids: list[int]) -> torch.Tensor:
        from scout.embedded import lm

        seq = torch.tensor([ids])
        return lm.score(self.model, seq, torch.ones_like(seq))[0]


@pytest.fixture(scope="module")
def relay_models(world):
    """Two tiny models with random weights of their own (untrained ones repeat one token)."""
    from scout.toy.world import build_model
    from tests.support.toy import TINY

    models = []
    for seed in (1, 2):
        model, tok = build_model({**TINY, "hidden_size": 32}, world["root"] / "tokenizer", seed=seed)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        models.append(model.eval())
    return (*models, tok)


def test_relay_leg_and_trigger_hand_values():
    from scout.verl import agent_loop as al

    blank = torch.zeros(10, dtype=torch.bool)
    blank[5] = True
    cfg = alg.RelayConfig(max_paragraphs=2, max_leg_tokens=10)
    assert al.leg_length([9, 5, 7, 5, 8], blank, cfg) == 4  # the second blank line closes the leg
    assert al.leg_length([9, 7, 8], blank, cfg) == 3  # the leg's tokens ran out first
    assert al.leg_length([7] * 12, blank, cfg) == 10  # max_leg_tokens
    assert al.leg_length([42, 5, 5], blank, cfg) == 3  # ids beyond the table are no blank lines
    reflect = torch.zeros(10, dtype=torch.bool)
    reflect[[2, 7]] = True
    # position 0: the student sampled the teacher's argmax; 1: a reflection word, but in the
    # student's top 2; 2: a reflection word the student neither sampled nor ranks -> fires
    assert al.first_trigger([3, 4, 6], [3, 7, 2], [[3, 1], [4, 7], [6, 0]], reflect) == 2
    assert al.first_trigger([3, 4], [3, 200], [[3, 1], [4, 7]], reflect) is None  # beyond the table
    assert al.first_trigger([], [], [], reflect) is None


class _Scripted:
    """A server whose next-token choice is a rule over the prefix (hand-worked relay cases)."""

    def __init__(self, argmax, generate):
        self.argmax, self.gen = argmax, generate

    async def __call__(self, ids, params):
        from verl.workers.rollout.replica import TokenOutput

        if params.get("prompt_logprobs") is not None:
            tops = [[self.argmax(ids[: j + 1], ids[j + 1])] for j in range(len(ids) - 1)]
            return TokenOutput(token_ids=[0], extra_fields={"prompt_ids": tops + [[0]]})
        return TokenOutput(token_ids=self.gen(ids, params["max_tokens"]))


@pytest.mark.parametrize(
    "teacher_leg, paragraphs, response, owned",
    [
        ([8, 9], 3, [3, 7, 8, 9], [0, 1, 1, 1]),  # the teacher ends the answer: the rollout ends
        ([5, 8, 9], 1, [3, 7, 5, 9], [0, 1, 1, 0]),  # a blank line closes the leg first: the student resumes
    ],
)
def test_relay_rollout_hand_cases(teacher_leg, paragraphs, response, owned):
    """Prompt (1, 2). The student samples (3, 4, 6, 9) and, after any leg, 9 (EOS). The teacher
    agrees with every token but prefers 7 (a reflection word) after (1, 2, 3); the student's top
    1 is its own token, so the trigger is at position 1: 3 is kept, 7 emitted, the leg follows."""
    from scout.verl import agent_loop as al

    reflect, blank = torch.zeros(10, dtype=torch.bool), torch.zeros(10, dtype=torch.bool)
    reflect[7], blank[5] = True, True
    student = _Scripted(lambda prefix, nxt: nxt, lambda ids, n: [3, 4, 6, 9] if ids == [1, 2] else [9])
    teacher = _Scripted(lambda prefix, nxt: 7 if prefix == [1, 2, 3] else nxt, lambda ids, n: teacher_leg[:n])
    cfg = alg.RelayConfig(max_legs=2, max_paragraphs=paragraphs, max_leg_tokens=6, student_topk=1)
    out = asyncio.run(al.relay_rollout([1, 2], student, teacher, {}, 20, cfg, reflect, blank, eos_id=9))
    assert (out.response, out.teacher_owned, out.triggers) == (response, owned, 1)


@pytest.mark.parametrize(
    "seed, topk, budget",
    [(0, 1, 40), (1, 1, 40), (2, 5, 40), (3, 1, 5)],
)
def test_relay_rollout_on_two_servers_equals_the_embedded_relay(relay_models, seed, topk, budget):
    """Greedy decoding makes both deterministic: the verl loop (student samples ahead, prefills
    find the first trigger) must produce the embedded backend's token-by-token rollout exactly,
    token for token and owner for owner. Random reflection and blank-line tables make triggers,
    paragraph cuts, leg-length cuts and (budget 5) a cut mid-leg."""
    from scout.embedded import lm, sampling
    from scout.verl import agent_loop as al

    student, teacher, tok = relay_models
    vocab = student.get_output_embeddings().weight.shape[0]
    cfg = alg.RelayConfig(max_legs=2, max_paragraphs=2, max_leg_tokens=6, student_topk=topk)
    prompt = lm.prompt_ids(tok, MATH["prompt"])
    for table_seed in range(seed, seed + 20):  # the first tables (from this seed on) that make a trigger
        g = torch.Generator().manual_seed(table_seed)
        reflect, blank = torch.rand(vocab, generator=g) < 0.3, torch.rand(vocab, generator=g) < 0.1
        ref = sampling.relay_sample(
            student, teacher, [prompt], sampling.Sampling(budget, temperature=0.0), cfg, reflect, blank,
            tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(0),
        )  # fmt: skip
        if ref.triggers:
            break
    servers = [_ModelServer(m, tok.eos_token_id) for m in (student, teacher)]
    gen = [al._client_generate(s) for s in servers]
    ours = asyncio.run(
        al.relay_rollout(prompt, *gen, {"temperature": 0.0}, budget, cfg, reflect, blank, tok.eos_token_id)
    )
    assert ref.triggers > 0
    assert (ours.response, ours.teacher_owned, ours.triggers) == (ref.responses[0], ref.teacher_owned[0], ref.triggers)


def test_relay_agent_loop_through_verls_loading(relay_models, monkeypatch):
    """scout_relay as verl's worker builds it (agent_loop_config_path, Hydra), with the teacher's
    server handed over the way RelayAgentLoopWorker does: the response is relay_rollout's on the
    chat-templated prompt, every token of it in the loss."""
    import hydra
    from omegaconf import OmegaConf, open_dict
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from scout.verl import agent_loop as al

    student, teacher, tok = relay_models
    cfg = paper_cfg("relay_opd")
    for k, v in cfg.ray_kwargs.ray_init.runtime_env.env_vars.items():
        monkeypatch.setenv(k, v)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.response_length = 24
    agent = cfg.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == "scout_relay"
    loops = {c.name: c for c in OmegaConf.load(agent.agent_loop_config_path)}
    servers = [_ModelServer(m, tok.eos_token_id) for m in (student, teacher)]
    loop = hydra.utils.instantiate(
        loops["scout_relay"], trainer_config=DictConfigWrap(config=cfg), server_manager=servers[0],
        tokenizer=tok, processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    messages = [{"role": "user", "content": MATH["prompt"]}]
    params = {"temperature": 0.0, "top_p": 1.0, "logprobs": False}
    with pytest.raises(RuntimeError, match="needs the teacher's server"):
        loop.loop.run_until_complete(loop.run(dict(params), raw_prompt=messages))
    monkeypatch.setitem(al._TEACHER, "default", servers[1])
    out = loop.loop.run_until_complete(loop.run(dict(params), raw_prompt=messages))
    prompt = loop.loop.run_until_complete(loop.ct_build_initial_tokens(messages))
    reflect, blank = al._vocab_flags(tok)
    want = asyncio.run(
        al.relay_rollout(
            prompt, *[al._client_generate(s) for s in servers], {"temperature": 0.0}, 24,
            alg.RelayConfig(**PAPER["methods"]["relay_opd"]), reflect, blank, tok.eos_token_id,
        )
    )  # fmt: skip
    assert out.prompt_ids == prompt and 0 < len(out.response_ids) <= 24
    assert out.response_ids == want.response and out.response_mask == [1] * len(want.response)
    assert servers[1].requests > 0  # the teacher checked the student's tokens


class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *a, **kw):
        return self.fn(*a, **kw)


class _VersionedServer:
    """A vLLM server actor as verl's LLMServerClient sees it: its outputs carry the version of the
    weights it serves (``global_steps``, vllm_async_server.py), changing between calls as a weight
    sync would, from ``versions``."""

    def __init__(self, inner: _ModelServer, versions: list):
        self.versions = list(versions)

        async def generate(request_id, prompt_ids, sampling_params, **kw):
            out = await inner.generate(request_id, prompt_ids=prompt_ids, sampling_params={"max_tokens": 24, **sampling_params})
            step = self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]
            out.extra_fields = {"global_steps": step, **(out.extra_fields or {})}
            return out

        self.generate = _Remote(generate)


class _OneServerBalancer:
    def __init__(self, server):
        async def fields():
            return []

        async def acquire(request_id, **kw):
            return "s0", server

        self.require_acquire_fields = _Remote(fields)
        self.require_release_fields = _Remote(fields)
        self.acquire_server = _Remote(acquire)
        self.release_server = _Remote(lambda **kw: None)


def _tq_tags(output, monkeypatch) -> list[dict]:
    """verl's own AgentLoopWorkerTQ._agent_loop_postprocess on one loop output: the tags it stores."""
    import types

    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1 import agent_loop_tq

    put = {}

    async def fake_put(keys, fields, tags, partition_id):
        put["tags"] = tags

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", fake_put)
    me = types.SimpleNamespace(processor=None, distillation_enabled=False, reward_loop_worker_handles=None)
    for name in ("_compute_score", "_compute_teacher_logprobs", "_compute_multi_modal_inputs", "_compute_position_ids"):
        setattr(me, name, types.MethodType(getattr(AgentLoopWorker, name), me))
    post = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__._agent_loop_postprocess
    asyncio.run(post(me, output, False, uid="u", session_id=0, global_steps=7))
    return put["tags"]


@pytest.mark.parametrize("loop_name", ["single_turn_agent", "scout_relay"])
def test_the_loops_carry_the_weight_versions_through_verls_tag_step(relay_models, monkeypatch, loop_name):
    """verl's trainer reads each sample's min/max weight version as ints (trainer_base's
    _compute_metrics); the relay loop built its own extra fields and dropped them, so every
    Relay-OPD cell died at step 1. Through verl's LLMServerClient (which sets them) and its
    TransferQueue tag step, both loops give the student's version (5), never the teacher's (99)."""
    import hydra
    from omegaconf import OmegaConf, open_dict
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.llm_server import LLMServerClient

    from scout.verl import agent_loop as al

    student, teacher, tok = relay_models
    cfg = paper_cfg("relay_opd")
    for k, v in cfg.ray_kwargs.ray_init.runtime_env.env_vars.items():
        monkeypatch.setenv(k, v)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.response_length = 24

    def client(model, versions):
        server = _VersionedServer(_ModelServer(model, tok.eos_token_id), versions)
        return LLMServerClient(config=cfg, load_balancer_handle=_OneServerBalancer(server))

    agent = cfg.actor_rollout_ref.rollout.agent
    loops = dict(_agent_loop_registry) | {c.name: c for c in OmegaConf.load(agent.agent_loop_config_path)}
    monkeypatch.setitem(al._TEACHER, "default", client(teacher, [99]))
    loop = hydra.utils.instantiate(
        loops[loop_name], trainer_config=DictConfigWrap(config=cfg), server_manager=client(student, [5]),
        tokenizer=tok, processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    params = {"temperature": 0.0, "top_p": 1.0, "logprobs": False}
    out = loop.loop.run_until_complete(loop.run(params, raw_prompt=[{"role": "user", "content": MATH["prompt"]}]))
    tags = _tq_tags(out, monkeypatch)
    low = np.array([t["min_global_steps"] for t in tags], dtype=int)  # as trainer_base does
    high = np.array([t["max_global_steps"] for t in tags], dtype=int)
    assert low.tolist() == high.tolist() == [5]
    assert "prompt_ids" not in out.extra_fields  # a prefill's top-k lists never travel with the sample


def test_relay_workers_hand_the_teacher_to_the_loop():
    """Drift guard: the worker's constructor is verl's, and Relay-OPD gets scout's manager."""
    import inspect

    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    from scout.verl import agent_loop as al
    from scout.verl import parts as vp

    ours, theirs = inspect.signature(al.RelayAgentLoopWorker.__init__), inspect.signature(AgentLoopWorker.__init__)
    assert list(ours.parameters) == list(theirs.parameters)
    assert issubclass(al.RelayAgentLoopManager, AgentLoopManagerTQ)
    assert vp.agent_loop_manager("relay_opd") is al.RelayAgentLoopManager
    assert vp.agent_loop_manager("opd") is AgentLoopManagerTQ and vp.agent_loop_manager("scout") is AgentLoopManagerTQ


def test_loss_settings_must_reach_the_workers(monkeypatch):
    from scout.verl import env

    monkeypatch.delenv(env.METHOD_CFG_ENV, raising=False)
    with pytest.raises(RuntimeError, match="SCOUT_METHOD_CFG is not set"):
        env.method_section("optr")
    assert env.method_cfg(required=False) == {}  # outside a cell's job: nothing to read, no error
    from scout.verl.lora_sync import teacher_lora_from_env

    assert teacher_lora_from_env() is None
    monkeypatch.setenv(env.METHOD_CFG_ENV, '{"opd": {}}')
    with pytest.raises(RuntimeError, match=r"no 'optr' section \(has \['opd'\]\)"):
        env.method_section("optr")


# -- SCOUT's teacher phase on DataProto -------------------------------------------------------------------

EOS, PAD = 2, 0


def _student_batch():
    """Two prompts, two student responses each (uid groups a and b), left-padded prompts and
    right-padded responses as verl's rollout returns them."""
    prompts = [[5, 6], [5, 6], [7], [7]]
    responses = [[11, 12, 13, EOS], [14, EOS], [21, 22, 23, 24, 25], [26]]
    return DataProto.from_dict(
        tensors=tp.padded_batch(prompts, responses, PAD, 6),
        non_tensors={
            "uid": np.array(["a", "a", "b", "b"], dtype=object),
            "data_source": np.array(["scout/math"] * 4, dtype=object),
            "reward_model": np.array([{"ground_truth": "1"}] * 2 + [{"ground_truth": "2"}] * 2, dtype=object),
            "extra_info": np.array([{"row": "A"}] * 2 + [{"row": "B"}] * 2, dtype=object),
        },
    )


def test_continuation_requests_cut_one_trajectory_per_prompt_at_the_scheduled_ratio():
    """ratio 0.5: trajectory a has body (11, 12, 13) without its EOS, k = floor(1.5) = 1; b has
    (21..25), k = floor(2.5) = 2. K = 3 copies each, a fresh group per prefix, budget 6 - k."""
    req = tp.continuation_requests(_student_batch(), 0.5, 3, EOS, PAD, 6)
    assert len(req) == 6
    assert [list(x) for x in req.non_tensor_batch[tp.PREFIX_IDS]] == [[11]] * 3 + [[21, 22]] * 3
    assert [list(x) for x in req.non_tensor_batch["raw_prompt_ids"]] == [[5, 6, 11]] * 3 + [[7, 21, 22]] * 3
    assert req.batch["input_ids"].tolist()[0] == [5, 6, 11] and req.batch["input_ids"].tolist()[3] == [7, 21, 22]
    assert list(req.non_tensor_batch["uid"]) == ["a/teacher"] * 3 + ["b/teacher"] * 3
    assert list(req.non_tensor_batch[tp.MAX_TOKENS]) == [5] * 3 + [4] * 3
    assert [list(p) for p in req.non_tensor_batch[tp.PREFIX_IDS]] == [[11]] * 3 + [[21, 22]] * 3
    assert [e["row"] for e in req.non_tensor_batch["extra_info"]] == ["A"] * 3 + ["B"] * 3
    assert req.non_tensor_batch["reward_model"][3] == {"ground_truth": "2"}
    # the control (prefix 0) continues from the bare prompt
    zero = tp.continuation_requests(_student_batch(), 0.0, 2, EOS, PAD, 6)
    assert [list(x) for x in zero.non_tensor_batch["raw_prompt_ids"]] == [[5, 6]] * 2 + [[7]] * 2
    assert list(zero.non_tensor_batch[tp.MAX_TOKENS]) == [6] * 4


def test_teacher_train_batch_masks_the_student_prefix_and_feeds_verls_grpo_and_pg_loss():
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.config import omega_conf_to_dataclass

    import scout.verl.plugin  # noqa: F401

    req = tp.continuation_requests(_student_batch(), 0.5, 2, EOS, PAD, 6)
    conts = [[30, EOS], [31, 32, EOS], [40, EOS], [41, EOS]]
    batch = tp.teacher_train_batch(req, conts, [1.0, 0.0, 0.0, 0.0], PAD, width=6)
    assert batch.batch["responses"].tolist() == [
        [11, 30, EOS, 0, 0, 0], [11, 31, 32, EOS, 0, 0], [21, 22, 40, EOS, 0, 0], [21, 22, 41, EOS, 0, 0]
    ]  # fmt: skip
    assert batch.batch["response_mask"].tolist() == [
        [0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 0, 0]
    ]  # fmt: skip
    assert batch.batch["prompts"].tolist() == [[5, 6]] * 2 + [[0, 7]] * 2
    assert batch.batch["attention_mask"][2].tolist() == [0, 1, 1, 1, 1, 1, 0, 0]
    assert batch.batch["token_level_scores"][0].tolist() == [0, 0, 1, 0, 0, 0]
    assert tp.PREFIX_IDS not in batch.non_tensor_batch and batch.meta_info["scout_prefix_ratio"] == 0.5
    # GRPO within each prefix group: a/teacher (1, 0) -> ±0.7071; b/teacher (0, 0) -> 0
    adv = compute_advantage(batch, adv_estimator="scout_grpo", config=None).batch["advantages"]
    s = 1 / math.sqrt(2)
    torch.testing.assert_close(adv[:, 2], torch.tensor([s, -s, 0.0, 0.0]), atol=1e-4, rtol=0)
    assert (adv[0, 0] == 0) and (adv[1, 3] == pytest.approx(-s, abs=1e-4))
    # verl's PG loss with this mask does not see the prefix: changing the prefix log-probs changes nothing
    actor = omega_conf_to_dataclass(paper_cfg("scout").actor_rollout_ref.actor)
    old = torch.full((4, 6), -1.0)
    lp = old.clone().requires_grad_()
    loss, _ = compute_policy_loss_vanilla(old, lp, adv, batch.batch["response_mask"], "token-mean", actor)
    loss.backward()
    assert (lp.grad[batch.batch["response_mask"] == 0] == 0).all() and lp.grad[0, 1] != 0


def test_teacher_train_batch_refuses_mismatched_or_overlong_input():
    req = tp.continuation_requests(_student_batch(), 0.5, 1, EOS, PAD, 6)
    with pytest.raises(ValueError, match="2 requests, 1 continuations, 2 rewards"):
        tp.teacher_train_batch(req, [[1]], [0.0, 1.0], PAD, 6)
    with pytest.raises(ValueError, match=r"exceeds the response width 6 for requests \[1\]"):
        tp.teacher_train_batch(req, [[1], [1, 2, 3, 4, 5]], [0.0, 1.0], PAD, 6)


def test_engine_agreement_by_hand():
    """Probabilities of the continuation tokens only (after each row's prefix), engine vs trainer."""
    lg = math.log
    trainer = torch.tensor([[lg(0.5), lg(0.2), lg(0.9), 0.0], [lg(0.1), lg(0.4), 0.0, 0.0]])
    same = [[lg(0.2), lg(0.9)], [lg(0.1), lg(0.4)]]
    assert tp.engine_agreement(trainer, [1, 0], same) == pytest.approx(1.0)
    # x = [.2, .9, .1, .4], y = [.9, .2, .1, .4]: both mean .4; cov -0.11, var 0.38 each
    swapped = [[lg(0.9), lg(0.2)], [lg(0.1), lg(0.4)]]
    assert tp.engine_agreement(trainer, [1, 0], swapped) == pytest.approx(-0.11 / 0.38)
    assert math.isnan(tp.engine_agreement(trainer, [1, 0], [[lg(0.2)], []]))  # one token: no correlation


def test_the_lora_head_and_mapper_patches_fit_the_gpu_installs_vllm_and_the_cpu_builds():
    """The GPU install pins vLLM 0.24, whose head takes (hidden, lm_head, bias); the CPU build (0.30)
    adds skip_gather. With no adapter on the head the patched call is the plain head's with the
    same arguments in both. The mapper's old name is given back where the new one exists; 0.24
    has neither (verl calls it from 0.25 on). The classes stand in for vLLM 0.24's signatures,
    which cannot be installed here; CI's LoRA run covers the CPU build's."""
    from types import SimpleNamespace

    from scout.verl import lora_sync

    class Head024:  # vllm/model_executor/layers/logits_processor.py of 0.24.0, the signature
        def _get_logits(self, hidden_states, lm_head, embedding_bias):
            return ("0.24", hidden_states, lm_head, embedding_bias)

    class Head030:
        def _get_logits(self, hidden_states, lm_head, embedding_bias, skip_gather=False):
            return ("0.30", hidden_states, lm_head, embedding_bias, skip_gather)

    plain = object()
    lm_head = SimpleNamespace(base_layer=plain)  # the LoRA-wrapped head: its plain layer is used
    old = SimpleNamespace(base_layer=Head024())
    assert lora_sync.head_without_adapter(old, "h", lm_head, None) == ("0.24", "h", plain, None)
    new = SimpleNamespace(base_layer=Head030())
    assert lora_sync.head_without_adapter(new, "h", lm_head, None, True) == ("0.30", "h", plain, None, True)

    class Mapper024:
        pass

    class Mapper030:
        def get_rename_mapper(self):
            return "renamed"

    for cls in (Mapper024, Mapper030):
        lora_sync.patch_vllm_mapper(SimpleNamespace(WeightsMapper=cls))
    assert not hasattr(Mapper024, "get_unstacked_mapper") and Mapper030().get_unstacked_mapper() == "renamed"


def test_the_lora_teacher_trainer_config_and_its_engines_peft_config():
    """A LoRA teacher's trainer: verl's LoRA keys on its model, unmerged (the adapter alone is
    synced); the engine's peft config from the same keys."""
    from scout.methods import LORA_TARGETS
    from scout.verl import lora_sync
    from scout.verl.teacher_phase import teacher_lora, teacher_worker_config
    from tests.support.toy import toy_config

    config = toy_config() | yaml.safe_load((REPO / "config" / "verl-cpu.yaml").read_text())
    cell = Grid.of(config).find("toy-l-s-math", "scout-lora", 1)
    spec = {**training_runs.run_spec(Grid.of(config), cell), "resources": resources.job_resources(config, "train", cell.setting,
                                                                                  cell.method, cell.variant)}  # fmt: skip
    composed = vc.build(spec, spec["resources"], "/tmp/x")
    assert teacher_lora(composed) == {"rank": 8, "alpha": 16, "target_modules": list(LORA_TARGETS)}
    t = teacher_worker_config(composed)
    assert (t.model.lora_rank, t.model.lora_alpha, t.model.lora.merge) == (8, 16, False)
    assert t.rollout.layered_summon  # the adapter gathered a unit at a time, never the whole teacher
    assert list(t.model.target_modules) == list(LORA_TARGETS)
    peft = lora_sync.peft_config(t.model)
    assert peft == {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16,
                    "target_modules": list(LORA_TARGETS), "bias": "none"}  # fmt: skip
    full = Grid.of(config).find("toy-l-s-math", "scout", 1)
    spec = {**training_runs.run_spec(Grid.of(config), full), "resources": spec["resources"]}
    composed = vc.build(spec, spec["resources"], "/tmp/x")
    assert teacher_lora(composed) is None and teacher_worker_config(composed).model.lora_rank == 0
    assert not teacher_worker_config(composed).rollout.layered_summon
    assert lora_sync.peft_config(teacher_worker_config(composed).model) is None


@pytest.mark.parametrize(
    "env",
    [
        {},  # the installed package's verl.plugins entry point
        {"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_USE_EXTERNAL_MODULES": "scout.verl.plugin"},  # what the driver sets
    ],
)
def test_a_fresh_verl_process_has_the_scout_pieces_registered(env):
    """Ray workers are fresh processes: `import verl` alone must register scout's pieces."""
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as A\n"
        "from verl.trainer.distillation.losses import DISTILLATION_LOSS_REGISTRY as D\n"
        "print('scout_grpo' in A, 'scout_optr' in D, 'scout_prune' in D)\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**base, **env})
    assert done.stdout.split() == ["True", "True", "True"], done.stderr[-2000:]
    if env:  # and without either route nothing is registered: the test can fail
        off = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True,
            env={**base, "VERL_USE_EXTERNAL_PLUGINS": "none"},
        )  # fmt: skip
        assert off.stdout.split() == ["False", "False", "False"]


# -- step counts ---------------------------------------------------------------------------------------


def test_prepared_counts_match_verls_filter_and_dataloader(world, tmp_path, tok):
    """Preparation counts the rows verl's overlong-prompt filter keeps (per tokenizer and chat
    options); the grid plans floor(kept / batch) steps, which is what verl's dataloader (it drops
    the last partial batch) runs per epoch."""
    import copy

    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from scout import prepare

    rows = [{**MATH, "id": f"m{i}", "prompt": "Compute " + "+".join(["1"] * (1 + i % 9)) + "."} for i in range(45)]
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    limit, batch = 16, 4
    view = {"tokenizer": world["student"], "chat": {}, "max_prompt_length": limit}
    kept = prepare.kept_by_view(rows, [view], log=lambda m: None)[grid.view_key(view)]
    cfg = vc.compose(
        ["actor_rollout_ref.rollout.name=vllm", f"data.max_prompt_length={limit}", "data.filter_overlong_prompts=true"]
    )
    ds = RLHFDataset(data_files=str(vdata.export(src, tmp_path / "train.verl.parquet")), tokenizer=tok, config=cfg.data)
    assert 0 < kept < len(rows) and len(ds) == kept  # some prompts are too long, as verl measures them
    loader = StatefulDataLoader(dataset=ds, batch_size=batch, drop_last=True, collate_fn=collate_fn)
    # the grid plans from the prepared data's metadata
    paper = copy.deepcopy(PAPER)
    paper["results"] = str(tmp_path / "results")
    paper["datasets"]["openr1-math-46k"]["rows"] = len(rows)
    paper["training"].update(batch_size=batch, mini_batch_size=batch)
    student_view = jobs.data_spec(Grid.of(paper), "openr1-math-46k")["views"][0]
    meta = Path(Paths.of(paper).meta("openr1-math-46k"))
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"rows": len(rows), "kept": {grid.view_key(student_view): kept}}))
    spec = cell_spec(paper, "q4b-q1.7b-math", "opd", 1)
    assert spec["steps_per_epoch"] == len(loader) == kept // batch and spec["total_steps"] == len(loader)


def test_paper_step_counts_follow_verls_floor():
    """Before the data is prepared the grid plans from the configured rows, with verl's floor:
    45,883 rows of 128 run 358 steps per epoch (not 359: the last partial batch is dropped)."""
    opd = cell_spec(PAPER, "q4b-q1.7b-math", "opd", 1)
    assert (opd["steps_per_epoch"], opd["total_steps"]) == (45883 // 128, 358)
    code = cell_spec(PAPER, "q4b-q1.7b-code", "opd", 1)
    assert code["total_steps"] == 3 * (7436 // 128)
    assert grid.teacher_prep_spec(PAPER, "Qwen3-8B-DAPO")["total_steps"] == 3 * (17398 // 64)


# -- Prune-OPD: the sampled token's exact teacher log-prob -------------------------------------------


class _Lp:  # vLLM's Logprob: a log-prob and its rank
    def __init__(self, logprob, rank):
        self.logprob, self.rank = logprob, rank


def test_the_sampled_tokens_exact_log_prob_is_kept():
    """vLLM's prompt_logprobs give the top-k and, when the prompt (sampled) token ranks below k, that
    token too; verl's extraction drops it. Ours puts it in the k-th slot with its exact log-prob, so
    the K1 term uses the exact value, not the k-th log-prob (an upper bound)."""
    from types import SimpleNamespace

    from scout.verl.plugin import extract_prompt_logprobs_keeping_sampled, teacher_logp_of_sampled

    positions = [
        None,  # vLLM gives no log-prob for the first prompt token
        {"7": _Lp(-0.1, 1), "8": _Lp(-2.0, 2)},  # the sampled token 8 is in the top 2
        {"5": _Lp(-0.2, 1), "6": _Lp(-1.9, 2), "9": _Lp(-6.5, 40)},  # sampled 9 ranks 40th
    ]
    out = {}
    extract_prompt_logprobs_keeping_sampled(SimpleNamespace(prompt_logprobs=positions), 2, out)
    assert out["prompt_ids"] == [[7, 8], [5, 9], [0, 0]] and out["prompt_logprobs"] == [
        [-0.1, -2.0],
        [-0.2, -6.5],
        [0.0, 0.0],
    ]
    ids, lps = torch.tensor(out["prompt_ids"][:2]), torch.tensor(out["prompt_logprobs"][:2])
    t_logp, found = teacher_logp_of_sampled(ids, lps, torch.tensor([8, 9]))
    assert t_logp.tolist() == pytest.approx([-2.0, -6.5]) and found.all()
    # verl's own extraction would have given token 9 nothing: the upper bound was -1.9
    t_old, found_old = teacher_logp_of_sampled(torch.tensor([[5, 6]]), torch.tensor([[-0.2, -1.9]]), torch.tensor([9]))
    assert t_old.item() == pytest.approx(-1.9) and not found_old.item()


def test_the_patch_reaches_a_module_that_imports_the_function_by_name(tmp_path, monkeypatch):
    """verl's server does `from ...utils import extract_prompt_logprobs`: its module attribute is
    what it calls. The patch lands there when the module is imported (or at once if it already is)."""
    import importlib
    import sys

    from scout.verl import plugin

    (tmp_path / "fake_server.py").write_text("def extract_prompt_logprobs(*a):\n    return 'verl'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    plugin.patch_on_import("fake_server", "extract_prompt_logprobs", lambda *a: "scout")
    module = importlib.import_module("fake_server")
    assert module.extract_prompt_logprobs() == "scout"
    sys.modules.pop("fake_server")


def test_relay_keeps_the_widest_weight_versions_of_its_sampling_calls():
    """verl's multi-turn rule for several calls in one sample: the lowest and the highest version seen."""
    from scout.verl.agent_loop import merge_student_fields

    acc: dict = {}
    merge_student_fields(acc, {"min_global_steps": 5, "max_global_steps": 5, "prompt_ids": [[1]]})
    merge_student_fields(acc, {"min_global_steps": 6, "max_global_steps": 6})
    merge_student_fields(acc, {"min_global_steps": None, "max_global_steps": None})
    assert acc == {"min_global_steps": 5, "max_global_steps": 6}


def test_a_current_parquet_is_not_trusted_over_a_bad_row(tmp_path):
    """verl's parquet twin is reused while it is newer than the JSONL, but the rows are checked
    every time: a code row whose tests the grader cannot run is refused, naming the row."""
    import os

    from scout.catalogue import DataError
    from scout.verl import data

    good = {"id": "c1", "domain": "code", "prompt": "Write f.", "tests": CODE["tests"]}
    src = tmp_path / "mine.jsonl"
    src.write_text(json.dumps(good) + "\n")
    parquet = data.export(src, tmp_path / "mine.parquet")
    src.write_text(json.dumps({**good, "tests": {"type": "assert", "asserts": ["assert f(1) == 2"]}}) + "\n")
    os.utime(parquet, (src.stat().st_mtime + 10,) * 2)  # the old parquet looks current
    with pytest.raises(DataError, match=r"row 1 \(c1\): assert-style tests .* the grader accepts calls, stdin"):
        data.export(src, parquet)


def test_the_self_tests_engine_rows_by_hand():
    """Rows P - 1 .. P + R - 2 of verl's layout score the response: a 2-token prompt and a 3-token
    response take rows 1, 2 and 3 of the 5 (row j: token j + 1; the last row is verl's zero row)."""
    from scout.verl import self_test as st

    ids = torch.tensor([[11], [12], [13], [14], [0]])
    logp = torch.tensor([[-0.1], [-0.2], [-0.3], [-0.4], [0.0]])
    got_ids, got_logp = st.engine_rows(ids, logp, prompt_len=2, response_len=3)
    assert got_ids.tolist() == [[12], [13], [14]] and got_logp[:, 0].tolist() == pytest.approx([-0.2, -0.3, -0.4])
    with pytest.raises(ValueError, match="5 rows for a 2\\+4-token sequence"):
        st.engine_rows(ids, logp, prompt_len=2, response_len=4)


def test_the_reference_forward_runs_on_every_core_and_gives_the_thread_count_back():
    """verl's task runner, a Ray actor that asks for no CPUs, starts with one thread; the frozen
    teacher's reference forward takes every core the process may use, then hands them back."""
    import os

    from scout.verl import self_test as st

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with st.every_core() as threads:
            assert threads == torch.get_num_threads() == len(os.sched_getaffinity(0))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_self_tests_reference_is_the_embedded_teachers_forward(world, tmp_path, monkeypatch):
    """The frozen teacher's reference (transformers, float32, the vocabulary in chunks) gives the
    log-probs of the embedded teacher's forward, at the engine's top-k ids and at the sampled
    tokens; an engine that answers with other numbers is stopped, naming both."""
    from scout.embedded import lm
    from scout.toy.world import build_model
    from scout.verl import self_test as st
    from tests.support.toy import TINY

    model, tok = build_model({**TINY, "hidden_size": 64}, world["root"] / "tokenizer", seed=5)
    model.save_pretrained(tmp_path / "teacher")
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "teacher", dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 90, (n,), generator=g).tolist() for n in (4, 9)]
    responses = [torch.randint(5, 90, (n,), generator=g).tolist() for n in (7, 3)]
    embedded = lm.load_model(tmp_path / "teacher", "cpu").eval()
    with torch.no_grad():
        logits, tokens, _ = lm.response_logits(embedded, prompts, responses, 0)
    full = torch.log_softmax(logits, dim=-1)
    top = full.topk(3, dim=-1)
    ids = [top.indices[i, : len(r)] for i, r in enumerate(responses)]
    monkeypatch.setattr(st, "CHUNK", 2)  # several chunks per response
    at_ids, sampled = st.hf_reference(hf, prompts, responses, ids)
    for i, r in enumerate(responses):
        assert torch.allclose(at_ids[i], top.values[i, : len(r)], atol=1e-5)
        assert torch.allclose(sampled[i], lm.token_logp(logits, tokens)[i, : len(r)], atol=1e-5)
    engine = [top.values[i, : len(r)] for i, r in enumerate(responses)]
    student = [s - 1.0 for s in sampled]  # a signal of 1 nat a token: the limit is 0.1
    masks = [torch.ones(len(r)) for r in responses]
    found = st.check(engine, at_ids, sampled, student, masks, "at step 1")
    assert found["teacher_selftest_diff"] < 1e-5 and found["teacher_selftest_signal"] == pytest.approx(1.0)
    hot = [e / 1.5 for e in engine]  # an engine that scores at temperature 1.5
    with pytest.raises(alg.TeacherSelfTestError, match="above the limit 0.1 "):
        st.check(hot, at_ids, sampled, student, masks, "at step 1")
