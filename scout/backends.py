"""Training backends, each one object behind the small interface below.

The planner and the workflow ask a backend what its jobs need (software environment, resources,
launcher, spec fields, a preflight) and the job asks it to train; nothing outside a backend's own
package branches on its name. A backend's door module imports nothing heavy (its engine loads in
``train``), and no backend imports the planner: what its preflight checks arrives resolved, as
``CellCheck`` and ``PairCheck``.

Adding a backend (docs/extending.md): a subclass of ``Backend`` in a module of its own, one line
in ``BACKENDS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CellCheck:
    """One training job as the preflight sees it, resolved by the planner (``scout.preflight``)."""

    key: str
    spec: dict
    resources: dict
    out_dir: str
    student: str  # model ids
    teacher: str | None
    arch: dict[str, str]  # model id -> where its config.json is read (a prepared teacher: its base's)
    train_data: str
    data_path: str
    view: dict  # the student's view of the data (``scout.prompts.view_key``)


@dataclass(frozen=True)
class PairCheck:
    """A teacher-student pair's tokenizer and template check, resolved by the planner."""

    name: str
    tokenizers: tuple[str, str]  # student's, teacher's (a prepared teacher's: its base's)
    chats: tuple[dict, dict]  # their chat-template options
    data_path: str


@dataclass(frozen=True)
class Preflight:
    """What a backend's preflight found: a row per cell and a verdict per pair, each with
    ``name``, ``checks`` and ``problems``."""

    cells: list = field(default_factory=list)
    pairs: list = field(default_factory=list)


class Backend:
    """The interface, with the answers of a backend that trains in-process and needs nothing else."""

    name = ""
    device = "cpu"  # where it trains when the config names no ``device`` (its schema entry says so)
    environment = "cpu"  # its training jobs' software: "cpu" (envs/scout.yaml) or "gpu" (envs/gpu.yaml)
    checks_cells = False  # whether the workflow runs ``scout preflight`` before the first training job
    continues_runs = False  # whether a longer run may resume a shorter one's run of the same spec

    def config_errors(self, config: dict) -> list[str]:
        """What this backend cannot run in a config, each naming the key to change."""
        return []

    def spec_fields(self, config: dict) -> dict:
        """Fields every run's spec carries for this backend. A field that holds its default must be
        left out, so that existing specs (and their digests) stay as they were."""
        return {}

    def train_resources(self, method: str, resources: dict, served: bool) -> dict:
        """What a training job asks Slurm for, from its configured resources; ``served``: its
        frozen teacher is a server's."""
        return resources

    def placement(self, resources: dict) -> dict | None:
        """What of a training job's resources its trainer places itself by (a file beside its spec,
        not in it: a changed time limit or node count retrains nothing,
        ``scout.workflow.placed_spec_file``); None: nothing, it trains in-process."""
        return None

    def launcher(self, config: dict, resources: dict) -> str:
        """The command prefix a training job runs under (empty: in-process)."""
        return ""

    def preflight(self, cells: list[CellCheck], pairs: list[PairCheck], log=print) -> Preflight:
        raise SystemExit(f"scout preflight: the {self.name} backend needs no preflight")

    def train(self, spec: dict, out_dir: str, log=print, dry_run: bool = False) -> dict:
        raise NotImplementedError

    def step_seconds(self, run_dir: str) -> list[float]:
        """Seconds each step of a run took, as its trainer recorded them (the calibration pilot
        reads them: ``scout.cost``)."""
        return []

    def peak_gpu_gb(self, run_dir: str) -> float | None:
        """The most GPU memory a run's processes held, as its trainer recorded it; None on the CPU."""
        return None


# name -> "module:attribute" of its Backend, imported when asked for
BACKENDS = {
    "embedded": "scout.embedded.backend:EMBEDDED",
    "verl": "scout.verl.backend:VERL",
}


def get(name: str) -> Backend:
    if name not in BACKENDS:
        raise SystemExit(f"unknown training backend {name!r}; expected one of {sorted(BACKENDS)}")
    module, attr = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def of(config_or_spec: dict) -> Backend:
    """The backend a config (or a job's spec) names."""
    return get(config_or_spec["backend"])
