"""Shared fixtures: a miniature toy world (data, tokenizer, tiny random models) built in a temp dir.
The helpers the test files share are in tests/support/."""

from __future__ import annotations

# The code paths every scout command computes on, pinned before torch is imported (MKL's vendor
# shim must come first), so that a run trained in the test process and one trained by a job have
# the same digits
from scout.reproducibility import pin_numerics

pin_numerics()

import copy  # noqa: E402

import pytest  # noqa: E402

from scout.grid import Grid  # noqa: E402
from scout.toy.world import build_data, build_model, build_tokenizer_files  # noqa: E402
from tests.support.toy import TINY, mini_config  # noqa: E402

# make test's parallel phase hands out whole files in collection order, the next one to whichever
# worker is free: the longest files first leave the shortest for the end (xdist's own reorder, by
# number of tests, is turned off in the Makefile). The stages whose files run Snakemake, servers or
# engines come first.
STAGE_ORDER = ("workflow", "train", "verl", "evaluate", "config", "report", "prepare")


def _stage_rank(item) -> int:
    stage = item.path.parent.name
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def pytest_collection_modifyitems(config, items):
    """The Slurm cluster's tests first: they wait on the cluster more than they compute, so their
    worker overlaps the others instead of running last; then the files by stage (``STAGE_ORDER``)."""
    items.sort(key=lambda item: (item.get_closest_marker("slurm") is None, _stage_rank(item)))  # stable


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
        spec = Grid.of(cfg).spec(cell)
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


