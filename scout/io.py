"""JSON-lines files: the format of datasets, generations and metrics logs."""

from __future__ import annotations

import json
import os
import shlex
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


class JobStopped(RuntimeError):
    """A check stopped the job on purpose (a teacher self-test, say): its message is the whole story."""


def read_record(path: str | Path, required: tuple[str, ...], what: str) -> dict:
    """A job's JSON record with the keys it must have; a missing, unreadable or foreign file is a
    ``DamagedInput`` that names it and the command that remakes it."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedInput(path, f"unreadable {what} ({exc})") from exc
    missing = [k for k in required if k not in rec] if isinstance(rec, dict) else list(required)
    if missing:
        article = "an" if what[0] in "aeiou" else "a"
        raise DamagedInput(path, f"not {article} {what} (missing {', '.join(missing)})")
    return rec


def remake_command(path: str | Path) -> str:
    """The narrowest Snakemake call that rebuilds ``path``: the job output it belongs to, forced, as
    the one target, with the config files, ``--config`` pairs and cores of the command that ran the
    job (exported by the workflow), so that neither the user's overlay nor their selection is lost.

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
    args = os.environ.get("SCOUT_REMAKE_ARGS", "--cores 1")  # the workflow's command line (scout.workflow)
    return f"snakemake {args} --force -- {shlex.quote(str(target))}"


def safetensors_problem(path: str | Path) -> str | None:
    """Why a safetensors file cannot be whole (missing, a header that does not parse, shorter than
    its header says), or None: a check of its size against its own header, without loading it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            header = json.loads(fh.read(n)) if 0 < n <= size - 8 else None
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as exc:
        return f"unreadable header ({exc})"
    if not isinstance(header, dict):
        return "truncated (no complete header)"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    want = 8 + n + max(ends, default=0)
    return f"truncated ({size:,} of {want:,} bytes)" if size < want else None


def model_problems(run: str | Path) -> list[tuple[str, str]]:
    """The damaged or missing weights of a finished training run's models (``model/final`` and any
    other model folder it exported): (file, why) pairs, empty when every file is whole."""
    root = Path(run) / "model"
    if not (root / "final").is_dir():
        return [(str(root / "final"), "missing")]
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(folder.glob("*.safetensors"))
        if not files and not any(folder.glob("*.bin")):
            out.append((str(folder / "model.safetensors"), "missing"))
        for f in files:
            why = safetensors_problem(f)
            if why:
                out.append((str(f), why))
    return out
