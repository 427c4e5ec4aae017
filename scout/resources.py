"""Cluster resources: what each job asks Slurm for (``scout.plan`` adds up what the grid requests).

Resources are configuration (the ``resources`` section), never hard-coded in rules: one entry per
rule family, and for training one per method with per-setting overrides, because the paper places
SCOUT on three nodes with a 4B teacher and on four with a 7B/8B one.
"""

from __future__ import annotations

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


def slurm_resources(r: dict) -> dict:
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
        "runtime": r["runtime"],
    }
