"""What a job is expected to cost, beside the Slurm time limit it requests (``scout plan``).

Two estimates, each saying what it rests on:

- **modelled**, for a named GPU type (``GPUS``, or ``TFLOPS:GB`` for another): a training step's
  FLOPs (rollout, the student's update, the teacher's scoring, SCOUT's teacher phase amortised
  over its interval) at an assumed share of the GPUs' dense bf16 peak, plus a fixed start-up;
  an evaluation's decoding likewise. Rough: good to tell a 100-GPU-hour job from a 1,000 one;
- **measured** by the calibration pilot (``snakemake pilot``, docs/real-models.md): a few steps of
  every distinct training shape, run as the grid's own jobs on the user's machines, record their
  step times and the job's start-up; a job is then start-up plus its steps at that pace.

Step times move as responses lengthen or shorten during training, so the pilot predicts from
where training starts: on a fresh toy grid its 24 shapes (43 s on 2 cores) put the 89 training
jobs at 2,371 job-seconds against 2,710 measured (``benchmarks/pilot_accuracy.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scout import backends, jobs, training_runs
from scout.grid import Grid, is_search
from scout.methods import METHODS


@dataclass(frozen=True)
class GPU:
    name: str
    tflops: float  # dense bf16 peak
    mem_gb: float


# Vendor datasheet dense bf16 peaks (no sparsity); SXM parts
GPUS = {
    "a100-40": GPU("A100 40GB", 312.0, 40),
    "a100-80": GPU("A100 80GB", 312.0, 80),
    "h100": GPU("H100 80GB", 989.0, 80),
    "h200": GPU("H200 141GB", 989.0, 141),
}
DEFAULT_GPU = "a100-40"  # the paper config's resources (gpu_mem_gb: 40)

# ASSUMPTIONS of the modelled estimate (shares of the peak each phase reaches, and fixed costs)
DECODE_MFU = 0.10  # generation is memory-bound: vLLM at large batch
PREFILL_MFU = 0.40  # scoring given tokens (a teacher's log-probs, old log-probs)
TRAIN_MFU = 0.35  # FSDP forward + backward with activation checkpointing (8 FLOPs a parameter and token)
MEAN_FILL = 0.5  # mean prompt and response lengths as shares of their limits
START_MIN = 10.0  # a job's start: Ray, loading models, engines' warm-up
EXPORT_MIN = 2.0  # one checkpoint's conversion to Hugging Face format


def gpu(name: str) -> GPU:
    """A preset (``GPUS``) or ``TFLOPS:GB`` for another GPU; a bad name says what is known."""
    if name in GPUS:
        return GPUS[name]
    try:
        tflops, mem = (float(x) for x in name.split(":"))
    except ValueError:
        raise SystemExit(f"unknown GPU {name!r}: one of {', '.join(GPUS)}, or TFLOPS:GB (dense bf16 peak "
                         "and memory, e.g. 450:48)") from None  # fmt: skip
    return GPU(f"custom {tflops:g} TFLOPs {mem:g} GB", tflops, mem)


# ------------------------------------------------------------------------------------------------
# Modelled
# ------------------------------------------------------------------------------------------------


def model_params(grid: Grid, model: str) -> float | None:
    """Parameters of a model in billions (``models.<id>.params``; a prepared teacher has its
    base's), or None where the config does not say."""
    m = grid.models[model]
    return model_params(grid, m.base) if m.base else m.params


def model_arch(grid: Grid, model: str) -> dict | None:
    """A model's architecture (``models.<id>.arch``: its config.json's keys; a prepared teacher has
    its base's), or None where the config does not say."""
    m = grid.models[model]
    return model_arch(grid, m.base) if m.base else m.arch



def step_flops(spec: dict, student: float, teacher: float) -> dict[str, float]:
    """FLOPs of one training step by phase, for models of ``student`` and ``teacher`` parameters.
    Keys are the phases; each divides by its own share of the peak (``MFUS``)."""
    seqs = spec["batch_size"] * spec["n"]
    full = seqs * MEAN_FILL * (spec["max_prompt_length"] + spec["max_response_length"])
    generated = seqs * MEAN_FILL * spec["max_response_length"]
    method = METHODS[spec["method"]]
    out = {
        "decode": 2 * student * generated,
        "prefill": 2 * student * full,  # old log-probs
        "train": 8 * student * full * spec["ppo_epochs"],
    }
    if method.needs_teacher:
        out["prefill"] += 2 * teacher * full
    if method.trains_teacher:  # k continuations a prompt, every `interval` steps
        sc = spec["method_cfg"]["scout"]
        every = max(1, sc["interval"])
        cont = spec["batch_size"] * sc["k"] * MEAN_FILL
        out["decode"] += 2 * teacher * cont * spec["max_response_length"] / every
        out["train"] += 8 * teacher * cont * (spec["max_prompt_length"] + spec["max_response_length"]) / every
    return out


MFUS = {"decode": DECODE_MFU, "prefill": PREFILL_MFU, "train": TRAIN_MFU}


def modelled_train_seconds(spec: dict, student: float, teacher: float, gpus: int, g: GPU) -> float:
    """A training job: start-up, its steps (all the job's GPUs at work on each) and its exports."""
    steps = spec["total_steps"] - (spec.get("continue_from") or {}).get("step", 0)
    per_step = sum(f / (gpus * g.tflops * 1e12 * MFUS[k]) for k, f in step_flops(spec, student, teacher).items())
    exports = len(spec.get("export_steps", [])) + 1
    return START_MIN * 60 + steps * per_step + exports * EXPORT_MIN * 60


def modelled_eval_seconds(spec: dict, student: float, gpus: int, g: GPU) -> float:
    """An evaluation job: start-up and decoding every question's samples."""
    samples = sum(b["rows"] * b["repeats"] for b in spec["benchmarks"].values())
    tokens = samples * MEAN_FILL * spec["sampling"]["max_new_tokens"]
    return START_MIN * 60 + 2 * student * tokens / (gpus * g.tflops * 1e12 * DECODE_MFU)


# ------------------------------------------------------------------------------------------------
# Measured: the calibration pilot
# ------------------------------------------------------------------------------------------------

PILOT_STEPS = 4  # at least; a method with a teacher phase runs whole intervals


def pilot_steps(spec: dict, steps: int = PILOT_STEPS) -> int:
    """Steps a pilot runs: at least ``steps``, a whole number of SCOUT's teacher intervals, so
    that its mean step carries the teacher's updates in their share."""
    if not METHODS[spec["method"]].trains_teacher:
        return steps
    every = max(1, spec["method_cfg"]["scout"]["interval"])
    return every * math.ceil(steps / every)


def pilot_spec(spec: dict, steps: int = PILOT_STEPS) -> dict:
    """A training job's spec cut to a pilot: its first steps, one save and one export at the end,
    nothing continued. An LR still being tuned is set to a stand-in: a step's time does not depend
    on it."""
    n = pilot_steps(spec, steps)
    out = {**spec, "total_steps": n, "save_every": n, "export_steps": []}
    out.pop("continue_from", None)
    if isinstance(out.get("lr"), str):
        out["lr"] = 1e-6
    sc = out.get("method_cfg", {}).get("scout", {})
    if isinstance(sc.get("teacher_lr"), str):
        out["method_cfg"] = {**out["method_cfg"], "scout": {**sc, "teacher_lr": 1e-6}}
    return out


@dataclass(frozen=True)
class Pilot:
    """One shape's measurement: the job's wall seconds (Snakemake's benchmark), its steps' seconds
    (the run's own record), and its peak memory."""

    setting: str
    variant: str
    steps: int
    job_seconds: float
    step_seconds: float  # mean over the pilot's steps
    start_seconds: float  # the rest of the job: process start, loading, the save and export
    max_rss_mb: float | None
    peak_gpu_gb: float | None

    def seconds(self, steps: int) -> float:
        return self.start_seconds + steps * self.step_seconds


def read_pilot(folder: Path, setting: str, variant: str, backend: backends.Backend) -> Pilot | None:
    """A finished pilot of a shape (``{folder}/train.json`` and Snakemake's ``benchmark.tsv``), with
    its steps' seconds and peak GPU memory as its backend reads them; None if it has not run."""
    steps = backend.step_seconds(str(folder))
    if not (folder / "train.json").exists() or not (folder / "benchmark.tsv").exists() or not steps:
        return None
    b = pd.read_csv(folder / "benchmark.tsv", sep="\t").iloc[0]
    job, mean = float(b["s"]), sum(steps) / len(steps)
    rss = float(b["max_rss"]) if str(b.get("max_rss", "-")) not in ("-", "nan") else None
    return Pilot(setting, variant, len(steps), job, mean, max(job - sum(steps), 0.0), rss,
                 backend.peak_gpu_gb(str(folder)))  # fmt: skip


def pilots_table(pilots: list[Pilot]) -> pd.DataFrame:
    return pd.DataFrame([p.__dict__ for p in pilots]).astype({"max_rss_mb": float, "peak_gpu_gb": float})


def pilot_cells(grid: Grid) -> list:
    """One cell per distinct training shape (setting and variant; seeds cost alike), the first
    seed of each that trains a run of its own; the tuning stage's search runs are their
    settings' shapes at other LRs."""
    plans = grid.plans
    shapes: dict = {}
    for c in grid.runs:
        if plans[c].shares is None and not is_search(c):
            shapes.setdefault((c.setting, c.variant), c)
    return list(shapes.values())


def read_pilots(grid: Grid) -> dict[tuple[str, str], Pilot]:
    """The pilots that have run for this grid's shapes, by (setting, variant)."""
    backend = grid.backend
    out = {}
    for c in pilot_cells(grid):
        p = read_pilot(grid.paths.pilot_dir(c.setting, c.variant), c.setting, c.variant, backend)
        if p is not None:
            out[(c.setting, c.variant)] = p
    return out


# ------------------------------------------------------------------------------------------------
# A job's expected seconds, from the pilot where it ran, else from the model
# ------------------------------------------------------------------------------------------------


def expected_seconds(grid: Grid, rule: str, unit, resources: dict, g: GPU,
                     pilots: dict[tuple[str, str], Pilot]) -> tuple[float | None, str]:  # fmt: skip
    """A job's expected wall seconds and what the figure rests on ("pilot", "model", or "" where
    neither can say: a job the pilot did not run and whose models' sizes the config does not give)."""
    gpus = resources["nodes"] * resources["gpus_per_node"]
    if rule == "train":
        spec = training_runs.run_spec(grid, unit)
        steps = spec["total_steps"] - (spec.get("continue_from") or {}).get("step", 0)
        pilot = pilots.get((unit.setting, unit.variant))
        if pilot is not None:
            return pilot.seconds(steps), "pilot"
        s = grid.settings[unit.setting]
        student, teacher = model_params(grid, s.student), model_params(grid, s.teacher)
        if not gpus or student is None or teacher is None:
            return None, ""
        return modelled_train_seconds(spec, student * 1e9, teacher * 1e9, gpus, g), "model"
    if rule == "evaluate":
        setting, variant, seed, ckpt = unit
        s = grid.settings[setting]
        evaluated = model_params(grid, s.teacher if variant == "base-teacher" else s.student)
        if not gpus or evaluated is None:
            return None, ""
        return modelled_eval_seconds(jobs.eval_spec(grid, setting, variant, seed, ckpt), evaluated * 1e9, gpus, g), "model"
    return None, ""
