"""Evaluation records: avg@k, SEM over repeats, raw generations, determinism; aggregation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from scout import config as scout_config
from scout import jobs, results
from scout.aggregate import per_method, per_run, summarize
from scout.catalogue import DataError
from scout.cli import main
from scout.embedded import lm
from scout.evaluate import evaluate, make_record, regrade
from scout.generation import make_generator, vllm_requests
from scout.grid import Grid
from scout.paths import Paths


def test_record_by_hand():
    # 3 rows x 2 repeats: repeat 0 -> 2/3 correct, repeat 1 -> 1/3
    rec = make_record("b", "m", [[True, False], [True, True], [False, False]])
    assert rec["accuracies"] == pytest.approx([2 / 3, 1 / 3])
    assert rec["mean"] == pytest.approx(0.5)
    # sd(ddof=1) of [2/3, 1/3] = 0.2357; / sqrt(2) = 1/6
    assert rec["sem"] == pytest.approx(1 / 6)
    assert (rec["rows"], rec["repeats"]) == (3, 2)


def _spec(world, **extra):
    cfg = world["config"]
    benches = {b: {**cfg["benchmarks"][b], "path": str(world["data"] / f"{b}.jsonl")} for b in ("tm-easy", "tc-easy")}
    return {
        "model": world["teacher"],
        "seed": 3,
        "setting": "s",
        "variant": "opd",
        "method": "opd",
        "checkpoint": "final",
        "benchmarks": benches,
        "sampling": {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 16},
        **extra,
    }


def test_evaluation_writes_records_and_generations_and_is_deterministic(world, tmp_path):
    a = evaluate(_spec(world), tmp_path / "a", log=lambda _: None)
    b = evaluate(_spec(world), tmp_path / "b", log=lambda _: None)
    assert a == b
    rec = json.loads((tmp_path / "a" / "tm-easy.json").read_text())
    assert len(rec["accuracies"]) == rec["repeats"] == 2
    assert (rec["setting"], rec["variant"], rec["checkpoint"]) == ("s", "opd", "final")
    gens = [json.loads(x) for x in (tmp_path / "a" / "tc-easy.generations.jsonl").read_text().splitlines()]
    assert len(gens) == rec["rows"] * rec["repeats"]
    assert {"id", "repeat", "response", "correct"} <= set(gens[0])
    assert (tmp_path / "a" / "tm-easy.generations.jsonl").read_text() == (
        tmp_path / "b" / "tm-easy.generations.jsonl"
    ).read_text()


def test_evaluation_refuses_a_benchmark_with_the_wrong_row_count(world, tmp_path):
    spec = _spec(world)
    spec["benchmarks"]["tm-easy"]["rows"] = 999
    with pytest.raises(ValueError, match="has 4 rows, expected 999"):
        evaluate(spec, tmp_path, log=lambda _: None)


def _records(tmp_path):
    paths = []
    for seed, (b1, b2) in {1: (0.2, 0.4), 2: (0.4, 0.8)}.items():
        for bench, mean in (("x", b1), ("y", b2)):
            p = tmp_path / f"{seed}-{bench}.json"
            p.write_text(
                json.dumps(
                    {
                        "setting": "s",
                        "variant": "opd",
                        "method": "opd",
                        "seed": seed,
                        "checkpoint": "final",
                        "benchmark": bench,
                        "mean": mean,
                        "sem": 0.01,
                        "repeats": 4,
                        "rows": 10,
                    }
                )
            )
            paths.append(p)
    return paths


def test_aggregation_by_hand(tmp_path):
    records = results.records_frame(_records(tmp_path), "eval")
    runs, methods = summarize(Paths(str(tmp_path), "toy", {}), records, tmp_path / "out")
    avg = runs[runs.benchmark == "avg"].set_index("seed")["mean"]
    assert avg.to_dict() == pytest.approx({1: 0.3, 2: 0.6})
    m = methods.set_index("benchmark")
    assert m.loc["avg", "mean"] == pytest.approx(0.45)
    assert m.loc["avg", "sd"] == pytest.approx(0.212132, abs=1e-5)  # sd(ddof=1) of [0.3, 0.6]
    assert m.loc["x", "runs"] == 2
    assert (tmp_path / "out" / "runs.csv").exists()
    assert pd.read_csv(tmp_path / "out" / "methods.csv").shape[0] == 3


def test_aggregation_refuses_non_records(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"benchmark": "x"}))
    with pytest.raises(ValueError, match="not an evaluation record"):
        results.records_frame([p], "eval")


def test_per_method_uses_sample_sd_and_counts_runs():
    runs = per_run(
        pd.DataFrame(
            [
                {
                    "setting": "s",
                    "variant": "v",
                    "method": "m",
                    "seed": s,
                    "checkpoint": "final",
                    "benchmark": "b",
                    "mean": v,
                    "sem": 0.0,
                    "repeats": 1,
                    "rows": 1,
                }
                for s, v in ((1, 0.1), (2, 0.2), (3, 0.6))
            ]
        )
    )
    out = per_method(runs).set_index("benchmark")
    assert out.loc["b", "sd"] == pytest.approx(0.264575, abs=1e-5)
    assert out.loc["b", "runs"] == 3


def test_a_run_missing_a_benchmark_has_no_average_in_the_summaries():
    """Seed 2 lacks benchmark b: its Avg would be a's alone (0.60) if averaged over what it has; as
    in the tables, it has none, and the method's Avg is seed 1's (0.40 over 1 run), not 0.50 over 2."""
    rows = [("a", 1, 0.30), ("b", 1, 0.50), ("a", 2, 0.60)]
    records = pd.DataFrame(
        [{"setting": "s", "variant": "v", "method": "m", "seed": seed, "checkpoint": "final", "benchmark": b,
          "mean": v, "sem": 0.01, "repeats": 1, "rows": 1} for b, seed, v in rows]  # fmt: skip
    )
    runs = per_run(records)
    avg = runs[runs.benchmark == "avg"].set_index("seed")
    assert avg.loc[1, "mean"] == pytest.approx(0.40) and pd.isna(avg.loc[2, "mean"]) and pd.isna(avg.loc[2, "sem"])
    out = per_method(runs).set_index("benchmark")
    assert out.loc["avg", "mean"] == pytest.approx(0.40) and out.loc["avg", "runs"] == 1
    assert out.loc["a", "runs"] == 2 and out.loc["a", "mean"] == pytest.approx(0.45)
    # benchmark c has no record at all (an import of two of three): no run has the grid's average
    grid_avg = per_run(records, {"s": 3})
    assert grid_avg[grid_avg.benchmark == "avg"]["mean"].isna().all()
    assert per_run(records, {"s": 2}).equals(runs)


QWEN3_LIKE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
)


def test_vllm_requests_carry_all_samples_and_the_chat_options(world):
    tok = lm.load_tokenizer(world["student"])
    tok.chat_template = QWEN3_LIKE
    prompts = [
        "Compute 1+2.",
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 3+4."}],
    ]
    sampling = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 16384}
    reqs = vllm_requests(tok, prompts, 4, sampling, seed=100, chat={"enable_thinking": False})
    assert len(reqs) == 2  # one request per prompt, all k samples in it
    assert [r["sampling"] for r in reqs] == [
        {"n": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 16384, "seed": 100},
        {"n": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 16384, "seed": 104},
    ]
    rendered = "<|system|>Be brief.\n<|user|>Compute 3+4.\n<|assistant|><think>\n\n</think>\n\n"
    assert reqs[1]["prompt_token_ids"] == tok.encode(rendered, add_special_tokens=False)
    # the transformers engine renders the very same ids
    assert reqs[0]["prompt_token_ids"] == lm.prompt_ids(tok, prompts[0], {"enable_thinking": False})
    thinking = vllm_requests(tok, prompts[:1], 1, sampling, seed=0)[0]["prompt_token_ids"]
    assert thinking == tok.encode("<|user|>Compute 1+2.\n<|assistant|>", add_special_tokens=False)


def test_vllm_engine_needs_the_gpu_extra():
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit, match="needs a GPU node with the gpu extra"):
            make_generator("any-model", "vllm")
    with pytest.raises(ValueError, match="unknown generation engine 'tgi'"):
        make_generator("any-model", "tgi")


def test_a_vllm_sample_stopped_by_its_end_token_leaves_the_token_out():
    """vLLM keeps the end-of-sequence token in a stopped sample's ids; the transformers engine and
    ``Completion`` do not (the continuation probe decodes and counts them)."""
    from types import SimpleNamespace as Out

    from scout.generation import Completion, _completion

    assert _completion(Out(text="12", finish_reason="stop", stop_reason=None, token_ids=[5, 6, 1])) == Completion(
        "12", "stop", (5, 6)
    )
    assert _completion(Out(text="123", finish_reason="length", stop_reason=None, token_ids=[5, 6, 7])).token_ids == (5, 6, 7)
    # a stop string ends the text but is no end-of-sequence token: the ids stay as vLLM gives them
    assert _completion(Out(text="1", finish_reason="stop", stop_reason="\n\n", token_ids=[5, 9])).token_ids == (5, 9)
    assert _completion(Out(text="", finish_reason="stop", stop_reason=None, token_ids=[])).token_ids == ()


def test_paper_eval_spec_uses_vllm_and_non_thinking_qwen3():
    cfg = scout_config.load("config/paper.yaml")
    spec = jobs.eval_spec(Grid.of(cfg), "q4b-q1.7b-math", "scout", 1, "final")
    assert spec["engine"] == "vllm" and spec["chat"] == {"enable_thinking": False}
    assert spec["sampling"] == {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 16384}
    assert jobs.eval_spec(Grid.of(cfg), "sky7b-ds1.5b-math", "opd", 1, "final")["chat"] == {}
    assert jobs.eval_spec(Grid.of(cfg), "q4b-q1.7b-math", "base-teacher", 0, "final")["chat"] == {}


def test_scout_grade_regrades_saved_generations(world, tmp_path, capsys):
    out = tmp_path / "e"
    rec = evaluate(_spec(world), out, log=lambda _: None)["tm-easy"]
    gens_path = out / "tm-easy.generations.jsonl"
    rows = [json.loads(x) for x in (world["data"] / "tm-easy.jsonl").read_text().splitlines()]
    gens = [json.loads(x) for x in gens_path.read_text().splitlines()]
    # an untrained model is always wrong: make every repeat-0 sample right by hand
    answers = {r["id"]: r["answer"] for r in rows}
    for g in gens:
        if g["repeat"] == 0:
            g["response"] = f"so \\boxed{{{answers[g['id']]}}}"
    gens_path.write_text("".join(json.dumps(g) + "\n" for g in gens))
    assert main(["grade", str(gens_path), "--data", str(world["data"] / "tm-easy.jsonl")]) == 0
    new = json.loads((out / "tm-easy.json").read_text())
    assert new["accuracies"][0] == 1.0 and new["accuracies"][1:] == rec["accuracies"][1:]
    assert (new["setting"], new["variant"], new["model"], new["repeats"]) == ("s", "opd", rec["model"], 2)
    regraded = [json.loads(x) for x in gens_path.read_text().splitlines()]
    assert [g["correct"] for g in regraded if g["repeat"] == 0] == [True] * len(rows)
    assert "tm-easy: regraded" in capsys.readouterr().out
    # generations that do not cover the data are refused with the reason
    gens_path.write_text("".join(json.dumps(g) + "\n" for g in gens[2:]))
    with pytest.raises(DataError, match="no samples for 1 row"):
        regrade(world["data"] / "tm-easy.jsonl", gens_path)
    with pytest.raises(SystemExit, match="scout grade: .*expected a file named BENCHMARK.generations.jsonl"):
        main(["grade", str(out / "tm-easy.json"), "--data", str(world["data"] / "tm-easy.jsonl")])
