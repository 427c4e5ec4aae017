"""scout preflight on a toy world configured for verl: every check through the installed verl on CPU,
and each refusal named with its cell."""

from __future__ import annotations

import copy

import pytest
import yaml

from scout.grid import Grid
from scout.paths import Paths
from scout.toy.world import build_model
from tests.support.toy import REPO, TINY

verl_checks = pytest.importorskip("scout.verl.preflight", reason="needs verl (pip install '.[verl]')")
from scout import preflight  # noqa: E402  (after the skip: the verl backend's checks need verl)


@pytest.fixture(scope="module")
def verl_toy(world):
    """The mini toy world with backend verl on one 4-GPU node of 24 GB (config/verl-smoke.yaml)."""
    cfg = copy.deepcopy(world["config"])
    cfg |= yaml.safe_load((REPO / "config" / "verl-smoke.yaml").read_text())
    cfg["resources"]["default"]["gpu_mem_gb"] = 24
    res = Paths.of(cfg).model("toy-small").rsplit("/", 1)[0]
    for name, hidden in (("toy-small", 32), ("toy-large", 48), ("toy-medium", 32)):
        model, tok = build_model({**TINY, "hidden_size": hidden}, world["root"] / "tokenizer", seed=hidden)
        model.save_pretrained(f"{res}/{name}")
        tok.save_pretrained(f"{res}/{name}")
    return cfg


def cells(cfg, *variants):
    return [Grid.of(cfg).find("toy-l-s-math", v, 1) for v in variants]


def test_the_toy_cells_pass_and_the_first_prompt_is_shown(verl_toy):
    said = []
    rows = preflight.run(Grid.of(
        verl_toy), log=said.append, cells=cells(verl_toy, "opd", "scout", "prune_opd", "relay_opd")
    ).cells
    assert [r.problems for r in rows] == [[], [], [], []]
    scout = rows[1].checks
    assert scout["weight sync"] == "nccl -> nccl" and scout["log-probs"] == "on (single_turn_agent)"
    assert scout["teacher batch"] == "8 continuations over 1 GPUs"  # the mini world's 4 prompts x K=2
    assert rows[3].checks["log-probs"] == "off (scout_relay)"
    assert scout["teacher engine KV"].startswith("KV 0.0 GiB for")
    assert scout["teacher engine prefill"].startswith("prefill logits") and "student rollout prefill" not in scout
    assert rows[3].checks["student rollout prefill"].startswith("prefill logits 0.0 GiB for 4096 tokens")
    assert any(line.startswith("first prompt of math-train as verl renders it") and "Compute" in line for line in said)
    table = preflight.table(rows)
    assert "toy-l-s-math/scout/s1" in table and "FAIL" not in table
    # the teacher-student pair: toy-large scores toy-small's prompts, read from the training data
    (pair,) = preflight.run(Grid.of(verl_toy), log=said.append, cells=cells(verl_toy, "opd", "scout")).pairs
    assert pair.name == "toy-l-s-math: toy-large scores toy-small" and pair.verdict == "passes"
    assert pair.checks["decoding"] == "4 rendered prompts decode to the same text"
    assert pair.checks["template"] == "the same rendering of 4 prompts"


def test_refusals_name_the_cell_and_the_reason(verl_toy, tmp_path):
    cfg = copy.deepcopy(verl_toy)
    cfg["resources"]["default"]["gpu_mem_gb"] = 1e-6  # no room for even the weights
    cfg["training"]["steps"] = 10**6  # more steps than verl's dataloader has batches
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "opd")).cells[0]
    assert any(p.startswith("student rollout KV: KV") for p in row.problems)
    assert any(p.startswith("steps: verl's dataloader runs") and "the plan has 1000000" in p for p in row.problems)
    cfg = copy.deepcopy(verl_toy)
    cfg["results"] = str(tmp_path / "elsewhere")  # nothing prepared there
    found = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "opd"))
    assert any("is not prepared" in p for p in found.cells[0].problems)
    # models that cannot be read (not downloaded, no hub): FAIL rows, not a traceback
    (pair,) = found.pairs
    assert pair.verdict == "refused" and pair.problems[0].startswith("tokenizers: cannot load the tokenizer of ")


def test_kv_cache_arithmetic_by_hand():
    # Qwen3-4B's shape: 36 layers x 8 KV heads x head_dim 128, K and V in bf16 = 147,456 bytes a token
    qwen3_4b = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "hidden_size": 2560, "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True}  # fmt: skip
    assert verl_checks.kv_bytes_per_token(qwen3_4b) == 2 * 36 * 8 * 128 * 2
    # its full 262,144-token context needs 36 GiB of KV: not on a 40 GB GPU at 0.5, fine at 17,409 tokens
    assert not verl_checks.kv_fit(qwen3_4b, 262_144, 40, 0.5, 1)[0]
    assert verl_checks.kv_fit(qwen3_4b, 17_409, 40, 0.85, 1)[0]
    assert verl_checks.steps_per_epoch(45_883, 128) == 358


def test_prefill_logits_arithmetic_by_hand():
    """A prompt-log-prob prefill of 8,192 tokens over Qwen3's 151,936-token vocabulary holds
    8192 x 151936 x 6 bytes = 6.96 GiB of logits, outside vLLM's share of the GPU."""
    fits, text = verl_checks.prefill_logits_fit(8192, 151_936, 40, 0.5)
    assert fits and text == "prefill logits 7.0 GiB for 8192 tokens, 20.0 GiB outside vLLM"
    assert not verl_checks.prefill_logits_fit(8192, 151_936, 40, 0.9)[0]  # 4 GiB outside vLLM
    assert verl_checks.prefill_logits_fit(4096, 151_936, 40, 0.9)[0]  # 3.48 GiB: fits
    assert not verl_checks.prefill_logits_fit(4096, 151_936, 40, 0.9, resident_bytes=2**30)[0]  # beside 1 GiB more


def _with_lora(cfg: dict) -> dict:
    """A copy with experiment lora: SCOUT with a rank-4 LoRA teacher on toy-l-s-math, one seed."""
    cfg = copy.deepcopy(cfg)
    cfg["experiments"]["lora"] = {"settings": ["toy-l-s-math"], "seeds": [1],
                                  "methods": [{"name": "scout-lora", "method": "scout", "teacher_lora_rank": 4}]}  # fmt: skip
    return cfg


def test_the_teacher_trainer_check_covers_full_and_lora_teachers(verl_toy):
    """SCOUT's teacher trainer on its pool (a quarter of the 4-GPU node): a full teacher's state and
    a LoRA one's, each with a micro-batch's activations, against the GPU; too small a GPU fails."""
    cfg = _with_lora(verl_toy)
    full, lora = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout", "scout-lora")).cells
    assert full.checks["teacher trainer"].startswith("full teacher on its own 1 GPUs: state")
    assert lora.checks["teacher trainer"].startswith("LoRA r4 teacher on its own 1 GPUs: state")
    assert "teacher host memory" not in full.checks  # its own pool: nothing waits in host memory
    state = {r: float(r_.checks["teacher trainer"].split("state ")[1].split(" ")[0]) for r, r_ in (("f", full), ("l", lora))}
    assert state["l"] < state["f"]
    cfg["resources"]["default"]["gpu_mem_gb"] = 1e-9
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout-lora")).cells[0]
    assert any(p.startswith("teacher trainer: LoRA r4 teacher") for p in row.problems)


def test_a_teacher_batch_that_does_not_split_over_the_trainers_gpus_is_refused(verl_toy):
    """A teacher phase's batch x K continuations go to the trainer's ranks in one update, unpadded:
    the mini world's 8 over 3 GPUs would stop the job at its first phase."""
    cfg = copy.deepcopy(verl_toy)
    cfg["resources"]["train"] = {"methods": {"scout": {"nodes": 3, "gpus_per_node": 3}}}
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout")).cells[0]
    assert "teacher batch: 8 continuations (batch x K) do not split over the teacher trainer's 3 GPUs" in row.problems
    cfg["resources"]["train"]["methods"]["scout"]["gpus_per_node"] = 4
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout")).cells[0]
    assert row.checks["teacher batch"] == "8 continuations over 4 GPUs"


def test_an_unreachable_hub_turns_lookups_offline(monkeypatch):
    """Without the hub, a model named by id fails at once rather than after the hub's retries."""
    from scout.commands import offline_unless_hub_reachable

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    said = []
    assert offline_unless_hub_reachable(log=said.append, timeout=1.0)
    assert __import__("os").environ["HF_HUB_OFFLINE"] == "1" and "hub.invalid cannot be reached" in said[0]
    said.clear()
    assert offline_unless_hub_reachable(log=said.append) and said == []  # already offline: nothing to say


def test_a_shared_teacher_trainer_is_checked_on_the_engines_gpus_and_in_host_memory(verl_toy):
    """The trainer on the engine's GPUs (half the 4-GPU node, OPD's placement): its state and
    activations against the GPU, and its offloaded state beside the sleeping engine's weights
    against the node's memory; too little host memory fails, naming the check."""
    cfg = _with_lora(verl_toy)
    cfg["resources"]["train"] = {"methods": {"scout-lora": {"teacher_trainer": "shared"}}}
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout-lora")).cells[0]
    assert row.problems == []
    assert row.checks["teacher trainer"].startswith("LoRA r4 teacher on the engine's 2 GPUs: state")
    assert row.checks["teacher host memory"].startswith("LoRA r4 teacher state")
    assert row.checks["weight sync"] == "gloo -> gloo"
    cfg["resources"]["train"]["methods"]["scout-lora"]["mem_mb"] = 1e-6
    row = preflight.run(Grid.of(cfg), log=lambda m: None, cells=cells(cfg, "scout-lora")).cells[0]
    assert [p.split(":")[0] for p in row.problems] == ["teacher host memory"]


def test_a_backend_that_checks_no_cells_says_so_before_resolving_any():
    """The toy world's embedded backend has no preflight: the command says so, even where no toy
    model has been built yet (nothing is resolved first)."""
    from scout.cli import main

    with pytest.raises(SystemExit, match="the embedded backend needs no preflight"):
        main(["preflight", "--configfile", str(REPO / "config" / "config.yaml"), "--config", "results=/nonexistent"])


def test_a_hub_that_names_a_missing_local_folder_is_said_to_be_one():
    """models.X.hub: /nonexistent/Qwen3-1.7B reached transformers as a hub id: "Repo id must be in
    the form 'repo_name' or 'namespace/repo_name'", which does not say the folder is missing."""
    for load in (verl_checks._model_config, verl_checks._tokenizer):
        with pytest.raises(OSError, match=r"no folder at /nonexistent/Qwen3-1.7B \(a local path; a hub id has"):
            load("/nonexistent/Qwen3-1.7B")
