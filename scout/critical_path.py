"""The wall time a grid cannot go below, however many cores: its longest chain of jobs, each
waiting for the one before it (``scout status``, docs/toy-world.md).

Read from Snakemake's own records of the jobs it ran (``.snakemake/metadata``: each output's
rule, inputs, job and start and end times), so it covers every rule, benchmark file or not. On N
cores a grid takes about max(critical path, job-seconds / N).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Job:
    key: str  # the rule and its first output
    seconds: float
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]


def longest_chain(jobs: list[Job]) -> tuple[float, list[Job]]:
    """The chain of jobs, each an input's maker of the next, with the most seconds in all."""
    maker = {o: j for j in jobs for o in j.outputs}
    best: dict[str, tuple[float, list[Job]]] = {}

    def chain(job: Job, seen: frozenset = frozenset()) -> tuple[float, list[Job]]:
        if job.key in best:
            return best[job.key]
        before = [maker[i] for i in job.inputs if i in maker and maker[i].key not in seen and maker[i] is not job]
        head = max((chain(b, seen | {job.key}) for b in before), key=lambda c: c[0], default=(0.0, []))
        best[job.key] = (head[0] + job.seconds, [*head[1], job])
        return best[job.key]

    return max((chain(j) for j in jobs), key=lambda c: c[0], default=(0.0, []))


def read_jobs(workdir: str | Path = ".") -> list[Job]:
    """The jobs Snakemake recorded in a working directory, one per job (its outputs grouped)."""
    folder = Path(workdir) / ".snakemake" / "metadata"
    by_job: dict = {}
    for f in folder.glob("*") if folder.is_dir() else []:
        try:
            meta = json.loads(f.read_text())
            output = base64.b64decode(f.name).decode()
        except (ValueError, OSError):
            continue
        if meta.get("starttime") is None or meta.get("endtime") is None:
            continue
        j = by_job.setdefault((meta.get("rule"), meta.get("job_hash")),  # one job, several outputs
                              {"rule": meta.get("rule"), "outputs": [], "inputs": set(),
                               "start": meta["starttime"], "end": meta["endtime"]})  # fmt: skip
        j["outputs"].append(output)
        j["inputs"] |= set(meta.get("input") or [])
        j["start"], j["end"] = min(j["start"], meta["starttime"]), max(j["end"], meta["endtime"])
    return [Job(f"{j['rule']} {sorted(j['outputs'])[0]}", j["end"] - j["start"], tuple(j["outputs"]),
                tuple(j["inputs"])) for j in by_job.values()]  # fmt: skip


def render(workdir: str | Path = ".", results: str | None = None) -> str:
    """The critical path as ``scout status`` prints it; empty where Snakemake has recorded no job.
    With ``results``, only jobs with an output in that folder count: one working directory's
    records hold every grid run from it (the toy grid's beside the paper's)."""
    jobs = read_jobs(workdir)
    if results is not None:
        inside = str(Path(results)).rstrip("/") + "/"
        jobs = [j for j in jobs if any(o.startswith(inside) for o in j.outputs)]
    if not jobs:
        return ""
    total, chain = longest_chain(jobs)
    work = sum(j.seconds for j in jobs)
    steps = " -> ".join(f"{j.key.split()[0]} ({j.seconds:.0f} s)" for j in chain)
    return (f"critical path: {total:,.0f} s, the wall time no number of cores goes below ({steps}); the jobs "
            f"took {work:,.0f} job-seconds, so N cores need about max({total:,.0f}, {work:,.0f} / N) s")  # fmt: skip
