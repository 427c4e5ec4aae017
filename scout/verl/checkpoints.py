"""What a verl run keeps between steps besides verl's own checkpoint: which ``global_step_N`` folders
are stale, the step verl's tracker names, and Prune-OPD's response budget (its update after each
student step, and its file beside each checkpoint)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig

from scout import algorithms as alg
from scout.io import read_jsonl, write_jsonl
from scout.verl.plugin import BUDGET_HITS, BUDGET_SAMPLES

BUDGET_FILE = "scout_budget.json"  # Prune-OPD's budget state, beside verl's data.pt


def step_dir(cfg: DictConfig, step: int) -> str:
    """verl's checkpoint folder of a global step; scout's own state sits beside verl's there."""
    return f"{cfg.trainer.default_local_dir}/global_step_{step}"


def save_budget(folder: str | Path, state: alg.BudgetState) -> None:
    write_jsonl(Path(folder) / BUDGET_FILE, [dataclasses.asdict(state)])  # one record: plain JSON too


def load_budget(folder: str | Path) -> alg.BudgetState:
    path = Path(folder) / BUDGET_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: a Prune-OPD checkpoint without its response budget cannot be resumed")
    return alg.BudgetState(**read_jsonl(path)[0])


def stale_checkpoints(root: str | Path, latest: int, keep: set[int]) -> list[Path]:
    """``global_step_N`` folders that are neither the latest checkpoint nor one the grid evaluates."""
    out = []
    for d in Path(root).glob("global_step_*"):
        n = d.name.removeprefix("global_step_")
        if n.isdigit() and int(n) != latest and int(n) not in keep:
            out.append(d)
    return sorted(out, key=lambda d: int(d.name.removeprefix("global_step_")))


def tracked_step(root: str | Path) -> int | None:
    """The step verl's tracker file names (it writes the file last, after a whole save)."""
    path = Path(root) / "latest_checkpointed_iteration.txt"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


def prune_budget_step(state: alg.BudgetState, metrics: dict, prune_cfg: dict) -> tuple[alg.BudgetState, dict]:
    """Prune-OPD's budget after a student step, from the counts its loss reported (``plugin.budget_metrics``,
    under verl's ``actor/`` prefix), and what to log about it."""
    try:
        hits, samples = metrics[f"actor/{BUDGET_HITS}"], metrics[f"actor/{BUDGET_SAMPLES}"]
    except KeyError as e:
        raise RuntimeError(
            f"the scout_prune loss reported no {e.args[0]!r}: is the actor's loss mode scout_prune?"
        ) from e
    new = alg.update_budget(state, hits, samples, **alg.budget_rule(prune_cfg))
    log = {
        "scout/prune_budget": state.length,
        "scout/prune_budget_hit_fraction": hits / samples if samples else 0.0,
        "scout/prune_budget_next": new.length,
    }
    return new, log
