"""Behaviour read from text: reflection words per response, step verdicts, the teacher's probability
of reflecting after a step, and the claim built on it, against values worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from scout import behaviour, claims, results
from scout.generation import TransformersGenerator
from scout.grid import Grid
from scout.paths import Paths
from scout.verdicts import HOLDS, UNMEASURED
from tests.support.toy import toy_config


def test_reflection_words_are_counted_as_whole_words_in_every_case():
    assert behaviour.reflection_count("8+7=15\n\nWait, 8+7=15\n\nThe answer is \\boxed{15}.") == 1
    # Relay-OPD's list with its case variants; words inside other words do not count
    assert behaviour.reflection_count("Hmm. But wait: HOWEVER, actually... Waiting, rebut, hmmm") == 5
    assert behaviour.reflection_count("") == 0


def test_a_runs_behaviour_by_hand():
    samples = [
        {"response": "Wait, 1+1=2 Wait", "correct": True},  # 2 words, right
        {"response": "1+1=2", "correct": True},  # none, right
        {"response": "1+1=3 Hmm", "correct": False},  # 1 word, wrong
        {"response": "1+1=3", "correct": False},  # none, wrong
    ]
    got = behaviour.run_behaviour(samples)
    assert got["responses"] == 4 and got["reflections_per_response"] == 0.75 and got["with_reflection"] == 0.5
    assert got["accuracy"] == 0.5 and got["accuracy_with"] == 0.5 and got["accuracy_without"] == 0.5
    none = behaviour.run_behaviour([{"response": "1+1=2", "correct": True}])
    assert none["accuracy_without"] == 1.0 and none["accuracy_with"] != none["accuracy_with"]  # NaN: no reflection


def test_toy_steps_are_judged_against_the_problems_worked_path():
    # 8+7-3-1: the worked steps are 8+7=15, 15-3=12, 12-1=11
    paragraphs = ["8+7=15", "Wait, 8+7=15", "15-3=13", "13-1=12", "12-1=11", "The answer is \\boxed{11}."]
    assert behaviour.toy_step_verdicts("Compute 8+7-3-1.", paragraphs) == [True, None, False, False, True, None]
    assert behaviour.toy_step_verdicts("Write f(x) that adds 3.", paragraphs) is None


def test_boundaries_and_reflection_points_by_hand():
    pieces = ["8", "+", "7", "=", "15", "\n\n", "15", "-", "3", "=", "13", "\n\n", "The", " answer"]
    assert behaviour.boundaries(pieces) == [(6, 0), (12, 1)]
    # toy math: the first step is right, the second wrong; the answer line is not a step
    assert behaviour.reflection_points(pieces, "Compute 8+7-3.", correct=False) == [
        (6, 0, "right", "step"), (12, 1, "wrong", "step")]  # fmt: skip
    # a prompt whose steps cannot be judged: every boundary takes the response's verdict
    assert behaviour.reflection_points(pieces, "Solve it.", correct=True) == [
        (6, 0, "right", "response"), (12, 1, "right", "response")]  # fmt: skip


def test_next_token_mass_is_the_softmax_mass_of_the_tokens(world):
    engine = TransformersGenerator(world["teacher"], device="cpu")
    prompts, responses = [[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15]]
    got = engine.next_token_mass(prompts, responses, [[0, 3], [1]], [20, 22])
    with torch.no_grad():
        for i, (p, r, at) in enumerate(zip(prompts, responses, [[0, 3], [1]], strict=True)):
            logits = engine.model(torch.tensor([p + r]), torch.arange(len(p + r))[None], None)[0]
            probs = torch.softmax(logits.float(), -1)
            for j, k in enumerate(at):  # the token at response position k is predicted at p + k - 1
                want = float(probs[len(p) + k - 1, [20, 22]].sum())
                assert got[i][j] == pytest.approx(want, rel=1e-5)


def _reflection_csv(cfg, setting, rows):
    d = Path(cfg["results"]) / "analysis" / setting
    d.mkdir(parents=True, exist_ok=True)
    cols = ["teacher", "seed", "question", "after", "p_reflect"]
    df = pd.DataFrame(rows, columns=cols).assign(setting=setting, response=0, paragraph=0, judged="step")
    df[behaviour.REFLECTION_COLUMNS].to_csv(d / "reflection.csv", index=False)


def test_the_reflection_claim_by_hand(tmp_path):
    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    s = "toy-l-s-math"
    rows = []
    for i in range(10):
        q = f"q{i}"
        # initial teacher: 0.2 after right steps, 0.4 after wrong ones (selectivity 0.2)
        rows += [("initial", 0, q, "right", 0.2), ("initial", 0, q, "wrong", 0.4)]
        # trained teachers: 0.3 after right, 0.65 or 0.75 after wrong (selectivity 0.35 and 0.45): +15
        # and +25 points, +20 on average, se sqrt(50 / 2) = 5 over the two (every question alike)
        for seed, wrong in ((1, 0.65), (2, 0.75)):
            rows += [("scout", seed, q, "right", 0.3), ("scout", seed, q, "wrong", wrong)]
    _reflection_csv(cfg, s, rows)
    cache = results.Cache(Grid.of(cfg), results.load(Grid.of(cfg)))
    found = claims.all_claims(cache, Path(cfg["results"]) / "analysis", 0.1)
    (c,) = [c for c in found if c.id == "teacher_reflects_where_wrong" and c.setting == s]
    assert c.effect == pytest.approx(20.0) and c.se == pytest.approx(5.0) and c.df == pytest.approx(1.0)
    assert c.verdict == HOLDS and "initial 20.0 / 40.0, SCOUT 30.0 / 70.0" in c.statistic
    # two teachers that agree to the last digit leave the error unknown: not a certain gain
    _reflection_csv(cfg, s, [r if r[0] != "scout" or r[3] == "right" else (*r[:4], 0.7) for r in rows])
    found = claims.all_claims(results.Cache(Grid.of(cfg), results.load(Grid.of(cfg))), Path(cfg["results"]) / "analysis", 0.1)
    (c,) = [c for c in found if c.id == "teacher_reflects_where_wrong" and c.setting == s]
    assert c.effect == pytest.approx(20.0) and c.se == 0 and c.verdict == UNMEASURED
    assert c.why.startswith("no spread: every trained teacher gives the same difference (+20.0)")
    (other,) = [c for c in found if c.id == "teacher_reflects_where_wrong" and c.setting == "toy-mg-s-math"]
    assert other.verdict == UNMEASURED


def test_the_summary_has_each_runs_behaviour(tmp_path):
    """The summary's behaviour.csv (the report writes it): a run's reflection words and accuracy
    with and without them, from the generations beside its record."""
    from scout.aggregate import summarize
    from scout.results import records_frame

    out = tmp_path / "eval" / "toy-l-s-math" / "opd" / "s1" / "final"
    out.mkdir(parents=True)
    rec = {"setting": "toy-l-s-math", "variant": "opd", "method": "opd", "seed": 1, "checkpoint": "final",
           "benchmark": "tm-easy", "mean": 0.5, "sem": 0.1, "repeats": 2, "rows": 1}  # fmt: skip
    (out / "tm-easy.json").write_text(json.dumps(rec))
    gens = [{"id": "q", "repeat": 0, "response": "Wait, 1+1=2", "correct": False},
            {"id": "q", "repeat": 1, "response": "1+1=2", "correct": True}]  # fmt: skip
    (out / "tm-easy.generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    summarize(Paths(str(tmp_path), "toy", {}), records_frame([out / "tm-easy.json"], "eval"), tmp_path / "summary")
    b = pd.read_csv(tmp_path / "summary" / "behaviour.csv")
    assert b.loc[0, "reflections_per_response"] == 0.5 and b.loc[0, "accuracy_with"] == 0.0
    assert b.loc[0, "accuracy_without"] == 1.0
