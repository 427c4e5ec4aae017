"""Training and evaluation metrics in TensorBoard (read back with tensorboard's own reader), W&B
(offline) and MLflow (a local store), one run per cell with its evaluations in it."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from scout.embedded.trainer import Trainer
from scout.evaluate import evaluate
from scout.tracking import ENV, Tracker, verl_loggers


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture
def tracked_run(spec_for, world, tmp_path, monkeypatch):
    """A SCOUT run with every backend, then an evaluation of its final checkpoint."""
    monkeypatch.setenv(
        ENV, json.dumps({"backends": ["tensorboard", "wandb", "mlflow"], "project": "toy", "tags": ["t"]})
    )
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = spec_for("scout", total_steps=4, steps_per_epoch=4)
    spec["method_cfg"]["scout"]["interval"] = 2
    out = tmp_path / "run"
    Trainer(spec, out, device="cpu").run(log=lambda _: None)
    bench = {"domain": "math", "rows": 4, "repeats": 2, "path": str(world["data"] / "tm-easy.jsonl")}
    evaluate(
        {"model": str(out / "model" / "final"), "domain": "math", "benchmarks": {"tm-easy": bench},
         "sampling": {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 24}, "setting": spec["setting"],
         "variant": "scout", "method": "scout", "seed": 1, "checkpoint": "final", "run_dir": str(out), "step": 4},
        tmp_path / "eval", log=lambda _: None,
    )  # fmt: skip
    return out


def test_tensorboard_holds_training_teacher_phase_and_evaluation(tracked_run):
    got = scalars(tracked_run / "tensorboard")
    assert [s for s, _ in got["loss"]] == [1, 2, 3, 4]
    assert [s for s, _ in got["teacher_reward"]] == [2, 4]  # SCOUT's teacher phase, every f = 2 steps
    assert [s for s, _ in got["eval/tm-easy"]] == [4] and got["eval/avg"] == got["eval/tm-easy"]
    lines = [json.loads(x) for x in (tracked_run / "metrics.jsonl").read_text().splitlines()]
    assert [v for _, v in got["loss"]] == pytest.approx([m["loss"] for m in lines])


def test_wandb_offline_one_run_per_cell(tracked_run):
    runs = sorted((tracked_run / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # training, then the evaluation resuming the same run id
    ids = {p.name.split("-")[3] for p in runs}  # offline-run-<time>-<id>[-<n> when in the same second]
    assert len(ids) == 1 and all(list(p.glob("run-*.wandb")) for p in runs)


def test_mlflow_local_store_gets_training_and_evaluation(tracked_run):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tracked_run / "mlruns").resolve().as_uri())
    run_id = (tracked_run / "mlflow_run_id").read_text().strip()
    run = client.get_run(run_id)
    assert run.info.run_name == "toy-l-s-math/scout/s1" and run.data.tags["group"] == "toy-l-s-math"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2, 3, 4]
    assert [m.step for m in client.get_metric_history(run_id, "eval/tm-easy")] == [4]


def test_backends_are_checked_and_verl_gets_the_same():
    with pytest.raises(ValueError, match="tracking.backends: unknown \\['neptune'\\]"):
        Tracker("x", {"setting": "s", "variant": "v", "seed": 1}, {"backends": ["neptune"]})
    assert verl_loggers({}) == ["console", "tensorboard"]
    assert verl_loggers({"backends": ["wandb", "mlflow"]}) == ["console", "tensorboard", "wandb", "mlflow"]


class _CtrlCWriter(SummaryWriter):
    """A real TensorBoard writer that has a person press Ctrl-C (``presses`` times) as its first
    record is handed over, and counts the records it takes."""

    def __init__(self, log_dir: str, presses: int):
        super().__init__(log_dir=log_dir)
        self.presses, self.taken = presses, 0

    def add_scalar(self, *args, **kwargs):
        for _ in range(self.presses):
            os.kill(os.getpid(), signal.SIGINT)
        self.presses = 0
        super().add_scalar(*args, **kwargs)
        self.taken += 1


@pytest.mark.parametrize("presses, taken", [(1, 3), (2, 0)])
def test_ctrl_c_while_metrics_are_logged_waits_for_the_records_unless_pressed_twice(tmp_path, presses, taken):
    """A Ctrl-C that lands while a step's metrics go to TensorBoard's writer thread is raised once
    they are all handed over (one raised inside the queue's notify can leave that thread asleep
    until its 120 s flush timer, and the job's exit waiting for it: a CI run saw it); pressed twice,
    it interrupts at once. Either way the writer closes and keeps what it took."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a job in a terminal
    try:
        tracker = Tracker(tmp_path, {"setting": "s", "variant": "v", "seed": 1}, {"backends": ["tensorboard"]})
        tracker._tb = writer = _CtrlCWriter(str(tmp_path / "tensorboard"), presses)
        with pytest.raises(KeyboardInterrupt):
            tracker.log({"loss": 0.5, "entropy": 1.0, "grad_norm": 2.0}, step=7)
        assert writer.taken == taken
        t0 = time.perf_counter()
        tracker.close()
        assert time.perf_counter() - t0 < 30
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sum(len(v) for v in scalars(tmp_path / "tensorboard").values()) == taken
