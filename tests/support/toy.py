"""Toy configs shrunk to order (the whole toy world's, a reduced grid's) and small helpers around
them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[2]  # the checkout: tests/support/toy.py


def dry_run(workdir, configfile, *args) -> subprocess.CompletedProcess:
    """``snakemake -n`` of this repo's workflow in a scratch working directory."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile), "--cores", "1", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True)


TINY = {
    "hidden_size": 32,
    "layers": 1,
    "heads": 2,
    "kv_heads": 1,
    "intermediate_size": 64,
    "steps": 20,
    "lr": 3e-3,
    "batch": 8,
}


def tex_available() -> bool:
    """Whether pdflatex is here; CI sets SCOUT_REQUIRE_TEX=1 so that a missing TeX fails, not skips."""
    if shutil.which("pdflatex"):
        return True
    if os.environ.get("SCOUT_REQUIRE_TEX") == "1":
        raise RuntimeError("SCOUT_REQUIRE_TEX=1 but pdflatex is not installed")
    return False


TOY_OVERLAYS = ("toy-extra.yaml", "toy-tune.yaml", "toy-lora.yaml")  # make toy-all's, over config/config.yaml


def toy_config(tuned: bool = False) -> dict:
    """Every experiment of the toy world: config/config.yaml with its targets of their own over it
    (``TOY_OVERLAYS``: the interval sweep and compute-matched comparison, the tuning stage, the
    LoRA teacher); unless ``tuned``, with toy-l-s-math's tuned LRs at a number (1.5e-4, the middle
    of the grids the tuning stage searches; 1.2e-3 for a LoRA teacher), for tests of what follows a
    choice."""
    from scout.config import deep_merge

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for overlay in TOY_OVERLAYS:
        cfg = deep_merge(cfg, yaml.safe_load((REPO / "config" / overlay).read_text()))
    if not tuned:
        cfg["settings"]["toy-l-s-math"].update(student_lr=1.5e-4, teacher_lr=1.5e-4, teacher_lora_lr=1.2e-3)
    return cfg


def cell_spec(config: dict, setting: str, variant: str, seed: int) -> dict:
    """The resolved spec of one cell of a config's grid."""
    from scout.grid import Grid

    grid = Grid.of(config)
    return grid.spec(grid.find(setting, variant, seed))


def mini_config(results: str, tuned: bool = False) -> dict:
    """The toy config shrunk to seconds: tiny models, few rows, few steps, every method once; with
    ``tuned``, toy-l-s-math's LRs come from a tuning stage of two points each, otherwise they are
    the toy config's level (1.5e-4)."""
    cfg = toy_config(tuned)
    cfg["settings"]["toy-l-s-math"].pop("teacher_lora_lr")  # the LoRA variant's LR is its own (below)
    cfg["results"] = results
    for s in cfg["toy"]["splits"].values():
        s["rows"] = 64
    for v in cfg["toy"]["validation"].values():
        v["rows"] = 8
    cfg["tuning"].update(student_lr=[1.5e-4, 3.0e-4], teacher_lr=[1.5e-4, 3.0e-4])
    for v in cfg["tuning"]["validation"].values():
        v["repeats"] = 2

    for name, m in cfg["models"].items():
        if "toy" in m:
            m["toy"] = {**TINY, "hidden_size": 48 if name == "toy-large" else 32}
    cfg["models"]["toy-medium-grpo"]["prepare"].update(steps=2, batch=4, n=2)
    for b in cfg["benchmarks"].values():
        b.update(rows=4, repeats=2)
    cfg["training"].update(steps=4, batch_size=4, save_every=2, max_response_length=24)
    cfg["training"]["grpo"]["n"] = 2
    cfg["evaluation"]["max_new_tokens"] = 24
    cfg["methods"]["scout"].update(interval=2, k=2)
    cfg["methods"]["esr"]["max_tokens"] = 8
    cfg["methods"]["prune_opd"]["budget"].update(initial=16, min=8, max=24, step=4, margin=2)
    cfg["report"]["pdf"] = "auto"  # the default: a PDF where TeX is installed
    tex_available()  # CI requires TeX (SCOUT_REQUIRE_TEX=1): fail early without it
    cfg["analysis"].update(settings=["toy-l-s-math"], ratios=[0.25, 0.75], k=2, max_new_tokens=24, checkpoints=[2])
    cfg["experiments"] = {
        "main": {
            "settings": ["toy-l-s-math"],
            "methods": ["grpo", "opd", "esr", "prune_opd", "relay_opd", "scout"],
            "seeds": [1],
        },
        "prefix0": {"settings": ["toy-l-s-code"], "methods": ["opd_teacher_grpo"], "seeds": [1]},
        "optr": {"settings": ["toy-mg-s-math"], "methods": ["optr", "optr_scout"], "seeds": [1]},
        "interval": {
            "settings": ["toy-l-s-math"],
            "methods": [{"name": "scout-f1", "method": "scout", "interval": 1}],
            "seeds": [2],
        },
        "compute_matched": {
            "settings": ["toy-l-s-math"],
            "methods": [{"name": "opd-2ep", "method": "opd", "epochs": 2, "eval_every": 2}],
            "seeds": [1],
        },
        "lora": {
            "settings": ["toy-l-s-math"],
            "methods": [{"name": "scout-lora", "method": "scout", "teacher_lora_rank": 4, "teacher_lr": 3e-3}],
            "seeds": [1],
        },
    }
    return cfg


def params_vector(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])
