"""``scout status``: where a running or finished grid stands, from the results folder and
Snakemake's own state (``.snakemake/incomplete`` marks the outputs of jobs under way) and this
host's processes (a snakemake working in the folder is what runs; its ``locks`` outlive a crash).
The same for local runs and ``--profile profiles/slurm``, where snakemake runs on the submit host.

Per experiment: training cells done, stale, running, failed, interrupted and pending; the last step
of every running training, and of every interrupted one with the step it resumes from; evaluations done and stale; what is stale and why (``scout.freshness``:
a result whose job's spec is not the one the config gives it now); the wall time so far and an
estimate of what is left.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path

from scout import critical_path, jobs, runs, serving, training_runs
from scout.freshness import Freshness
from scout.grid import Grid
from scout.io import DamagedInput, model_problems
from scout.results import read_record

STATES = ("done", "stale", "running", "failed", "interrupted", "pending", "damaged")
STALE_SHOWN = 12
STEP = re.compile(r"step[ :=]+(\d+)(?:/(\d+))?")


def _incomplete(workdir: Path) -> set[str]:
    folder = workdir / ".snakemake" / "incomplete"
    out = set()
    for marker in folder.glob("*") if folder.is_dir() else []:
        try:
            out.add(base64.urlsafe_b64decode(marker.name.encode()).decode())
        except ValueError:
            continue
    return out


def incomplete_hint(workdir: Path, output: str) -> str:
    """What to say of a finished output that Snakemake still marks incomplete (its job was cut off,
    or a killed rerun's was, and the run was finished or restored since): Snakemake refuses to go
    on until told to keep it or to make it again. Empty where it is not marked."""
    return _marked(output) if output in _incomplete(workdir) else ""


def _marked(output: str) -> str:
    return (f"Snakemake marks {output} incomplete (its job was cut off): `snakemake --cleanup-metadata {output}` "
            "(with your --configfile) keeps it as it is; `--rerun-incomplete` would train the cell again")  # fmt: skip


def _locked(workdir: Path) -> bool:
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def _directory_of(argv: list[str], cwd: Path) -> Path:
    """The working directory a snakemake command line runs in: its --directory, else its cwd."""
    for i, arg in enumerate(argv):
        if arg in ("--directory", "-d") and i + 1 < len(argv):
            return (cwd / argv[i + 1]).resolve()
        if arg.startswith("--directory="):
            return (cwd / arg.split("=", 1)[1]).resolve()
    return cwd.resolve()


def snakemake_processes(workdir: Path, proc: Path = Path("/proc")) -> list[int]:
    """The snakemake processes of this host that work in ``workdir``. Snakemake's lock files stay
    behind when it is killed, so they alone cannot tell a live run from a crashed one."""
    target, found = workdir.resolve(), []
    for entry in proc.glob("[0-9]*"):
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            if not any(Path(a).name == "snakemake" for a in argv[:3]):
                continue
            if _directory_of(argv, Path(os.readlink(entry / "cwd"))) == target:
                found.append(int(entry.name))
        except (OSError, ValueError):  # gone meanwhile, or another user's
            continue
    return sorted(found)


def _failed(log: Path) -> bool:
    if not log.exists():
        return False
    tail = log.read_text(errors="replace")[-4000:]
    return "Traceback (most recent call last)" in tail or "Error:" in tail


def last_step(run_dir: Path, log: Path) -> str:
    """The last step a training reached: its metrics.jsonl (embedded) or its log (verl)."""
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        lines = metrics.read_text().strip().splitlines()
        if lines:
            return str(json.loads(lines[-1])["step"])
    if log.exists():
        found = STEP.findall(log.read_text(errors="replace")[-20000:])
        if found:
            return found[-1][0]
    return "0"


def status(grid: Grid, workdir: str | Path = ".") -> dict:
    work = Path(workdir)
    incomplete, pids = _incomplete(work), snakemake_processes(work)
    running = bool(pids)
    res = grid.paths.root
    per_exp: dict[str, dict[str, int]] = {}
    active, stopped, durations, damaged, restorable, marked = [], [], [], [], [], []
    plans, shared = grid.plans, []
    fresh = Freshness(grid, work)
    left = 0  # runs not done
    for cell in grid.runs:  # the tuning stage's runs first (experiment "tuning")
        if plans[cell].shares is not None:  # no job of its own: it reports another cell's run
            shared.append(f"{cell.key} = {plans[cell].shares.key}")
            continue
        run = grid.paths.train_dir(cell.setting, cell.variant, cell.seed)
        out, log = (
            f"{run}/train.json",
            work / res / "logs" / "train" / cell.setting / cell.variant / f"s{cell.seed}.log",
        )
        if (work / out).exists():
            if not running and out in incomplete:
                marked.append(_marked(out))
            try:
                durations.append(json.loads((work / out).read_text()).get("seconds", 0.0))
                state = "stale" if fresh.training(cell) else "done"
                broken = model_problems(work / run)
                if broken:
                    state = "damaged"
                    damaged += [str(DamagedInput(Path(run) / Path(f).relative_to(work / run), why)) for f, why in broken]
            except (OSError, ValueError) as exc:
                state = "damaged"
                damaged.append(str(DamagedInput(out, f"unreadable ({exc})")))
        elif out in incomplete or (not _failed(log) and (runs.owner(work / run) or {}).get("complete") is False):
            # under way, or cut off: Snakemake's mark, or a run claimed and then killed without a word
            state = "running" if running and out in incomplete else "interrupted"
            step, total = last_step(work / run, log), training_runs.run_spec(grid, cell)["total_steps"]
            if state == "running":
                active.append((cell.key, step, total))
            else:
                stopped.append((cell.key, step, total, runs.last_checkpoint(work / run)))
        elif _failed(log):
            state = "failed"
        else:
            state = "pending"
        if state in ("failed", "interrupted", "pending") and (work / run).parent.is_dir():
            try:  # a rerun that failed: the finished run it replaced is kept, and can be put back
                restorable.append((run, os.path.relpath(runs.restorable(work / run), work)))
            except runs.RunMismatch:
                pass
        left += state != "done"  # once per run, though several experiments may name its cell
        for exp in cell.experiments:
            per_exp.setdefault(exp, dict.fromkeys(STATES, 0))
            per_exp[exp][state] += 1
    evals_done, evals_stale, evals = _evaluations(grid, work, fresh, damaged)
    mean = sum(durations) / len(durations) if durations else None
    remainder = mean * left / max(1, len(active)) if (mean and running) else None
    return {
        "missing_results": None if (work / res).is_dir() else str(work / res),
        "experiments": per_exp,
        "running_trainings": active,
        "interrupted_trainings": stopped,
        "evaluations": (evals_done, evals),
        "evaluations_stale": evals_stale,
        "stale": fresh.stale(),
        "damaged": damaged,
        "restorable": restorable,
        "marked_incomplete": marked,
        "shared": shared,
        "snakemake_running": running,
        "snakemake_pids": pids,
        "stale_lock": _locked(work) and not running,
        "wall": grid_wall_time(work / res, running),
        "critical_path": critical_path.render(work, res),
        "remaining_s": remainder,
        "servers": servers(grid, work),
    }


def _evaluations(grid: Grid, work: Path, fresh: Freshness, damaged: list[str]) -> tuple[int, int, int]:
    """Evaluation units done (every benchmark's record whole and fresh), stale, and in all; a
    damaged record is added to ``damaged``."""
    units = jobs.eval_units(grid)
    done = stale = 0
    for s, v, seed, ck in units:
        whole = True
        for b in grid.benchmarks_for(grid.settings[s].domain):
            path = Path(grid.paths.eval_dir(s, v, seed, ck)) / f"{b}.json"
            if not (work / path).exists():
                whole = False
                continue
            try:
                read_record(work / path)
            except DamagedInput as exc:
                whole = False
                damaged.append(str(DamagedInput(path, exc.why)))
        if whole and fresh.evaluation((s, v, seed, ck)):
            stale += 1
            whole = False
        done += whole
    return done, stale, len(units)


def servers(grid: Grid, work: Path) -> list[dict]:
    """The teacher servers the workflow starts (``teacher_server: serve``): up (its address answers
    and serves the model) or not, with their URL, the cells holding them now and the cells still
    to train."""
    out = []
    for model in grid.served:
        folder = work / grid.paths.server_dir(model)
        found = serving.live_server(folder, model)
        users = jobs.served_outputs(grid, model)
        holding = serving.read_leases(folder / "leases", time.time())[0]
        out.append({"model": model, "url": found["url"] if found else None, "holding": len(holding),
                    "users": len(users), "to_train": sum(not (work / u).exists() for u in users)})  # fmt: skip
    return out


def grid_wall_time(results: Path, running: bool) -> tuple[float, float] | None:
    """(start, end) of this results folder's jobs: the earliest start and the latest end among the
    jobs' benchmark files (each written at the job's end, holding its run time in seconds); the end
    is now while Snakemake runs. None when no job has finished here yet."""
    starts, ends = [], []
    for tsv in (results / "benchmarks").rglob("*.tsv") if (results / "benchmarks").is_dir() else []:
        try:
            seconds = float(tsv.read_text().splitlines()[1].split("\t")[0])
        except (OSError, IndexError, ValueError):
            continue
        end = tsv.stat().st_mtime
        starts.append(end - seconds)
        ends.append(end)
    if not starts:
        return None
    return min(starts), (time.time() if running else max(ends))


def render(st: dict) -> str:
    from datetime import datetime

    from scout.embedded.trainer import eta  # a second of imports that only rendering needs

    widths = {"done": 6, "stale": 7, "running": 9, "failed": 8, "interrupted": 13, "pending": 9, "damaged": 9}
    lines = [f"{'experiment':<18}" + "".join(f"{k:>{w}}" for k, w in widths.items())]
    if st.get("missing_results"):
        lines.insert(0, f"no results folder at {st['missing_results']}: nothing has run there (is the path right? "
                        "--results, the config's `results:` or --directory names it)")  # fmt: skip
    for exp, c in st["experiments"].items():
        lines.append(f"{exp:<18}" + "".join(f"{c[k]:>{w}}" for k, w in widths.items()))
    done, total = st["evaluations"]
    stale = f", {st['evaluations_stale']} stale" if st.get("evaluations_stale") else ""
    lines.append(f"evaluations: {done} of {total} done{stale}")
    if st.get("stale"):
        lines.append(f"stale (made with another spec than the config gives now; snakemake reruns them): "
                     f"{len(st['stale'])} results")  # fmt: skip
        for x in st["stale"][:STALE_SHOWN]:
            lines.append(f"  {x.kind} {x.key}: {'; '.join(x.why)}")
        if len(st["stale"]) > STALE_SHOWN:
            lines.append(f"  ... and {len(st['stale']) - STALE_SHOWN} more")
    for key, step, total_steps in st["running_trainings"]:
        lines.append(f"running: {key} at step {step}/{total_steps}")
    for key, step, total_steps, ckpt in st.get("interrupted_trainings", []):
        resumes = f"resumes from step {ckpt}" if ckpt else "starts again from step 0 (no checkpoint yet)"
        lines.append(f"interrupted: {key} at step {step}/{total_steps}; the next snakemake {resumes}")
    for d in st["damaged"]:
        lines.append(f"damaged: {d}")
    for hint in st.get("marked_incomplete", []):
        lines.append(f"marked: {hint}")
    for run, kept in st.get("restorable", []):
        lines.append(f"restorable: {run} has no train.json, and a finished run of its spec is kept ({kept}): "
                     f"`scout restore {run}` puts it back")  # fmt: skip
    if st["shared"]:
        lines.append(f"{len(st['shared'])} cells share another cell's run (trained and evaluated once): "
                     + ", ".join(st["shared"]))  # fmt: skip
    for sv in st.get("servers", []):
        left = f"{sv['to_train']} of its {sv['users']} cells still to train"
        if sv["url"]:
            lines.append(f"teacher server {sv['model']}: up at {sv['url']}, {sv['holding']} cells holding it; {left}")
        else:
            lines.append(f"teacher server {sv['model']}: not up; {left} (snakemake starts it beside them)")
    if st["snakemake_running"]:
        state = f"snakemake is running (pid {', '.join(map(str, st['snakemake_pids']))})"
    else:
        state = "no snakemake running on this host"
    if st.get("stale_lock"):
        lines.append("stale lock: .snakemake/locks is left from a snakemake that was killed or crashed, and no "
                     "snakemake works in this folder on this host; `snakemake --unlock` (with your --configfile) "
                     "clears it, then the next run resumes")  # fmt: skip
    if st["wall"] is None:
        wall = f"{state}; no job has finished in this results folder yet, so its wall time cannot be told"
    else:
        start, end = st["wall"]
        since = datetime.fromtimestamp(start).strftime("%Y-%m-%d %H:%M")
        wall = f"{state}; wall time {eta(end - start)} since the first job here started ({since})"
    if st["remaining_s"] is not None:
        wall += f", about {eta(st['remaining_s'])} of training left (mean finished job x jobs left / jobs running)"
    lines.append(wall)
    if st.get("critical_path"):
        lines.append(st["critical_path"])
    return "\n".join(lines)
