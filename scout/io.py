"""JSON-lines files: the format of datasets, generations and metrics logs."""

from __future__ import annotations

import json
from pathlib import Path


def read_jsonl(path: str | Path) -> list[dict]:
    """All records of a JSONL file; a malformed line is reported with its file and line number."""
    rows = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
    return rows


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Write atomically (temp file + rename), so a killed job never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    tmp.rename(path)


class DamagedInput(ValueError):
    """A file a job reads is missing or damaged; the message names it and the command that remakes it."""

    def __init__(self, path: str | Path, why: str):
        self.path, self.why = str(path), why
        super().__init__(f"{path}: {why}; remake it: {remake_command(path)}")


def remake_command(path: str | Path) -> str:
    """The Snakemake call that rebuilds ``path``: the job output it belongs to, forced.

    Paths follow the workflow's layout (``scout.grid``): a file inside a training run or a prepared
    teacher is remade by that job (its ``train.json``), toy models by their pretraining, evaluation
    records and datasets by themselves."""
    parts = Path(path).parts
    target = Path(path)
    for anchor, depth, leaf in (("train", 4, "train.json"), ("teachers", 2, "train.json"),
                                ("models", 2, "model.safetensors")):  # fmt: skip
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            if len(parts) > i + depth - 1 and (anchor != "models" or "toy" in parts[:i]):
                target = Path(*parts[: i + depth]) / leaf
                break
    else:
        if target.name.endswith(".generations.jsonl"):
            target = target.with_name(target.name.removesuffix(".generations.jsonl") + ".json")
    return f"snakemake --cores 1 --forcerun {target}"
