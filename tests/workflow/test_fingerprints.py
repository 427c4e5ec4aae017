"""The recorded digits: the toy grid's data and tokenizer rebuilt here against config/fingerprints.yaml
(the models and trained cells of the reduced grid are checked in tests/workflow/test_workflow.py), and the
comparison that says which file parted."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from scout import reproducibility as rep
from scout.toy.world import build_data, build_tokenizer_files
from tests.support.toy import REPO, toy_config


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


def test_other_numerics_compare_the_data_and_the_tokenizer_only():
    """On a machine whose arithmetic is not the record's, a model's other digits are another draw,
    not an error; the data and the tokenizer (no floating point) must match everywhere."""
    want = {"toy/data/a.jsonl": "111", "toy/tokenizer/tokenizer.json": "222", "toy/models/m/model.safetensors": "333",
            "eval/x/s0/final/b.generations.jsonl": "444", "train/x/s1/model/final/model.safetensors": "555"}  # fmt: skip
    got = {"toy/data/a.jsonl": "111", "toy/tokenizer/tokenizer.json": "999", "toy/models/m/model.safetensors": "abc",
           "eval/x/s0/final/b.generations.jsonl": "444", "train/x/s1/model/final/model.safetensors": None}  # fmt: skip
    verdicts = [r[3] for r in rep.compare(want, got, same_numerics=False)]
    assert verdicts == ["same", "differs", "other numerics", "other numerics", "missing"]
    assert [r[3] for r in rep.compare(want, got)][2:4] == ["differs", "same"]


def test_the_probe_is_repeatable_and_sees_the_code_paths():
    """Two probes in one process agree; a process on the machine's own paths computes another."""
    assert rep.probe() == rep.probe()
    env = {**os.environ, rep.NATIVE: "1", "ATEN_CPU_CAPABILITY": "default"}
    code = "from scout.reproducibility import probe; print(probe())"
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert len(other.stdout.strip()) == 12 and other.stdout.strip() != rep.probe()


def test_the_install_is_checked_against_the_lock(tmp_path):
    """A package at another version or missing is named; one the install removes on purpose is not."""
    lock = tmp_path / "some.lock"
    lock.write_text(f"# a comment\npyyaml=={metadata.version('pyyaml')}\npandas==0.0.1\nno-such-package==1.0\n"
                    "torchvision==0.1\n")  # fmt: skip
    pinned, off = rep.lock_mismatches(lock)
    assert pinned == 4
    assert off == [("pandas", "0.0.1", metadata.version("pandas")), ("no-such-package", "1.0", None)]
    assert rep.install_state((lock,))[2] == off


def test_a_record_from_other_numerics_is_not_blamed_on_this_machine(tmp_path, monkeypatch, capsys):
    """The record's probe is not this machine's: `scout fingerprints --strict` compares the data,
    passes, and says why the models were not compared and whether the install is the locked one."""
    from scout import cli

    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    build_data(cfg, tmp_path / "results" / "toy" / "data")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    got = rep.measure(cfg)
    got["toy/models/toy-large/model.safetensors"] = "000000000000"
    record = tmp_path / "fingerprints.yaml"
    rep.write_record("toy", {f: h for f, h in got.items() if f.startswith("toy/")}, "made elsewhere", record)
    data = yaml.safe_load(record.read_text())
    assert data["toy"]["numerics"] == rep.probe() and data["toy"]["machine"]
    data["toy"]["numerics"] = "ffffffffffff"
    record.write_text(yaml.safe_dump(data))
    (tmp_path / "results" / "toy" / "models" / "toy-large").mkdir(parents=True)
    (tmp_path / "results" / "toy" / "models" / "toy-large" / "model.safetensors").write_bytes(b"other digits")
    monkeypatch.setattr(rep, "RECORD", record)
    code = cli.main(["fingerprints", "--configfile", str(tmp_path / "cfg.yaml"), "--strict"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split(maxsplit=3)[-1] for line in out.splitlines() if line.startswith("toy/")}
    assert lines["toy/models/toy-large/model.safetensors"] == "other numerics"
    assert lines["toy/data/tm-hard.jsonl"] == "same"
    assert f"the record's ffffffffffff on {rep.machine()}" in out and "not compared" in out
    assert "install: " in out and code == 0
    from scout import report
    from scout.grid import Grid

    summary = report.digits(Grid.of(cfg))  # the report's provenance line says the same
    assert summary.startswith(f"{len(cfg['toy']['splits']) + len(cfg['benchmarks']) + len(cfg['toy']['validation'])} of ")
    assert "1 made by models on other numerical code paths" in summary and "ffffffffffff" in summary


def test_a_selection_is_checked_against_the_files_it_makes(tmp_path, monkeypatch, capsys):
    """Under ``select`` the recorded files of other methods, settings and models are not "not made
    yet" (the selection never makes them): they are counted apart, and --record refuses."""
    from scout import cli

    cfg = toy_config()
    cfg["results"] = str(tmp_path / "results")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    record = tmp_path / "fingerprints.yaml"
    rep.write_record("toy", dict.fromkeys(rep.toy_files(cfg), "0123456789ab"), "every file", record)
    monkeypatch.setattr(rep, "RECORD", record)
    select = ["--configfile", str(tmp_path / "cfg.yaml"), "--config",
              "select={settings: [toy-l-s-math], methods: [opd, scout], seeds: [1, 2]}"]  # fmt: skip
    assert cli.main(["fingerprints", *select]) == 0
    out = capsys.readouterr().out
    files = [line.split()[0] for line in out.splitlines() if line.split()[-1] == "missing"]
    assert "train/toy-l-s-math/opd/s1/model/final/model.safetensors" in files
    assert "train/toy-l-s-math/scout/s1/model/final-teacher/model.safetensors" in files
    assert not any("/grpo/" in f or "toy-medium" in f for f in files), files
    outside = len(rep.recorded("toy", record)) - len(files)
    assert outside > 0 and f"{outside} recorded files are not this selection's" in out
    with pytest.raises(SystemExit, match="a selection makes only some"):
        cli.main(["fingerprints", *select, "--record", "a selection"])
    assert rep.recorded("toy", record) == dict.fromkeys(rep.toy_files(cfg), "0123456789ab")


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
    cmd = [sys.executable, "-m", "scout.cli", "fingerprints", "--configfile", "cfg.yaml", "--section", "toy", "--strict"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    lines = {line.split()[0]: line.split()[-1] for line in out.stdout.splitlines() if line.startswith("toy/")}
    assert lines["toy/data/tm-hard.jsonl"] == "differs" and lines["toy/data/tm-easy.jsonl"] == "same"
    assert out.returncode == 1 and "Other digits than the record" in out.stdout
    assert str(REPO / "config" / "fingerprints.yaml") in out.stdout
    assert Path(rep.RECORD) == REPO / "config" / "fingerprints.yaml"


# The shared probe of ../shared/tools/isa_probe.py (a small MLP, 300 AdamW steps, one thread) and the
# value a real Intel Xeon computed on MKL's AVX2 branch with ATen's AVX2 kernels (issue 45): what
# a pinned process must compute on every x86-64 machine with AVX2, Intel or AMD
ISA_PROBE = """
import hashlib, torch
torch.set_num_threads(1)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
x = torch.randn(32, 40, 64)
for _ in range(300):
    y = m(x).softmax(-1)
    loss = (y * (y + 1e-9).log()).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in m.parameters())).hexdigest()[:12])
"""
INTEL_AVX2 = "ac1d2744c46c"


def _avx2() -> bool:
    try:
        return " avx2 " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
    except OSError:
        return False


@pytest.mark.skipif(not _avx2(), reason="the pin is for x86-64 machines with AVX2")
def test_a_pinned_process_computes_the_intel_machines_digits():
    """The pinned code paths, with MKL's vendor shim, compute what an Intel Xeon computed on MKL's
    AVX2 branch: on an AMD CPU as on Intel's (without the shim an AMD one computes other digits)."""
    code = f"from scout.reproducibility import pin_numerics\npin_numerics()\n{ISA_PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == INTEL_AVX2, out.stderr


def test_the_test_process_computes_on_the_pinned_paths():
    import torch

    now = rep.numerics()
    assert now["pinned"] and now["cpu_capability"] == "AVX2" and now["threads"] >= 1
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        assert now["mkl_vendor_shim"] == "loaded", now
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_the_shim_is_built_once_and_answers_for_intel(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("SCOUT_CACHE", str(tmp_path / "cache"))
    path = rep.shim_path()
    assert path.parent == tmp_path / "cache"
    assert rep.build_shim() == path and path.exists()
    stamp = path.stat().st_mtime_ns
    assert rep.build_shim() == path and path.stat().st_mtime_ns == stamp  # built once
    assert ctypes.CDLL(str(path)).mkl_serv_intel_cpu_true() == 1


def test_a_shim_that_cannot_be_built_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="no-such-cc did not run"):
        rep.build_shim(tmp_path / "x.so")
    (tmp_path / "bad-cc").write_text("#!/bin/sh\necho 'bad-cc: cannot compile' >&2\nexit 1\n")
    (tmp_path / "bad-cc").chmod(0o755)
    monkeypatch.setenv("CC", str(tmp_path / "bad-cc"))
    with pytest.raises(RuntimeError, match="could not build it: bad-cc: cannot compile"):
        rep.build_shim(tmp_path / "x.so")
    assert not (tmp_path / "x.so").exists()
