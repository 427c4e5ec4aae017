"""A cell's training run: the spec its job runs (every checkpoint the cells it serves evaluate, a
continuation's start; under a selection, the whole grid's), whether any grid cell uses a tuning
run, and the tuning stage's choices a run waits for. How cells share runs is ``scout.grid``'s
(``Grid.plans``)."""

from __future__ import annotations

from scout import tuning
from scout.grid import Cell, Grid, is_search, teacher_lora_rank, teacher_lr_param
from scout.runs import checkpoint_steps


def run_spec(grid: Grid, cell: Cell) -> dict:
    """The spec a cell's training job runs: ``Grid.spec`` plus every checkpoint its run is evaluated
    at for the cells it serves (``export_steps``) and, for a continuation, where it starts
    (``continue_from``: the shorter run's folder and last step). A tuning run exports what any grid
    cell it may come to serve needs, so that its spec does not change when the search chooses it.
    Under a selection it is the whole grid's spec of that run: cutting the grid down never makes
    the runs it keeps stale (their exports and probed steps stay those of the whole grid)."""
    same = grid.in_whole(cell) if grid.is_cut else None
    if same is not None:
        return run_spec(grid.whole, same)
    spec = grid.spec(cell)
    total = spec["total_steps"]
    if is_search(cell):
        spec["export_steps"] = _search_exports(grid, cell, total)
        return spec
    plans = grid.plans
    steps = set(checkpoint_steps(spec))
    for other, plan in plans.items():
        if cell in (plan.shares, plan.continues):
            steps |= {s for s in checkpoint_steps(grid.spec(other)) if s < total}
            if plan.continues == cell:
                steps |= {s for s in [grid.spec(other)["total_steps"]] if s < total}
    start = plans[cell].continues
    if start is not None:
        base = grid.spec(start)["total_steps"]
        spec["continue_from"] = {"run": grid.paths.train_dir(start.setting, start.variant, start.seed), "step": base}
        steps = {s for s in steps if s > base}
    spec["export_steps"] = sorted(s for s in steps if 0 < s < total)
    return spec


def _search_exports(grid: Grid, cell: Cell, total: int) -> list[int]:
    """The steps a tuning run exports: those of every grid cell of its setting and method that could
    share or continue its run (no overrides but its length, evaluation interval and LRs)."""
    free = {"epochs", "eval_every", "student_lr", "teacher_lr"}

    def fixed(c: Cell) -> set:  # a LoRA search run's rank
        return {kv for kv in c.overrides if kv[0] not in free}

    steps: set[int] = set()
    for c in grid.cells:
        if (c.setting, c.method) == (cell.setting, cell.method) and fixed(c) == fixed(cell):
            steps |= set(checkpoint_steps(grid.spec(c)))
    return sorted(s for s in steps if 0 < s < total)


def choices_needed(grid: Grid, cell: Cell) -> list[tuple[str, str]]:
    """The tuning stage's choices (setting, LR) a run's job spec waits for. A search run: the searches
    before its own (the teacher LR's runs train at the chosen student LR). A grid cell: each LR its
    own spec leaves ``tuned`` (GRPO keeps its own LR; only a method that trains a teacher has a
    teacher LR), in every tuned setting, since a run is shared with any cell whose spec equals its
    own; none for a setting no choice can touch (``tuning.independent_settings``)."""
    config = grid.config
    tuned = tuning.tuned_settings(config)
    if is_search(cell):
        return [(cell.setting, p) for p in tuning.before(tuned[cell.setting], tuning.param_of(cell.variant))]
    if cell.setting in tuning.independent_settings(config):
        return []
    spec = grid.spec(cell)
    teacher = teacher_lr_param(config["settings"][cell.setting], teacher_lora_rank(config, cell))
    sc = grid.method_settings(cell).get("scout")
    own = {"student_lr": spec["lr"], teacher: sc.teacher_lr if sc else None}
    return [(s, p) for s, params in tuned.items() for p in params if own.get(p) == tuning.TUNED]


def serves(grid: Grid, cell: Cell) -> bool:
    """Whether a run is any grid cell's: its own, or one a grid cell shares or continues."""
    if not is_search(cell):
        return True
    return any(cell in (p.shares, p.continues) for p in grid.plans.values())
