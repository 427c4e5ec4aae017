"""What a backend's preflight checks, resolved from the config: each training cell's spec,
resources, folder, models and data view, and each teacher-student pair's tokenizers and chat
options. The backend (``scout.backends``) checks them; it never reads the config itself."""

from __future__ import annotations

from scout import jobs
from scout.backends import CellCheck, PairCheck, Preflight
from scout.grid import Cell, Grid, chat_options, data_view
from scout.methods import METHODS
from scout.paths import Paths


def _base_path(at: Paths, model_id: str) -> str:
    """Where a model's config and tokenizer are read: a prepared teacher's are its base model's."""
    spec = at.models[model_id]
    return _base_path(at, spec["prepare"]["base"]) if "prepare" in spec else at.model(model_id)


def cell_check(grid: Grid, cell: Cell) -> CellCheck:
    at, spec = grid.paths, grid.spec(cell)
    setting = grid.settings[cell.setting]
    teacher = setting.teacher if METHODS[cell.method].needs_teacher else None
    models = [setting.student] + ([teacher] if teacher else [])
    return CellCheck(
        key=cell.key,
        spec=spec,
        resources=jobs.train_resources(grid, cell.setting, cell.method, cell.variant),
        out_dir=at.train_dir(cell.setting, cell.variant, cell.seed),
        student=setting.student,
        teacher=teacher,
        arch={m: _base_path(at, m) for m in models},
        train_data=setting.train_data,
        data_path=at.data(setting.train_data),
        view=data_view(grid.config, setting.student, spec["max_prompt_length"]),
    )


def pair_checks(grid: Grid, cells: list[Cell] | None = None) -> list[PairCheck]:
    """One check per setting whose cells distil from a teacher."""
    config, at = grid.config, grid.paths
    settings = dict.fromkeys(c.setting for c in (cells or grid.cells) if METHODS[c.method].needs_teacher)
    out = []
    for name in settings:
        s = grid.settings[name]
        out.append(PairCheck(
            name=f"{name}: {s.teacher} scores {s.student}",
            tokenizers=(_base_path(at, s.student), _base_path(at, s.teacher)),
            chats=(chat_options(config, s.student), chat_options(config, s.teacher)),
            data_path=at.data(s.train_data),
        ))  # fmt: skip
    return out


def run(grid: Grid, log=print, cells: list[Cell] | None = None) -> Preflight:
    """The grid's backend's preflight of every training cell (or the given ones) and their pairs."""
    backend = grid.backend
    if not backend.checks_cells:  # its answer, before any cell is resolved for nothing
        return backend.preflight([], [], log)
    cells = cells or grid.cells
    return backend.preflight([cell_check(grid, c) for c in cells], pair_checks(grid, cells), log)


def table(rows: list) -> str:
    """The cells' checks as a table: a row per cell, a column per check."""
    import pandas as pd

    return pd.DataFrame([{"cell": r.name, **r.checks} for r in rows]).fillna("").to_string(index=False, max_colwidth=60)
