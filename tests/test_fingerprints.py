"""The recorded digits: the toy grid's data and tokenizer rebuilt here against config/fingerprints.yaml
(the models and trained cells of the reduced grid are checked in tests/test_workflow.py), and the
comparison that says which file parted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from scout import reproducibility as rep
from scout.toy.world import build_data, build_tokenizer_files
from tests.conftest import REPO, toy_config


def test_the_toy_grids_data_and_tokenizer_have_the_recorded_digits(tmp_path):
    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    build_data(cfg, tmp_path / "results" / "toy" / "data")
    build_tokenizer_files(tmp_path / "results" / "toy" / "tokenizer")
    want = rep.recorded("toy")
    got = rep.measure(cfg)
    built = [f for f in rep.toy_files(cfg) if f.startswith(("toy/data/", "toy/tokenizer/"))]
    assert len(built) == len(cfg["toy"]["splits"]) + len(cfg["benchmarks"]) + len(cfg["toy"]["validation"]) + 1
    assert {f: got[f] for f in built} == {f: want.get(f) for f in built}


def test_the_record_names_every_kind_of_file():
    files = rep.recorded("toy")
    for part in ("toy/data/", "toy/tokenizer/", "toy/models/", "teachers/", "/opd", "/grpo/", "/relay_opd/",
                 "/s1/model/final-teacher/", "/base-student/", "toy/data/math-val"):  # fmt: skip
        assert any(part in f for f in files), part
    assert all(len(h) == 12 for h in files.values())


def test_compare_says_which_file_parted():
    rows = rep.compare({"a": "111", "b": "222", "c": "333"}, {"a": "111", "b": "999", "c": None, "d": "444"})
    assert [r[3] for r in rows] == ["same", "differs", "missing", "not recorded"]


def test_scout_fingerprints_reports_a_changed_file_and_records(tmp_path):
    cfg = toy_config()
    cfg["results"] = "results"
    data = tmp_path / "results" / "toy" / "data"
    build_data(cfg, data)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    record = tmp_path / "fingerprints.yaml"
    got = rep.measure({**cfg, "results": str(tmp_path / "results")})
    rep.write_record("here", got, "built by the test", record)
    assert rep.recorded("here", record) == {f: h for f, h in got.items() if h}
    (data / "tm-hard.jsonl").write_text((data / "tm-hard.jsonl").read_text().replace("Compute", "Work out", 1))
    cmd = [sys.executable, "-m", "scout.cli", "fingerprints", "--config", "cfg.yaml", "--section", "toy", "--strict"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    lines = {line.split()[0]: line.split()[-1] for line in out.stdout.splitlines() if line.startswith("toy/")}
    assert lines["toy/data/tm-hard.jsonl"] == "differs" and lines["toy/data/tm-easy.jsonl"] == "same"
    assert out.returncode == 1 and "computed other digits" in out.stdout
    assert str(REPO / "config" / "fingerprints.yaml") in out.stdout
    assert Path(rep.RECORD) == REPO / "config" / "fingerprints.yaml"
