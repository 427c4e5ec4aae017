"""Prepared JSONL -> the parquet layout verl's ``RLHFDataset`` reads.

verl renders ``prompt`` (chat messages) with the model's chat template itself and hands
``data_source``, ``reward_model.ground_truth`` and ``extra_info`` to the reward function. The whole
scout row travels in ``extra_info.row`` so the reward function grades with the same graders and
test suites as the embedded backend and the evaluation rules.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from scout.catalogue import DataError, check_row
from scout.io import read_jsonl

DATA_SOURCE = "scout/{domain}"


def verl_row(row: dict, index: int) -> dict:
    """One scout row as a verl dataset row; a malformed row raises DataError naming it."""
    problem = check_row(row)
    if problem:
        raise DataError(f"row {index} ({row.get('id', '?')}): {problem}")
    domain = row["domain"]
    truth = row["answer"] if domain == "math" else json.dumps(row["tests"], sort_keys=True)
    return {
        "data_source": DATA_SOURCE.format(domain=domain),
        "prompt": row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}],
        "ability": domain,
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": index, "id": row["id"], "row": json.dumps(row)},
    }


def export(jsonl: str | Path, parquet: str | Path) -> Path:
    """Write ``parquet`` from ``jsonl`` unless it is already newer; atomic, so a killed job leaves
    no half-written file for the next attempt to trust."""
    import pandas as pd

    src, dst = Path(jsonl), Path(parquet)
    if not src.exists():
        raise DataError(f"{src}: prepared data is missing (run the prepare_data rule first)")
    source = read_jsonl(src)
    for i, r in enumerate(source):  # checked even when the parquet is current: it may predate the checks
        problem = check_row(r)
        if problem:
            raise DataError(f"{src}: row {i + 1} ({r.get('id') if isinstance(r, dict) else '?'}): {problem}")
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    rows = [verl_row(r, i) for i, r in enumerate(source)]
    if not rows:
        raise DataError(f"{src}: no rows")
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    tmp.replace(dst)
    return dst
