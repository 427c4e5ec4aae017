"""Cells whose training is one run: two cells of the same weights spec (labels, cadences and exports
apart) share the first one's run, and a longer run continues the longest shorter one of its spec
where its method allows it. The grid plans every cell's run once (``Grid.plans``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from scout import backends, schema
from scout.entries import Cell
from scout.methods import METHODS
from scout.runs import NOT_WEIGHTS


@dataclass(frozen=True)
class Plan:
    """How a cell's run is trained: by its own job (neither field set), as another cell's run
    (``shares``: the same weights spec apart from labels), or continuing from a shorter cell's last
    checkpoint (``continues``: the same spec apart from its length, for methods whose steps do not
    depend on the run's length)."""

    shares: Cell | None = None
    continues: Cell | None = None


def identity(spec: dict, with_length: bool = True) -> str:
    """What a run's weights depend on, as the DAG sees it (inputs by path): the spec without labels,
    cadences and exports (``runs.NOT_WEIGHTS``), and without its length when ``with_length`` is false."""
    skip = set(NOT_WEIGHTS) | (set() if with_length else {"epochs", "total_steps"})
    return json.dumps({k: v for k, v in spec.items() if k not in skip}, sort_keys=True)


def plan_runs(config: dict, every: list[Cell], spec_of: Callable[[Cell], dict]) -> dict[Cell, Plan]:
    """The plan of every cell. The first cell (in config order: the main grid first) of a weights
    spec trains it; a longer run continues the longest shorter one of the same spec where its
    method allows it (``Method.length_free``) and the backend does it exactly (the embedded one;
    tested in tests/train/test_runs.py). ``training.share_runs: false`` trains every cell on its own."""
    plans = {c: Plan() for c in every}
    if not schema.setting(config, "training.share_runs"):
        return plans
    specs = {c: spec_of(c) for c in every}
    first: dict[str, Cell] = {}
    for c in every:
        key = identity(specs[c])
        if key in first:
            plans[c] = Plan(shares=first[key])
        else:
            first[key] = c
    if backends.of(config).continues_runs:
        owners = list(first.values())
        for c in owners:
            if not METHODS[c.method].length_free:
                continue
            mine = identity(specs[c], with_length=False)
            shorter = [d for d in owners if identity(specs[d], with_length=False) == mine
                       and specs[d]["total_steps"] < specs[c]["total_steps"]]  # fmt: skip
            if shorter:
                plans[c] = Plan(continues=max(shorter, key=lambda d: specs[d]["total_steps"]))
    return plans
