"""Where the workflow's files are, relative to the working directory under the config's ``results``
folder: a run's and an evaluation's folders, the prepared data, and where a model is loaded from.
The grid hands them out (``Grid.paths``); ``Paths.of(config)`` reads them from a config alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scout import serving
from scout.config import results_root


@dataclass(frozen=True)
class Paths:
    root: str  # the ``results`` folder as written: specs hold paths built from it, so not normalized
    world: str
    models: dict = field(hash=False, repr=False)
    selection: str | None = None  # report.selection: the name a selection's report goes under

    @classmethod
    def of(cls, config: dict) -> Paths:
        selection = config.get("report", {}).get("selection")
        return cls(results_root(config), config["world"], config["models"], selection)

    def train_dir(self, setting: str, variant: str, seed: int | str) -> str:
        return f"{self.root}/train/{setting}/{variant}/s{seed}"

    def eval_dir(self, setting: str, variant: str, seed: int | str, ckpt: str) -> str:
        return f"{self.root}/eval/{setting}/{variant}/s{seed}/{ckpt}"

    def data(self, name: str) -> str:
        """A prepared data set (the toy world's live apart from the real one's)."""
        folder = "toy/data" if self.world == "toy" else "data"
        return f"{self.root}/{folder}/{name}.jsonl"

    def meta(self, name: str) -> str:
        return self.data(name).removesuffix(".jsonl") + ".meta.json"

    def model(self, model_id: str) -> str:
        """Where a model is loaded from: a hub id, a toy model folder, or a prepared teacher."""
        spec = self.models[model_id]
        if "hub" in spec:
            return spec["hub"]
        if "toy" in spec:
            return f"{self.root}/toy/models/{model_id}"
        return self.teacher_model(model_id)

    def teacher_dir(self, model_id: str) -> str:
        """A prepared teacher's run (its ``train.json`` and checkpoints)."""
        return f"{self.root}/teachers/{model_id}"

    def teacher_model(self, model_id: str) -> str:
        return f"{self.teacher_dir(model_id)}/model/final"

    def model_inputs(self, model_id: str) -> list[str]:
        """Files the DAG must build before a model can be used (none for hub models)."""
        spec = self.models[model_id]
        if "toy" in spec:
            return [f"{self.model(model_id)}/model.safetensors"]
        if "prepare" in spec:
            return [f"{self.teacher_dir(model_id)}/train.json"]
        return []

    def server_dir(self, model_id: str) -> Path:
        """A served teacher's folder: its address, log and the leases of the cells it serves."""
        return serving.folder(self.root, model_id)

    def pilot_dir(self, setting: str, variant: str) -> Path:
        """A pilot run of a cell (``scout.cost``: what a step costs on the cluster)."""
        return Path(self.root) / "pilot" / setting / variant

    def report_dir(self) -> Path:
        """Where the report goes: ``{results}/report``, or a folder of a selection's own beneath it,
        so that one's own experiment run beside the demo keeps the demo's page (each page says its
        scope)."""
        return self._scoped("report")

    def summary_dir(self) -> Path:
        """The summary CSVs of the records a report shows (scoped as the report)."""
        return self._scoped("summary")

    def imported_dir(self) -> Path:
        """Where ``scout import-results`` writes the records it imports."""
        return Path(self.root) / "imported"

    def _scoped(self, folder: str) -> Path:
        root = Path(self.root) / folder
        return root / self.selection if self.selection else root
