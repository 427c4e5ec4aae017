"""What the driver tells every Ray process of a cell's job, through its environment: verl starts
those processes itself, so the plugin's registered losses, the LoRA sync and the agent loops read
the cell's method and its settings from there; and the folder names the driver and the trainer both
use. Nothing here imports verl or registers anything.

A job gets its method's settings once, as JSON in that environment (the composed config's
``ray_kwargs.ray_init.runtime_env``): verl's own config sections refuse unknown keys, and the
workers verl starts see no more of the config than their own section."""

from __future__ import annotations

import json
import os

METHOD_ENV = "SCOUT_METHOD"  # the cell's method id, for the advantage a method row names
METHOD_CFG_ENV = "SCOUT_METHOD_CFG"  # the cell's method_cfg, as JSON
TEACHER_DIR = "teacher_actor"  # SCOUT's trained teacher, beside verl's actor/ in global_step_N/
SYNC_CHECKSUM_ENV = "SCOUT_SYNC_CHECKSUM"  # "1": both ends of a teacher weight sync log their checksum
SYNC_CHECKSUM_ENGINE = "nccl_checked"  # verl's nccl engine with those checksums (scout.verl.sync_checksum)


def method_cfg(cfg=None, required: bool = True) -> dict:
    """The cell's ``method_cfg``: from a composed verl config's runtime environment (the driver,
    the trainer), or from this process's environment (the workers verl starts). Outside a cell's
    job (the driver before it composes, a test) it is missing: an error, or ``{}`` if not
    ``required``."""
    if cfg is not None:
        raw = cfg.ray_kwargs.ray_init.runtime_env.env_vars.get(METHOD_CFG_ENV)
    else:
        raw = os.environ.get(METHOD_CFG_ENV)
    if not raw and not required:
        return {}
    if not raw:
        raise RuntimeError(f"{METHOD_CFG_ENV} is not set: the scout driver exports the cell's method settings")
    return json.loads(raw)


def method_section(name: str, cfg=None) -> dict:
    """One method's section of :func:`method_cfg` (``scout``, ``prune_opd``, ...)."""
    sections = method_cfg(cfg)
    if name not in sections:
        raise RuntimeError(f"{METHOD_CFG_ENV} has no '{name}' section (has {sorted(sections)})")
    return sections[name]
