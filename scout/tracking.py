"""Metrics where researchers look: TensorBoard event files in every run folder (always), and
Weights & Biases or MLflow when the config's ``tracking`` section asks for them.

A run is named for its cell (``setting/variant/s{seed}``) and grouped by its setting, so one
cell's training curve and its evaluations land in one run: the evaluation jobs log into the run of
the checkpoint they evaluate (TensorBoard: another event file in the same folder; W&B: the same
run id, resumed; MLflow: the run id kept in the run folder). Nothing needs a network: W&B runs
offline and MLflow writes a local store unless the user gives credentials or a tracking URI.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scout.schema import default

TB_DIR = "tensorboard"
ENV = "SCOUT_TRACKING"  # the config's tracking section, as JSON: the workflow exports it to every job
# (not part of a job's spec: where metrics are sent never makes Snakemake rerun a job)
MLFLOW_RUN_ID = "mlflow_run_id"
BACKENDS = ("tensorboard", "wandb", "mlflow")


def export(tracking: dict) -> None:
    """Give the jobs this process starts (locally or through Slurm) the config's tracking section."""
    os.environ[ENV] = json.dumps(tracking)


def run_name(spec: dict) -> str:
    return f"{spec['setting']}/{spec['variant']}/s{spec['seed']}"


def run_group(spec: dict) -> str:
    """Runs group by setting (the spec names no experiment: several may share a run)."""
    return spec.get("setting") or spec.get("kind", "train")


@contextmanager
def ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C until the block ends, then raise it. The trackers' libraries hand each record
    to a writer thread through a queue; a KeyboardInterrupt raised inside ``Condition.notify`` can
    leave a stale waiter behind that takes the next wake-up (CPython gh-92530), and the writer
    thread then sleeps until its flush timer (TensorBoard's: 120 s) while the job's exit waits for
    it. A second Ctrl-C interrupts at once. Where SIGINT is ignored or handled otherwise (a
    background job, a thread other than the main one), the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        if held:
            raise KeyboardInterrupt
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


class Tracker:
    """``log(metrics, step)`` to every configured backend; each is opened at its first use (so a
    job's start-up does not pay for imports it may not need)."""

    def __init__(self, run_dir: str | Path, spec: dict, tracking: dict | None = None):
        self.dir = Path(run_dir)
        self.spec = spec
        self.cfg = tracking if tracking is not None else json.loads(os.environ.get(ENV) or "{}")
        self.backends = list(self.cfg.get("backends", default("tracking.backends")))
        unknown = set(self.backends) - set(BACKENDS)
        if unknown:
            raise ValueError(f"tracking.backends: unknown {sorted(unknown)}; expected some of {BACKENDS}")
        self._tb = self._wandb = self._mlflow = None

    # -- backends ------------------------------------------------------------------------------------

    def _tensorboard(self):
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.dir / TB_DIR))
        return self._tb

    def _wandb_run(self):
        if self._wandb is None:
            import wandb

            mode = self.cfg.get("wandb_mode") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
            run_id = hashlib.sha1(f"{self.dir.resolve()}".encode()).hexdigest()[:16]  # training and evals share it
            self._wandb = wandb.init(
                project=self.cfg.get("project", default("tracking.project")),
                name=run_name(self.spec),
                group=run_group(self.spec),
                tags=list(self.cfg.get("tags", [])),
                id=run_id,
                resume="allow",
                dir=str(self.dir),
                mode=mode,
                config={k: v for k, v in self.spec.items() if isinstance(v, str | int | float | bool)},
                reinit="create_new",
            )
        return self._wandb

    def _mlflow_run(self):
        if self._mlflow is None:
            uri = self.cfg.get("mlflow_uri") or os.environ.get("MLFLOW_TRACKING_URI")
            if not uri:  # a local store in the run folder (MLflow 3 wants an opt-in for it)
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                uri = (self.dir / "mlruns").resolve().as_uri()
            import mlflow

            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(self.cfg.get("project", default("tracking.project")))
            id_file = self.dir / MLFLOW_RUN_ID
            run_id = id_file.read_text().strip() if id_file.exists() else None
            tags = {"group": run_group(self.spec), **{t: "1" for t in self.cfg.get("tags", [])}}
            if run_id:  # an evaluation adding to the training run: its name and tags stay
                run = mlflow.start_run(run_id=run_id)
            else:
                run = mlflow.start_run(run_name=run_name(self.spec), tags=tags)
            self.dir.mkdir(parents=True, exist_ok=True)
            id_file.write_text(run.info.run_id)
            self._mlflow = mlflow
        return self._mlflow

    # -- logging -------------------------------------------------------------------------------------

    def log(self, metrics: dict, step: int, prefix: str = "") -> None:
        values = {f"{prefix}{k}": float(v) for k, v in metrics.items() if isinstance(v, int | float) and k != "step"}
        if values:
            with ctrl_c_after():
                self._log(values, step, prefix)

    def _log(self, values: dict[str, float], step: int, prefix: str) -> None:
        if "tensorboard" in self.backends:
            tb = self._tensorboard()
            for k, v in values.items():
                tb.add_scalar(k, v, step)
        if "wandb" in self.backends:
            run = self._wandb_run()
            if prefix:  # evaluations log later than training: on an axis of their own
                run.define_metric(f"{prefix}*", step_metric=f"{prefix}step")
                run.log({**values, f"{prefix}step": step})
            else:
                run.log(values, step=step)
        if "mlflow" in self.backends:
            self._mlflow_run().log_metrics(values, step=step)

    def close(self) -> None:
        with ctrl_c_after():
            if self._tb is not None:
                self._tb.close()
            if self._wandb is not None:
                self._wandb.finish()
            if self._mlflow is not None:
                self._mlflow.end_run()
            self._tb = self._wandb = self._mlflow = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def verl_loggers(tracking: dict | None = None) -> list[str]:
    """``trainer.logger`` for verl: its console, TensorBoard, and the configured extras."""
    tracking = tracking if tracking is not None else json.loads(os.environ.get(ENV) or "{}")
    backends = tracking.get("backends", default("tracking.backends"))
    return ["console", *(b for b in BACKENDS if b in backends or b == "tensorboard")]


def scalars(run_dir: str | Path) -> dict[str, list[float]]:
    """A run's TensorBoard scalars, tag -> values in step order ({} before its first event): what
    verl logged (its step timing, its trainers' memory) read back as any TensorBoard reader does."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = Path(run_dir) / TB_DIR
    if not folder.is_dir():
        return {}
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {t: [e.value for e in sorted(events.Scalars(t), key=lambda e: e.step)] for t in events.Tags()["scalars"]}
