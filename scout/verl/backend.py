"""The verl backend's door: the cluster engine for the paper grid (GPU nodes under Ray; verl's CPU
platform for the toy world in CI). verl itself loads only in ``train`` and ``preflight``."""

from __future__ import annotations

from scout import schema
from scout.backends import Backend, CellCheck, PairCheck, Preflight
from scout.methods import METHODS
from scout.placement import PlacementError, placement, served_resources
from scout.resources import job_resources


class Verl(Backend):
    name = "verl"
    device = "cuda"
    environment = "gpu"
    checks_cells = True

    def config_errors(self, config: dict) -> list[str]:
        if config.get("device") == "auto":
            return ["device: auto is the embedded backend's; verl trains on cuda (its default) or cpu (config/verl-cpu.yaml)"]
        if config["world"] == "toy" and not config.get("resources", {}).get("default", {}).get("gpus_per_node"):
            return ["backend: verl on the toy world needs GPUs in resources.default (config/verl-smoke.yaml), or "
                    "device: cpu with fake ones (config/verl-cpu.yaml)"]  # fmt: skip
        return _placement_errors(config)

    def spec_fields(self, config: dict) -> dict:
        # "device" has always been written, at its default too: leaving it out now would change the
        # digest of every verl spec made before the rule (a new field holds its default by absence)
        out = {"device": config.get("device", self.device)}
        if schema.setting(config, "training.keep_checkpoints") != schema.default("training.keep_checkpoints"):
            out["keep_checkpoints"] = config["training"]["keep_checkpoints"]
        return out

    def train_resources(self, method: str, resources: dict, served: bool) -> dict:
        # a served cell asks for its student's pool alone, marked so (``teacher_served``) for its placement
        return served_resources(method, resources) if served else resources

    def placement(self, resources: dict) -> dict | None:
        return resources  # the driver places its pools from them

    def launcher(self, config: dict, resources: dict) -> str:
        if config.get("device") == "cpu":  # a local Ray in the job's process
            return ""
        return (f"scout ray-run --cpus-per-node {resources['cpus_per_node']} "
                f"--gpus-per-node {resources['gpus_per_node']} --")  # fmt: skip

    def preflight(self, cells: list[CellCheck], pairs: list[PairCheck], log=print) -> Preflight:
        from scout.verl import preflight  # transformers and verl's config load with it

        tokenizers: dict = {}
        return Preflight(preflight.run(cells, tokenizers, log), preflight.pairs(pairs, tokenizers))

    def train(self, spec: dict, out_dir: str, log=print, dry_run: bool = False) -> dict:
        try:
            from scout.verl import driver
        except ImportError as exc:
            raise SystemExit(
                f"the 'verl' training backend needs verl (pip install '.[gpu]' on GPU nodes): {exc}"
            ) from exc
        return driver.train(spec, out_dir, log=log, dry_run=dry_run)

    def step_seconds(self, run_dir: str) -> list[float]:
        """verl's own timing of each step (``timing_s/step``), from the run's TensorBoard events."""
        from scout.tracking import scalars  # tensorboard's reader loads with the report that asks

        return scalars(run_dir).get("timing_s/step", [])

    def peak_gpu_gb(self, run_dir: str) -> float | None:
        """The most any of verl's trainers held (``perf/max_memory_allocated_gb``, the student's
        and SCOUT's teacher's, in GiB); vLLM's engines hold their configured share besides."""
        from scout.tracking import scalars

        found = [v for tag, vs in scalars(run_dir).items() if tag.endswith("perf/max_memory_allocated_gb") for v in vs]
        return max(found) * (1 << 30) / 1e9 if found else None


VERL = Verl()


def _placement_errors(config: dict) -> list[str]:
    """Every training cell's resources must hold its method's pools: found when the config loads,
    not by verl on a GPU node after the queue's wait."""
    errs = []
    for name, exp in config.get("experiments", {}).items():
        for entry in exp["methods"]:
            method, variant = (entry, entry) if isinstance(entry, str) else (entry["method"], entry["name"])
            if method not in METHODS:  # named by the grid's own checks
                continue
            for setting in (s for s in exp["settings"] if s in config["settings"]):
                served = bool(config["settings"][setting].get("teacher_server"))
                res = job_resources(config, "train", setting, method, variant)
                if served and METHODS[method].scores_with_frozen_teacher:
                    res = {**res, "teacher_served": True}
                try:
                    placement(method, res)
                except PlacementError as exc:
                    errs.append(f"resources of experiments.{name} ({setting}/{variant}): {exc}")
    return errs
