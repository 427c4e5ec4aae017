"""The first GPU node's check (benchmarks/gpu_check.py) without running verl: its plan of cells on a
machine's GPUs, and the verdicts it reads from a run. Its runs themselves are CI's verl CPU runs
(tests/verl/test_verl_cpu.py builds them with this module and reads them with its report)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from tests.support.toy import REPO


@pytest.fixture(scope="module")
def needs(tmp_path_factory) -> dict[str, int]:
    cfg = gpu_check.world_config(tmp_path_factory.mktemp("gpucheck"), "cuda")
    return {n: gpu_check.gpus_needed(gpu_check.check_spec(cfg, n)) for n in gpu_check.CHECKS}


def test_each_cell_asks_for_a_gpu_per_pool(needs):
    """Student | teacher engine (OPD, the shared LoRA teacher on the engine's GPU); | teacher trainer
    (SCOUT); a served teacher and GRPO leave the student alone."""
    assert needs == {"opd": 2, "scout": 3, "scout-lora": 2, "prune_opd-served": 1, "grpo": 1}


def test_cells_run_one_at_a_time_on_one_gpu_and_side_by_side_on_more(needs):
    one, left = gpu_check.schedule(needs, 1)
    assert one == [["prune_opd-served"], ["grpo"]]
    assert set(left) == {"opd", "scout", "scout-lora"} and "needs 3 GPUs" in left["scout"]
    assert gpu_check.schedule(needs, 3) == ([["opd"], ["scout"], ["scout-lora", "prune_opd-served"], ["grpo"]], {})
    assert gpu_check.schedule(needs, 8) == ([["opd", "scout", "scout-lora", "prune_opd-served"], ["grpo"]], {})
    # the CPU: one cell at a time, none left out
    assert gpu_check.schedule(needs, 0) == ([[n] for n in needs], {})


def test_the_plan_runs_nothing_and_names_the_waves(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--plan", "--work",
                           str(tmp_path / "w")], capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpu_check on the CPU") and "scout (3); " in done.stdout
    assert not (tmp_path / "w" / "runs").exists()
    wrong = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--cells", "opd,sft"],
                           capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert wrong.returncode == 2 and "unknown cells ['sft']" in wrong.stderr and "Traceback" not in wrong.stderr


def _run(tmp_path, method: str, log: str, rc: int = 0, steps: int | None = 2):
    run = tmp_path / "runs" / "cell"
    run.mkdir(parents=True)
    (run.parent / "cell.spec.json").write_text(json.dumps({"method": method}))
    if steps is not None:
        (run / "train.json").write_text(json.dumps({"steps": steps}))
    return gpu_check.read_cell("cell", run, subprocess.CompletedProcess([], rc, log, ""), 12.0)


def test_a_failed_job_fails_its_cell_with_its_last_words(tmp_path):
    cell = _run(tmp_path, "opd", "starting\nRuntimeError: CUDA out of memory\n", rc=1, steps=None)
    assert not cell.ok and cell.problems == ["exit 1: RuntimeError: CUDA out of memory"]
    assert "cell: FAIL: exit 1: RuntimeError: CUDA out of memory" in gpu_check.report([cell])


def test_a_finished_job_without_its_checks_in_the_log_fails(tmp_path):
    """A job that exits 0 but logged no self-test, no rollout/actor agreement and no weight sync has
    not shown what the check is for."""
    cell = _run(tmp_path, "scout", "done\n")
    assert cell.problems == ["no teacher self-test logged", "no rollout/actor agreement logged", "no weight sync logged"]


def test_a_sync_whose_ends_disagree_fails(tmp_path):
    log = ("[sync-checksum] pid 1: sent 28 tensors, 65536 B in 0.01 s, checksum 12.500000\n"
           "[sync-checksum] pid 2: rank 1 received 28 tensors, 65536 B in 0.02 s, checksum 12.400000\n")  # fmt: skip
    cell = _run(tmp_path, "scout", log)
    assert (cell.sent, cell.received) == ("12.500000", ["12.400000"])
    assert "the engine did not receive what the trainer sent (checksum 12.500000)" in cell.problems
    assert "12.500000 / 12.400000" in gpu_check.report([cell])
