"""Data preparation from a local mirror that the tests write in each source's own layout and
schema, with the paper config's expected row counts and filters."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scout import config as scout_config
from scout import grid, jobs
from scout.catalogue import DataError
from scout.cli import main
from scout.grid import Grid
from scout.paths import Paths
from scout.prepare import load_rows, prepare
from scout.toy.world import build_tokenizer_files

PAPER = Path(__file__).resolve().parents[2] / "config" / "paper.yaml"


def write_parquet(repo: Path, splits: dict[tuple[str | None, str], list[dict]]) -> None:
    """A repository snapshot as the Hub stores it: parquet shards plus README configs."""
    configs: dict[str, list[dict]] = {}
    for (cfg, split), rows in splits.items():
        folder = cfg or "data"
        (repo / folder).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(repo / folder / f"{split}-00000-of-00001.parquet")
        configs.setdefault(cfg or "default", []).append({"split": split, "path": f"{folder}/{split}-*"})
    card = {"configs": [{"config_name": c, "data_files": files} for c, files in configs.items()]}
    (repo / "README.md").write_text("---\n" + yaml.safe_dump(card) + "---\n")


def lcb_row(i: int) -> dict:
    functional = i % 3 == 0
    cases = [
        {
            "input": "[1]\n2" if functional else "1 2\n",
            "output": "3",
            "testtype": "functional" if functional else "stdin",
        }
    ]
    return {
        "question_title": f"q{i}",
        "question_content": "Add the numbers.",
        "platform": "leetcode" if functional else "atcoder",
        "question_id": str(i),
        "contest_id": "c",
        "contest_date": "2024-01-01T00:00:00",
        "starter_code": "class Solution:\n    def add(self, a, b):\n        " if functional else "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(cases),
        "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode(),
        "metadata": json.dumps({"func_name": "add"} if functional else {}),
    }


def olympiad_row(i: int) -> dict:
    multiple = i % 7 == 0 and i < 7 * 93  # 93 multiple-answer items: 674 - 93 = 581 kept
    return {
        "id": 1600 + i,
        "question": f"Find x_{i}.",
        "solution": ["..."],
        "final_answer": ["$1, 2$" if multiple else f"${i}$"],
        "context": None,
        "is_multiple_answer": multiple,
        "unit": None,
        "answer_type": "Numerical",
    }


def mbpp_row(i: int) -> dict:
    return {
        "task_id": i,
        "text": f"Write f{i}.",
        "code": "",
        "test_list": [f"assert f{i}() == {i}"],
        "test_setup_code": "",
        "challenge_test_list": [],
    }


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    m = tmp_path_factory.mktemp("mirror")
    write_parquet(
        m / "HuggingFaceH4/aime_2024",
        {
            (None, "train"): [
                {"id": 60 + i, "problem": f"P{i}", "solution": "", "answer": str(i), "url": "", "year": "2024"}
                for i in range(30)
            ]
        },
    )
    write_parquet(
        m / "yentinglin/aime_2025",
        {
            (None, "train"): [
                {"id": i, "problem": f"P{i}", "answer": str(i), "solution": "", "url": "", "year": "2025"}
                for i in range(30)
            ]
        },
    )
    write_parquet(
        m / "math-ai/amc23",
        {(None, "test"): [{"id": i, "question": f"Q{i}", "answer": float(i), "url": ""} for i in range(40)]},
    )
    write_parquet(
        m / "MathArena/hmmt_feb_2025",
        {
            (None, "train"): [
                {"problem_idx": i + 1, "problem": f"P{i}", "answer": "\\frac{1}{2}", "problem_type": ["Algebra"]}
                for i in range(30)
            ]
        },
    )
    write_parquet(
        m / "Hothan/OlympiadBench",
        {
            ("OE_TO_maths_en_COMP", "train"): [olympiad_row(i) for i in range(674)],
            ("OE_TO_physics_en_COMP", "train"): [olympiad_row(0)],
        },
    )
    write_parquet(
        m / "HuggingFaceH4/MATH-500",
        {
            (None, "test"): [
                {
                    "problem": f"P{i}",
                    "solution": "",
                    "answer": "2",
                    "subject": "Algebra",
                    "level": 1,
                    "unique_id": f"test/algebra/{i}.json",
                }
                for i in range(500)
            ]
        },
    )
    lcb = m / "livecodebench/code_generation_lite"
    lcb.mkdir(parents=True)
    start = 0
    for name, n in [
        ("test.jsonl", 400),
        ("test2.jsonl", 111),
        ("test3.jsonl", 101),
        ("test4.jsonl", 101),
        ("test5.jsonl", 167),
        ("test6.jsonl", 175),
    ]:
        (lcb / name).write_text("".join(json.dumps(lcb_row(i)) + "\n" for i in range(start, start + n)))
        start += n
    evalplus_test = (  # evalplus's layout: literal inputs and results, compared by its assertion
        "def assertion(out, exp, atol):\n    assert out == exp\n\n"
        "def check(candidate):\n    inputs = [[]]\n    results = [None]\n"
        "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n"
    )
    he = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f"def f{i}():\n",
            "canonical_solution": "",
            "entry_point": f"f{i}",
            # the last task's inputs are not literals: it cannot be graded by values and is refused
            "test": evalplus_test if i < 163 else "def check(c):\n    inputs = [[float('nan')]]\n",
        }
        for i in range(164)
    ]
    write_parquet(m / "evalplus/humanevalplus", {(None, "test"): he})
    write_parquet(
        m / "google-research-datasets/mbpp",
        {
            ("full", "train"): [mbpp_row(i) for i in range(601, 975)],
            ("full", "test"): [mbpp_row(i) for i in range(11, 511)],
            ("sanitized", "test"): [mbpp_row(1)],
        },
    )
    return m


def paper_spec(mirror: Path, name: str) -> dict:
    cfg = scout_config.load(PAPER)
    cfg["data"] = {"source": "mirror", "mirror": str(mirror)}
    return jobs.data_spec(Grid.of(scout_config.validate(cfg)), name)


@pytest.mark.parametrize(
    "name, first_id",
    [
        ("aime24", "aime24-60"),
        ("aime25", "aime25-0"),
        ("amc23", "amc23-0"),
        ("hmmt25", "hmmt25-1"),
        ("olympiad", "olympiad-1601"),
        ("math500", "test/algebra/0.json"),
        ("lcb_v5", "lcb-0"),
        ("humaneval_plus", "HumanEval/0"),
        ("mbpp", "mbpp-11"),
    ],
)
def test_every_paper_benchmark_prepares_with_its_expected_rows(mirror, tmp_path, name, first_id):
    spec = paper_spec(mirror, name)
    out = tmp_path / f"{name}.jsonl"
    n = prepare(spec, out, log=lambda _: None)
    rows = load_rows(out, spec["rows"], name)
    refused = out.with_suffix(".refused.json")
    n_refused = len(json.loads(refused.read_text())) if refused.exists() else 0
    assert n + n_refused == spec["rows"] and n == len(rows)
    assert rows[0]["id"] == first_id and rows[0]["domain"] == spec["domain"]


def test_unconvertible_rows_are_refused_and_listed(mirror, tmp_path):
    """HumanEval+'s last mirror task has non-literal inputs: refused at preparation, named in the log
    and beside the data, and counted as expected by the row check and by the evaluation's load."""
    said = []
    out = tmp_path / "he.jsonl"
    assert prepare(paper_spec(mirror, "humaneval_plus"), out, log=said.append) == 163
    refused = json.loads((tmp_path / "he.refused.json").read_text())
    assert [r["id"] for r in refused] == ["HumanEval/163"] and "not literals" in refused[0]["reason"]
    assert any("refused row 163 (HumanEval/163)" in line for line in said)
    assert len(load_rows(out, 164, "humaneval_plus")) == 163
    row = load_rows(out)[0]
    assert row["tests"]["type"] == "calls" and row["tests"]["calls"] == ["f0(*[])"]
    assert "results = [None]" in row["tests"]["check"]["code"]  # the expected values stay outside


def he_mirror(root: Path, good: int, bad: int) -> Path:
    """A HumanEval+ snapshot whose last ``bad`` tasks have tests that cannot be graded by values."""
    test = "def check(candidate):\n    inputs = [[]]\n    results = [1]\n"
    rows = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f"def f{i}():\n",
            "canonical_solution": "",
            "entry_point": f"f{i}",
            "test": test if i < good else "def check(c):\n    inputs = [[float('nan')]]\n",
        }  # fmt: skip
        for i in range(good + bad)
    ]
    write_parquet(root / "evalplus" / "humanevalplus", {(None, "test"): rows})
    return root


def he_spec(mirror: Path, rows: int, **over) -> dict:
    return {"name": "humaneval_plus", "hub": "evalplus/humanevalplus", "split": "test", "rows": rows,
            "source": "mirror", "mirror": str(mirror), **over}  # fmt: skip


def test_a_preparation_that_keeps_no_rows_fails_naming_counts_and_reasons(tmp_path):
    """Every row refused (a source in another format): an error, and no empty file that would load."""
    spec = he_spec(he_mirror(tmp_path / "m", good=0, bad=3), 3)
    with pytest.raises(DataError, match=r"humaneval_plus: preparation from evalplus/humanevalplus keeps no rows "
                       r"\(0 kept, 3 refused, 0 filtered out, 0 duplicates\); first reasons refused: "
                       r"HumanEval/0: its inputs are not literals"):  # fmt: skip
        prepare(spec, tmp_path / "he.jsonl", log=lambda _: None)
    assert not (tmp_path / "he.jsonl").exists()


def test_a_preparation_refusing_more_than_its_share_fails_unless_allowed(tmp_path):
    mirror = he_mirror(tmp_path / "m", good=8, bad=2)
    with pytest.raises(DataError, match=r"refuses 2 of 10 rows, more than data.max_refused \(0.05\)"):
        prepare(he_spec(mirror, 10), tmp_path / "he.jsonl", log=lambda _: None)
    assert not (tmp_path / "he.jsonl").exists()
    assert prepare(he_spec(mirror, 10, max_refused=0.2), tmp_path / "he.jsonl", log=lambda _: None) == 8
    said = []
    assert len(load_rows(tmp_path / "he.jsonl", 10, "humaneval_plus", log=said.append)) == 8
    assert said == [f"humaneval_plus: 8 of 10 rows; 2 refused at preparation, listed in {tmp_path / 'he.refused.json'}"]


def test_max_refused_is_a_config_key_reaching_preparation():
    cfg = scout_config.load(PAPER)
    cfg["data"] = {"max_refused": 0.1}
    assert jobs.data_spec(Grid.of(scout_config.validate(cfg)), "humaneval_plus")["max_refused"] == 0.1
    cfg["data"] = {"max_refused": 2}
    with pytest.raises(Exception, match="max_refused"):
        scout_config.validate(cfg)


def test_an_empty_prepared_file_never_loads(tmp_path):
    (tmp_path / "he.jsonl").write_text("")
    (tmp_path / "he.refused.json").write_text(json.dumps([{"row": 0, "id": "x", "reason": "r"}]))
    with pytest.raises(DataError, match=r"he.jsonl: humaneval_plus holds no rows"):
        load_rows(tmp_path / "he.jsonl", 1, "humaneval_plus")


def test_benchmark_specifics(mirror, tmp_path):
    def rows(name):
        prepare(paper_spec(mirror, name), tmp_path / f"{name}.jsonl", log=lambda _: None)
        return load_rows(tmp_path / f"{name}.jsonl")

    assert [r["answer"] for r in rows("amc23")[:3]] == ["0", "1", "2"]  # floats from the hub become integers
    olympiad = rows("olympiad")
    assert all("," not in r["answer"] for r in olympiad) and olympiad[0]["answer"] == "1"  # $...$ stripped
    lcb = rows("lcb_v5")
    assert max(int(r["id"].split("-")[1]) for r in lcb) == 879  # release_v5: test6.jsonl is not read
    assert {r["tests"]["type"] for r in lcb} == {"stdin", "functional"}
    assert all(len(r["tests"]["cases"]) == 2 for r in lcb)  # public + private


def test_wrong_row_count_stops_naming_the_dataset(mirror, tmp_path):
    spec = paper_spec(mirror, "aime24") | {"rows": 31}
    with pytest.raises(DataError, match=r"aime24: 30 rows after filtering and deduplication, expected 31"):
        prepare(spec, tmp_path / "a.jsonl", log=lambda _: None)
    assert not (tmp_path / "a.jsonl").exists()


def one_row_amc23(mirror: Path) -> dict:
    return {
        "name": "amc23",
        "hub": "math-ai/amc23",
        "split": "test",
        "rows": 1,
        "source": "mirror",
        "mirror": str(mirror),
    }


def test_schema_drift_stops_naming_the_column(tmp_path):
    write_parquet(tmp_path / "m/math-ai/amc23", {(None, "test"): [{"id": 1, "problem": "Q", "answer": 1.0}]})
    spec = one_row_amc23(tmp_path / "m")
    with pytest.raises(
        DataError, match=r"amc23: source is missing column\(s\) question \(it has: answer, id, problem\)"
    ):
        prepare(spec, tmp_path / "a.jsonl", log=lambda _: None)


def test_bad_converted_row_and_missing_snapshot(tmp_path):
    write_parquet(tmp_path / "m/math-ai/amc23", {(None, "test"): [{"id": 1, "question": "Q", "answer": " "}]})
    spec = one_row_amc23(tmp_path / "m")
    with pytest.raises(DataError, match=r"amc23: converted row 0 \(amc23-1\): math row without an 'answer'"):
        prepare(spec, tmp_path / "a.jsonl", log=lambda _: None)
    with pytest.raises(DataError, match=r"math500: no snapshot of HuggingFaceH4/MATH-500 in the mirror"):
        prepare(spec | {"name": "math500", "hub": "HuggingFaceH4/MATH-500"}, tmp_path / "b.jsonl", log=lambda _: None)


def test_training_sets(tmp_path):
    system = {"role": "system", "content": "Reason step by step; put the answer in \\boxed{}."}
    openr1 = [
        {
            "data_source": "openr1",
            "prompt": [system, {"role": "user", "content": f"Q{i}"}],
            "reward_model": {"ground_truth": str(i), "style": "rule"},
        }
        for i in range(12)
    ]
    write_parquet(tmp_path / "m/Elliott/Openr1-Math-46k-8192", {(None, "train"): openr1})
    dapo_text = 'Solve the following math problem step by step. The last line of your response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\nRemember to put your answer on its own line after "Answer:".'
    dapo = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": dapo_text.format(f"Problem {i % 5}")}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(i % 5), "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": str(i)},
        }
        for i in range(20)
    ]
    write_parquet(tmp_path / "m/BytedTsinghua-SIA/DAPO-Math-17k", {(None, "train"): dapo})
    cfg = scout_config.load(PAPER)
    cfg["data"] = {"source": "mirror", "mirror": str(tmp_path / "m")}
    build_tokenizer_files(tmp_path / "tok")  # stands in for the students' tokenizers (no hub here)
    views = [{"tokenizer": str(tmp_path / "tok"), "chat": {}, "max_prompt_length": n} for n in (1024, 8)]
    spec = jobs.data_spec(Grid.of(cfg), "openr1-math-46k") | {"rows": 12, "views": views}
    prepare(spec, tmp_path / "o.jsonl", log=lambda _: None)
    rows = load_rows(tmp_path / "o.jsonl")
    assert rows[3]["prompt"][0] == system and rows[3]["answer"] == "3"
    # what verl will load of it per view: every prompt fits in 1024 tokens, none in 8
    meta = json.loads((tmp_path / "o.meta.json").read_text())
    assert meta == {"rows": 12, "kept": {grid.view_key(views[0]): 12, grid.view_key(views[1]): 0}}
    spec = jobs.data_spec(Grid.of(cfg), "dapo-math-17k") | {"rows": 5, "views": views}  # deduplicated on the problem text
    prepare(spec, tmp_path / "d.jsonl", log=lambda _: None)
    rows = load_rows(tmp_path / "d.jsonl")
    assert [r["answer"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert rows[2]["prompt"][-1]["content"].startswith("Problem 2\n\nPlease reason step by step")


def test_a_holdout_is_a_validation_slice_apart_from_training_and_test(tmp_path):
    """openr1 with ``holdout: 3``: the training file loses 3 rows, openr1-math-46k.holdout holds them,
    never a row whose prompt a test benchmark (a stand-in math500 file) also asks; the same 3 from
    every preparation. A tuned setting's config may then name it as its validation set."""
    openr1 = [{"data_source": "openr1", "prompt": [{"role": "user", "content": f"Q{i}"}],
               "reward_model": {"ground_truth": str(i), "style": "rule"}} for i in range(12)]  # fmt: skip
    write_parquet(tmp_path / "m/Elliott/Openr1-Math-46k-8192", {(None, "train"): openr1})
    cfg = scout_config.load(PAPER)
    cfg["data"] = {"source": "mirror", "mirror": str(tmp_path / "m")}
    cfg["datasets"]["openr1-math-46k"].update(rows=12, holdout=3)
    cfg["results"] = str(tmp_path / "results")
    test_file = Path(Paths.of(cfg).data("math500"))
    test_file.parent.mkdir(parents=True)
    test_file.write_text("".join(json.dumps({"id": f"t{i}", "prompt": [{"role": "user", "content": f"Q{i}"}],
                                             "answer": str(i), "domain": "math"}) + "\n" for i in range(6)))  # fmt: skip
    spec = {k: v for k, v in jobs.data_spec(Grid.of(cfg), "openr1-math-46k").items() if k != "views"}
    assert spec["tests"] == [Paths.of(cfg).data(b) for b in Grid.of(cfg).benchmarks_for("math")]
    spec["tests"] = [str(test_file)]
    said = []
    assert prepare(spec, tmp_path / "train.jsonl", log=said.append) == 9
    held_spec = jobs.data_spec(Grid.of(cfg), "openr1-math-46k.holdout") | {"tests": [str(test_file)]}
    assert held_spec["part"] == "holdout" and "views" not in held_spec
    assert prepare(held_spec, tmp_path / "val.jsonl", log=lambda _: None) == 3
    train, held = load_rows(tmp_path / "train.jsonl"), load_rows(tmp_path / "val.jsonl")
    asked = {r["prompt"][-1]["content"] for r in held}
    assert not asked & {f"Q{i}" for i in range(6)}  # no test prompt
    assert not asked & {r["prompt"][-1]["content"] for r in train} and len(train) + len(held) == 12
    assert any("3 rows held out for validation" in line for line in said)
    assert prepare(held_spec, tmp_path / "again.jsonl", log=lambda _: None) == 3
    assert load_rows(tmp_path / "again.jsonl") == held
    # the validation set a tuned setting names
    cfg = scout_config.load(PAPER)
    cfg["datasets"]["openr1-math-46k"]["holdout"] = 3
    cfg["settings"]["q4b-q1.7b-math"].update(student_lr="tuned")
    cfg["tuning"] = {
        "student_lr": [1e-6, 3e-6],
        "validation": {"math": {"data": "openr1-math-46k.holdout", "repeats": 4}},
    }
    assert jobs.validation_data(Grid.of(scout_config.validate(cfg)), "math") == ("openr1-math-46k.holdout", 3, 4)
    cfg["tuning"]["validation"]["math"]["data"] = "math500"
    with pytest.raises(scout_config.ConfigError, match="unknown validation set 'math500'"):
        grid.check(scout_config.validate(cfg))


def test_prepare_data_command_and_config_checks(mirror, tmp_path, capsys):
    spec = paper_spec(mirror, "hmmt25")
    assert main(["prepare-data", "--spec", json.dumps(spec), "--out", str(tmp_path / "h.jsonl")]) == 0
    assert "hmmt25: 30 source rows, 0 filtered out, 0 duplicates dropped -> 30" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="scout prepare-data: hmmt25: 30 rows after filtering"):
        main(["prepare-data", "--spec", json.dumps(spec | {"rows": 29}), "--out", str(tmp_path / "h2.jsonl")])
    cfg = scout_config.load(PAPER)
    cfg["data"] = {"source": "mirror"}
    cfg["benchmarks"]["gsm8k"] = {"domain": "math", "rows": 5, "repeats": 1}
    with pytest.raises(scout_config.ConfigError) as err:
        scout_config.validate(cfg)
    assert "benchmarks.gsm8k: no catalogue entry" in str(err.value) and "data.mirror: required" in str(err.value)
