"""A training run's folder belongs to the spec that started it.

A run folder (``results/train/{setting}/{variant}/s{seed}``) holds checkpoints that a restarted job
resumes from. They may be resumed only by a job of the same *weights spec*: every field of the
resolved training spec that changes the weights, with the inputs (models, data) by content, not by
path, and without labels, cadences and output settings. ``run.json`` in the folder records that
spec and whether the run finished, and a finished run's ``train.json`` record. A job that finds a
folder of another spec, or a finished run (``--forcerun``, or its params or inputs changed), moves
the folder aside and trains from scratch; nothing is deleted. Both backends call :func:`claim`
before they train.

Snakemake deletes ``train.json`` before it reruns a job, so a rerun that fails would leave a
finished run without its record; :func:`restore` (``scout restore RUN``) puts the finished run of
the same spec back, record and all, so nothing downstream is remade.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

RUN_FILE = "run.json"
# Spec fields that never change the weights: names, experiment membership, how often checkpoints
# are saved, exported and kept, logging cadence, threads and cluster resources.
NOT_WEIGHTS = ("setting", "variant", "experiments", "save_every", "reward_every", "eval_every", "probe_steps",
               "export_steps", "continue_from", "threads", "resources", "keep_checkpoints")  # fmt: skip
INPUTS = ("student", "teacher", "train_data")
_WHOLE_FILE = 256 * 2**20  # files up to this size are identified by content, larger ones by size and time


def _file_identity(path: Path) -> str:
    st = path.stat()
    if st.st_size > _WHOLE_FILE:
        return f"size={st.st_size},mtime={st.st_mtime_ns}"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def input_identity(ref: str | None) -> str | None:
    """A model folder, a data file or a hub id, identified by what it holds: a rebuilt model with
    other weights is another input even at the same path, a moved results folder is not."""
    if not ref:
        return ref
    path = Path(ref)
    if path.is_file():
        return _file_identity(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        h = hashlib.sha256()
        for p in files:
            h.update(f"{p.relative_to(path)}:{_file_identity(p)}\n".encode())
        return h.hexdigest()[:16]
    return ref  # a hub id


def weights_spec(spec: dict) -> dict:
    """The part of a training spec a run's weights depend on (inputs by content)."""
    out = {k: v for k, v in spec.items() if k not in NOT_WEIGHTS}
    for key in INPUTS:
        if key in out:
            out[key] = input_identity(out[key])
    return out


def fingerprint(wspec: dict) -> str:
    return hashlib.sha256(json.dumps(wspec, sort_keys=True).encode()).hexdigest()[:16]


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two specs."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {json.dumps(a)} -> {json.dumps(b)}")
    return out


def checkpoint_steps(spec: dict) -> list[int]:
    """Intermediate steps that are exported and evaluated: every ``eval_every`` steps (compute-matched
    runs) and the analysis' matched checkpoints (``probe_steps``), before the last step; a run that
    serves other cells too has them all in ``export_steps`` (``training_runs.run_spec``)."""
    if "export_steps" in spec:
        return list(spec["export_steps"])
    every = spec.get("eval_every")
    steps = set(range(every, spec["total_steps"], every)) if every else set()
    steps |= {s for s in spec.get("probe_steps", []) if 0 < s < spec["total_steps"]}
    return sorted(steps)


def checkpoints(spec: dict) -> list[str]:
    """Checkpoints that get evaluated: the intermediate ones and final."""
    return [f"step{s}" for s in checkpoint_steps(spec)] + ["final"]


def last_checkpoint(run_dir: Path) -> int | None:
    """The step a training resumes from: its newest checkpoint (embedded ``step_N``, verl
    ``global_step_N``)."""
    steps = [int(d.name.rsplit("_", 1)[1]) for d in (run_dir / "checkpoints").glob("*step_*")
             if d.name.rsplit("_", 1)[1].isdigit()] if (run_dir / "checkpoints").is_dir() else []  # fmt: skip
    return max(steps, default=None)


class RunMismatch(RuntimeError):
    """A run folder was written under another spec than the job expects."""


def owner(out: str | Path) -> dict | None:
    """The folder's ``run.json`` (its weights spec, fingerprint and whether it finished), or None."""
    return _read(Path(out))


def _read(out: Path) -> dict | None:
    try:
        data = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "fingerprint" in data else None


def move_aside(out: Path) -> Path:
    """Move everything in ``out`` to a sibling ``{name}.superseded-{time}`` folder."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = out.with_name(f"{out.name}.superseded-{stamp}")
    n = 1
    while target.exists():
        target = out.with_name(f"{out.name}.superseded-{stamp}-{n}")
        n += 1
    target.mkdir(parents=True)
    _move_contents(out, target)
    return target


def _move_contents(src: Path, dst: Path) -> None:
    for item in list(src.iterdir()):
        shutil.move(str(item), str(dst / item.name))


def why_not_resumable(out: Path, wspec: dict, missing: Callable[[Path], list[str]] | None = None) -> list[str] | None:
    """Why the folder's contents cannot be resumed by ``wspec`` (None when they can, or when there
    is nothing to resume). ``missing`` lists what a resume would need that the folder lacks (the
    exported checkpoints before its last step)."""
    if not out.is_dir() or not any(out.iterdir()):
        return None
    owner = _read(out)
    if owner is None:
        return [f"it has no readable {RUN_FILE} saying which spec wrote it"]
    if owner["fingerprint"] != fingerprint(wspec):
        return ["its spec differs:", *differences(owner.get("spec", {}), wspec)]
    if owner.get("complete"):
        return ["that run finished (a forced rerun, or its params or inputs changed), so it is trained again"]
    lacking = missing(out) if missing else []
    if lacking:
        return [f"it lacks checkpoints this spec evaluates and cannot make after the fact: {', '.join(lacking)}"]
    return None


def claim(out: str | Path, spec: dict, log=print, dry_run: bool = False, missing=None) -> bool:
    """Make ``out`` this spec's run folder; returns whether what is there may be resumed.

    A folder of another spec, or of a finished run, is moved aside (never deleted), and the log
    says why, key by key. ``dry_run`` only says what would happen."""
    out = Path(out)
    wspec = weights_spec(spec)
    reasons = why_not_resumable(out, wspec, missing)
    resumable = out.is_dir() and any(out.iterdir()) and reasons is None
    if reasons:
        if dry_run:
            log(f"{out}: would be moved aside and trained from scratch: " + "; ".join(reasons))
            return False
        moved = move_aside(out)
        log(f"{out}: not resumed, moved to {moved}; training from scratch, because:")
        for r in reasons:
            log(f"  {r}")
    if not dry_run:
        out.mkdir(parents=True, exist_ok=True)
        if not resumable:
            _write(out, {"fingerprint": fingerprint(wspec), "spec": wspec, "complete": False})
    return resumable


def mark_complete(out: str | Path, record: dict | None = None) -> None:
    """After ``train.json``: a later job in this folder is a rerun and trains from scratch. The
    record is kept in ``run.json`` too, so that :func:`restore` can write it again."""
    out = Path(out)
    owner = _read(out)
    if owner is not None:
        kept = {"record": record, "completed_at": time.time()} if record is not None else {}
        _write(out, {**owner, "complete": True, **kept})


def restorable(out: str | Path) -> Path:
    """The finished run :func:`restore` would put back in ``out``: the newest of those trained to
    the spec the folder holds now (a failed rerun's claim wrote it), or any when it holds none.
    Raises :class:`RunMismatch`, saying why, when there is none."""
    out = Path(out)
    if (out / "train.json").exists():
        raise RunMismatch(f"{out} is finished (its train.json is there): nothing to restore")
    aside = sorted(out.parent.glob(f"{out.name}.superseded-*"), key=lambda p: p.name, reverse=True)
    kept = []  # (folder, its run.json), newest first: the folder itself, then the folders moved aside
    for folder in [out, *aside]:
        owner = _read(folder)
        if owner and owner.get("complete") and ((folder / "train.json").exists() or isinstance(owner.get("record"), dict)):
            kept.append((folder, owner))
    if not kept:
        raise RunMismatch(f"{out}: no finished run of this cell to restore (none in the folder or beside it "
                          f"as {out.name}.superseded-*, with its train.json or its record)")  # fmt: skip
    current = _read(out)
    same = [folder for folder, owner in kept if current is None or owner["fingerprint"] == current["fingerprint"]]
    if not same:
        newest, theirs = kept[0]
        raise RunMismatch(f"{out}: the finished runs beside it were trained to another spec than the one it holds "
                          "now, so restoring one would make stale results; train the cell instead. The newest, "
                          f"{newest}, differs in: " + "; ".join(differences(theirs.get("spec", {}), current.get("spec", {}))))  # fmt: skip
    return same[0]


def restore(out: str | Path, log=print) -> Path:
    """Put the newest finished run of ``out``'s spec back in place, with its ``train.json`` as it
    was written (its time too, so the evaluations made from it stay current). What is in ``out``
    (a failed rerun's partial run) is moved aside, never deleted."""
    out = Path(out)
    source = restorable(out)
    theirs = _read(source)
    if source != out:
        if out.is_dir() and any(out.iterdir()):
            log(f"{out}: the partial run there moved to {move_aside(out)}")
        out.mkdir(parents=True, exist_ok=True)
        _move_contents(source, out)
        source.rmdir()
    record = out / "train.json"
    if not record.exists():  # deleted by Snakemake before the rerun: written again from run.json
        record.write_text(json.dumps(theirs["record"], indent=1))
        when = theirs.get("completed_at")
        if when:
            os.utime(record, (when, when))
    log(f"{out}: restored the finished run" + (f" from {source}" if source != out else "") + f" ({record} is back)")
    return source


def _write(out: Path, data: dict) -> None:
    """Keys in their order: the spec's order is part of its digest, and :func:`restore` writes the
    record back from here (sorted, a restored cell's spec read as changed)."""
    tmp = out / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out / RUN_FILE)
