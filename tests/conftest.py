"""Shared fixtures: a miniature toy world (data, tokenizer, tiny random models) built in a temp dir."""

from __future__ import annotations

# The code paths every scout command computes on, pinned before torch is imported (MKL's vendor
# shim must come first), so that a run trained in the test process and one trained by a job have
# the same digits
from scout.reproducibility import pin_numerics

pin_numerics()

import copy  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from scout.toy.world import build_data, build_model, build_tokenizer_files  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    """The Slurm cluster's tests first: they wait on the cluster more than they compute, so in make
    test's parallel phase (a file per worker) they overlap the other files instead of running last."""
    items.sort(key=lambda item: item.get_closest_marker("slurm") is None)  # stable: files stay in order


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


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> dict:
    """Data, tokenizer and two tiny untrained models (teacher larger than student)."""
    root = tmp_path_factory.mktemp("toyworld")
    cfg = mini_config(str(root / "results"))
    data = root / "results" / "toy" / "data"
    build_data(cfg, data)
    tok_dir = root / "tokenizer"
    build_tokenizer_files(tok_dir)
    models = {}
    for name, hidden in (("student", 32), ("teacher", 48)):
        model, tok = build_model({**TINY, "hidden_size": hidden}, tok_dir, seed=hidden)
        out = root / name
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        models[name] = str(out)
    return {"root": root, "config": cfg, "data": data, **models}


@pytest.fixture
def spec_for(world):
    """Build a resolved training spec for a method on the mini world."""
    from scout import grid

    def make(method: str, **over) -> dict:
        cfg = copy.deepcopy(world["config"])
        cell = grid.Cell("toy-l-s-math", method, method, 1)
        spec = grid.cell_spec(cfg, cell)
        spec.update(
            student=world["student"], teacher=world["teacher"], train_data=str(world["data"] / "math-train.jsonl")
        )
        for k, v in over.items():
            if isinstance(v, dict) and isinstance(spec.get(k), dict):
                spec[k] = {**spec[k], **v}
            else:
                spec[k] = v
        return spec

    return make


def params_vector(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])
