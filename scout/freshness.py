"""What exists against what the config asks for now: fresh, stale or missing.

A result is *fresh* when the spec that produced it is the spec the config gives its job today and
everything it was made from is fresh; Snakemake decides the same way (a job reruns when its params,
which hold the spec, change, or when an input is remade). Every job keeps its spec, or its digest,
with what it writes: a training run in ``train.json``, a toy model in ``pretrain.json``, an
evaluation record as ``spec_digest`` with the digest of the spec its run was trained with
(``trained``), the analysis in ``analysis.json``. ``scout status``, ``scout plan`` and the report
read this module, so that a changed hyperparameter shows its results as stale, each with why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from scout import jobs
from scout.grid import BASE_VARIANTS, Cell, Grid
from scout.runs import differences
from scout.workflow import spec_digest


@dataclass(frozen=True)
class Stale:
    kind: str  # model | training | evaluation | analysis
    key: str  # what it is, e.g. toy-l-s-math/scout/s1 or toy-l-s-math/scout/s1/final
    target: str  # the file Snakemake remakes
    why: tuple[str, ...]


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _changed(old: dict | None, new: dict) -> list[str]:
    """Why a job's recorded spec is not its spec now: the keys that differ. A result from before
    results recorded their specs cannot be compared: it counts as fresh, as Snakemake's own
    records decide for it."""
    if old is None or spec_digest(old) == spec_digest(new):
        return []
    diff = differences(old, new)
    return [f"its spec changed: {'; '.join(diff[:6])}{' ...' if len(diff) > 6 else ''}"] if diff else \
        ["its spec changed (the same values in another order)"]  # fmt: skip


def _computed(spec: dict | None) -> dict | None:
    """A training's recorded spec without the resources it ran on, which the verl backend records
    beside what it computed (a job's spec never holds them: ``Backend.placement``)."""
    return spec if spec is None or "resources" not in spec else {k: v for k, v in spec.items() if k != "resources"}


class Freshness:
    """Each result of a config's grid in a working directory: None when fresh (or missing: nothing
    to compare), else why it is stale."""

    def __init__(self, grid: Grid, workdir: str | Path = "."):
        self.grid, self.at, self.work = grid, grid.paths, Path(workdir)
        self._models: dict[str, list[str] | None] = {}

    def _path(self, rel: str) -> Path:
        return self.work / rel

    # -- models ------------------------------------------------------------------------------------

    def model(self, model_id: str) -> list[str] | None:
        """A toy model (its pretraining spec) or a prepared teacher (its training spec)."""
        if model_id in self._models:
            return self._models[model_id]
        spec = self.at.models[model_id]
        why = None
        if "toy" in spec:
            info = _json(self._path(f"{self.at.model(model_id)}/pretrain.json"))
            if info is not None:
                why = _changed(info.get("spec"), jobs.toy_pretrain_spec(self.grid, model_id)) or None
        elif "prepare" in spec:
            info = _json(self._path(f"{self.at.teacher_dir(model_id)}/train.json"))
            if info is not None:
                why = _changed(_computed(info.get("spec")), jobs.teacher_job_spec(self.grid, model_id)) or None
                base = self.model(spec["prepare"]["base"])
                if why is None and base:
                    why = [f"its base model {spec['prepare']['base']} is stale"]
        self._models[model_id] = why
        return why

    # -- trainings ---------------------------------------------------------------------------------

    @cached_property
    def _trainings(self) -> dict[Cell, list[str] | None]:
        out: dict[Cell, list[str] | None] = {}
        plans = self.grid.plans
        for cell in self.grid.runs:  # config order: a continued run comes before its longer one
            if plans[cell].shares is not None:
                continue
            info = self.trained(cell)
            if info is None:
                out[cell] = None
                continue
            why = _changed(_computed(info.get("spec")), jobs.train_job_spec(self.grid, cell))
            s = self.grid.settings[cell.setting]
            why += [f"its {role} model {m} is stale" for role, m in (("student", s.student), ("teacher", s.teacher))
                    if self.model(m)]  # fmt: skip
            start = plans[cell].continues
            if start is not None and out.get(start):
                why.append(f"the run it continues ({start.key}) is stale")
            out[cell] = why or None
        return out

    def trained(self, cell: Cell) -> dict | None:
        """The cell's ``train.json`` (None when it has not finished or cannot be read)."""
        return _json(self._path(f"{self.at.train_dir(cell.setting, cell.variant, cell.seed)}/train.json"))

    def training(self, cell: Cell) -> list[str] | None:
        return self._trainings.get(cell)

    # -- evaluations -------------------------------------------------------------------------------

    def evaluation(self, unit: tuple[str, str, str, str]) -> list[str] | None:
        """An evaluation job's records (every benchmark of its domain)."""
        setting, variant, seed, ckpt = unit
        spec = jobs.eval_spec(self.grid, setting, variant, seed, ckpt)
        want = spec_digest(spec)
        why: list[str] = []
        for b in self.grid.benchmarks_for(self.grid.settings[setting].domain):
            rec = _json(self._path(f"{self.at.eval_dir(setting, variant, seed, ckpt)}/{b}.json"))
            if rec is None:
                continue
            if rec.get("spec_digest", want) != want:  # records from before digests were kept count as fresh
                why.append("its evaluation spec changed (benchmarks, repeats or sampling)")
            if variant in BASE_VARIANTS:
                s = self.grid.settings[setting]
                model = s.teacher if variant == "base-teacher" else s.student
                if self.model(model):
                    why.append(f"its model {model} is stale")
                continue
            cell = jobs.trained_cell(self.grid, setting, variant, seed)
            info = self.trained(cell) or {}
            if "spec" in info and rec.get("trained", spec_digest(info["spec"])) != spec_digest(info["spec"]):
                why.append("its run was trained again after it was evaluated")
            if self.training(cell):
                why.append(f"its run {cell.key} is stale")
        return list(dict.fromkeys(why)) or None

    # -- analysis ----------------------------------------------------------------------------------

    def analysis(self, setting: str) -> list[str] | None:
        done = _json(self._path(f"{jobs.analysis_dir(self.grid, setting)}/analysis.json"))
        if done is None:
            return None
        why = []
        if done.get("spec_digest") != spec_digest(jobs.analysis_spec(self.grid, setting)):
            why.append("its spec changed (settings, ratios, probed runs or responses)")
        for run, digest in done.get("trained", {}).items():
            info = _json(self._path(f"{run}/train.json")) or {}
            if "spec" in info and spec_digest(info["spec"]) != digest:
                why.append(f"{run} was trained again after it was probed")
        probed = {self.at.train_dir(c.setting, c.variant, c.seed): c for c in self._trainings}
        for run in done.get("trained", {}):
            cell = probed.get(run)
            if cell is not None and self.training(cell):
                why.append(f"its probed run {cell.key} is stale")
        teacher = self.grid.settings[setting].teacher
        if self.model(teacher):
            why.append(f"its teacher {teacher} is stale")
        return why or None

    # -- everything --------------------------------------------------------------------------------

    def stale(self) -> list[Stale]:
        """Every stale result of the grid, upstream first."""
        at, out = self.at, []
        for m in at.models:
            why = self.model(m)
            if why:
                target = f"{at.model(m)}/model.safetensors" if "toy" in at.models[m] else f"{at.teacher_dir(m)}/train.json"
                out.append(Stale("model", m, target, tuple(why)))
        for cell, why in self._trainings.items():
            if why:
                target = f"{at.train_dir(cell.setting, cell.variant, cell.seed)}/train.json"
                out.append(Stale("training", cell.key, target, tuple(why)))
        for unit in jobs.eval_units(self.grid):
            why = self.evaluation(unit)
            if why:
                first = self.grid.benchmarks_for(self.grid.settings[unit[0]].domain)[0]
                out.append(Stale("evaluation", "/".join(unit), f"{at.eval_dir(*unit)}/{first}.json", tuple(why)))
        for s in self.grid.analysis.settings:
            why = self.analysis(s)
            if why:
                out.append(Stale("analysis", s, f"{jobs.analysis_dir(self.grid, s)}/continuation.csv", tuple(why)))
        return out
