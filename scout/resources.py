"""Cluster resources: what each job asks Slurm for (``scout.plan`` adds up what the grid requests).

Resources are configuration (the ``resources`` section), never hard-coded in rules: one entry per
rule family, and for training one per method with per-setting overrides, because the paper places
SCOUT on three nodes with a 4B teacher and on four with a 7B/8B one.
"""

from __future__ import annotations

import math
import os
import subprocess
from datetime import datetime

# What a job gets when the config has no ``resources`` section (or its ``default`` omits a key).
FALLBACK = {"nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1, "mem_mb": 2000, "runtime": 60}


def job_resources(config: dict, family: str, setting: str = "", method: str = "", variant: str = "") -> dict:
    """The resources of one job: ``default``, then the family's entry; for training, then the
    method's and the variant's entries under ``train.methods``, then the same two under
    ``train.settings.<setting>``. Later layers override single keys."""
    res = config.get("resources", {})
    out = {**FALLBACK, **res.get("default", {})}
    if family != "train":
        return {**out, **res.get(family, {})}
    train = res.get("train", {})
    per_setting = train.get("settings", {}).get(setting, {})
    layers = [train.get("default", {})]
    for table in (train.get("methods", {}), per_setting):
        layers += [table.get(method, {})] + ([table.get(variant, {})] if variant != method else [])
    for layer in layers:
        out.update(layer)
    return out


def max_runtime(config: dict) -> int | None:
    """The longest time limit the cluster gives a job (``resources.max_runtime``, minutes), or None."""
    return config.get("resources", {}).get("max_runtime")


def pieces(runtime: int, limit: int | None) -> int:
    """How many jobs of at most ``limit`` minutes a job of ``runtime`` minutes runs as: a training
    cut off at its limit is retried and resumes from its last checkpoint."""
    return math.ceil(runtime / limit) if limit else 1


def retries(runtimes: list[int], limit: int | None, base: int) -> int | None:
    """Snakemake's retries for a rule whose resumable jobs need ``runtimes`` minutes under a
    ``limit``: one more per piece past the first of the longest, over the ``base`` a failure gets;
    None (the base alone) where every job fits."""
    extra = max((pieces(t, limit) for t in runtimes), default=1) - 1
    return base + extra if extra else None


def slurm_resources(r: dict, limit: int | None = None) -> dict:
    """Snakemake resources for the Slurm executor plugin, always the same keys: one task per node
    with all its CPUs, and GPUs as a per-node gres (``--gpus`` would let Slurm spread them over the
    nodes unevenly). ``tasks`` is set for CPU-only jobs only: the plugin passes it as --ntasks
    there (its default of 1 would shrink a multi-node job to one node), but as --ntasks-per-gpu
    for GPU jobs, where Slurm's default of one task per node is what we want. ``job_gpus``, all the
    GPUs the job holds, is for local execution, where ``snakemake --resources job_gpus=8`` keeps the
    GPU jobs of one node from running at once. Never ``gpus`` (or ``gpu``): the Slurm plugin's job
    step passes that to ``srun -n1`` as ``--gpus=N``, which puts a multi-node job's step on one node
    that cannot hold all its GPUs, so the job fails at its start."""
    gpus = r["gpus_per_node"]
    return {
        "nodes": r["nodes"],
        "tasks": 0 if gpus else r["nodes"],
        "gres": f"gpu:{gpus}" if gpus else "",
        "job_gpus": r["nodes"] * gpus,
        "cpus_per_task": r["cpus_per_node"],
        "mem_mb": r["mem_mb"],
        "runtime": min(r["runtime"], limit) if limit else r["runtime"],  # above the partition's: pending for good
    }


def job_end(environ: dict | None = None) -> float | None:
    """When this process's Slurm job reaches its time limit (squeue's end time), or None outside
    Slurm or where squeue cannot say."""
    job = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True).stdout
        return datetime.strptime(out.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except (OSError, ValueError):  # no squeue here; Unknown, N/A, or no answer
        return None
