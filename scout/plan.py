"""What the whole grid requests from the cluster, before anything is submitted: every job with its
time limit, nodes and GPUs (``scout.resources``), the disk its checkpoints take at their largest,
what sharing runs saves, and the GPUs SCOUT's teacher takes by how it trains (``scout plan``)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import pandas as pd

from scout import cost, jobs, runs, schema, training_runs
from scout import teacher_cost as tc
from scout.grid import Cell, Grid, is_search
from scout.methods import LORA_TARGETS, METHODS
from scout.resources import max_runtime, pieces

# ------------------------------------------------------------------------------------------------
# Disk: what a training run's checkpoints hold at their largest
# ------------------------------------------------------------------------------------------------

# A resumable checkpoint (verl's FSDP one) holds fp32 weights and Adam's two fp32 moments per
# parameter; an evaluated export holds bf16 weights.
CHECKPOINT_BYTES_PER_PARAM = 12
EXPORT_BYTES_PER_PARAM = 2


def peak_disk_gb(grid: Grid, cell: Cell, keep: str | None = None) -> float | None:
    """The most disk a cell's training run holds at once, in GB: the latest checkpoint and the next
    one while it is written (the latest is deleted only after the next is whole), each of the
    student and, for a method that trains it, the teacher; the checkpoints the grid evaluates,
    kept with their optimizer state until the run exports them at its end, unless
    ``training.keep_checkpoints`` (or ``keep``) is ``exported`` (each exported when it is saved);
    and the student's bf16 exports of every evaluated checkpoint. None where a model's size is not
    in the config."""
    config = grid.config
    setting = grid.settings[cell.setting]
    student = cost.model_params(grid, setting.student)
    teacher = cost.model_params(grid, setting.teacher) if METHODS[cell.method].trains_teacher else 0.0
    if student is None or teacher is None:
        return None
    evaluated = len(runs.checkpoint_steps(training_runs.run_spec(grid, cell)))
    kept = 0 if (keep or schema.setting(config, "training.keep_checkpoints")) == "exported" else evaluated
    checkpoints = (kept + 2) * (student + teacher) * CHECKPOINT_BYTES_PER_PARAM
    exports = (evaluated + 1) * student * EXPORT_BYTES_PER_PARAM
    return checkpoints + exports  # billions of parameters x bytes = GB


def evaluated_for(grid: Grid, cell: Cell) -> str:
    """Why a run holds intermediate checkpoints: each cell of the whole grid that evaluates them (a
    selection keeps the whole grid's runs), with its experiment and cadence; empty where none."""
    whole = grid.whole
    own = grid.in_whole(cell) or cell
    users = [own] + [o for o, p in whole.plans.items() if own in (p.shares, p.continues)]
    out = []
    for u in users:
        spec = whole.spec(u)
        steps = runs.checkpoint_steps(spec)
        probes = [s for s in spec.get("probe_steps", []) if s in steps]
        how = [f"{len(steps) - len(probes)} every {spec['eval_every']} steps"] if len(steps) > len(probes) else []
        how += [f"the analysis' probes at step {', '.join(map(str, probes))}"] if probes else []
        if steps:
            out.append(f"{u.variant} ({u.experiments[0]}: {' and '.join(how)})")
    return "; ".join(out)


# ------------------------------------------------------------------------------------------------
# The plan: every job of the grid with what it requests
# ------------------------------------------------------------------------------------------------


def _rows(grid: Grid) -> list[dict]:
    """(experiment, rule, target, resources) of every Slurm job of the grid; local rules (data
    preparation, aggregation, report) request no cluster time and are left out."""
    at = grid.paths
    res = at.root
    rows = []

    def add(experiment, rule, target, r, disk=None, users=None, unit=None):
        rows.append({"experiment": experiment, "rule": rule, "target": target, **r, "peak_disk_gb": disk, "users": users,
                     "unit": unit})  # fmt: skip

    models = grid.models
    used = jobs.models_in_grid(grid)  # a reduced experiment's only
    prepared = [m for m in used if models[m].prepare]
    if at.world == "toy":
        toy = grid.resources("toy")
        add("toy world", "toy_data", f"{res}/toy/data", toy)
        add("toy world", "toy_tokenizer", f"{res}/toy/tokenizer/tokenizer.json", toy)
        for m in sorted(m for m in used if models[m].toy):
            add("toy world", "toy_pretrain", f"{at.model(m)}/model.safetensors", toy)
    for m in prepared:
        add("teachers", "prepare_teacher", f"{at.teacher_dir(m)}/train.json", grid.resources("prepare_teacher"))
    for m in grid.served:  # launched by its cells, up while they train
        add("teachers", "serve_teacher", str(at.server_dir(m)),
            grid.resources("teacher_server"), users=jobs.served_outputs(grid, m))  # fmt: skip
    experiment_of = {}
    plans = grid.plans
    for c in grid.runs:  # the tuning stage's runs first (experiment "tuning")
        experiment_of[(c.setting, c.variant, str(c.seed))] = c.experiments[0]
        if plans[c].shares is not None:  # trained (and evaluated) as another cell
            continue
        r = jobs.train_resources(grid, c.setting, c.method, c.variant)
        target = f"{at.train_dir(c.setting, c.variant, c.seed)}/train.json"
        add(c.experiments[0], "train", target, r, peak_disk_gb(grid, c), unit=c)
        rows[-1].update(exported_disk_gb=peak_disk_gb(grid, c, "exported"), kept_for=evaluated_for(grid, c))
        if is_search(c):
            add("tuning", "validate", jobs.validation_record(grid, c), grid.resources("evaluate"))
    for setting, variant, seed, ckpt in jobs.eval_units(grid):
        first = grid.benchmarks_for(grid.settings[setting].domain)[0]
        target = f"{at.eval_dir(setting, variant, seed, ckpt)}/{first}.json"
        add(experiment_of.get((setting, variant, seed), "base"), "evaluate", target, grid.resources("evaluate"),
            unit=(setting, variant, seed, ckpt))  # fmt: skip
    for s in grid.analysis.settings:
        add(
            "analysis",
            "analysis",
            f"{jobs.analysis_dir(grid, s)}/continuation.csv",
            grid.resources("analysis"),
        )
    return rows


def grid_jobs(
    grid: Grid,
    exists: Callable[[str], bool] = os.path.exists,
    stale: frozenset[str] = frozenset(),
    gpu: cost.GPU | None = None,
    pilots: dict | None = None,
) -> pd.DataFrame:
    """One row per job: what it requests (time limit x nodes x GPUs) and whether its output is
    already there and fresh (``stale``: the targets whose outputs another spec made,
    ``scout.freshness``). Requested hours are upper bounds: a job that ends early gives the rest
    back. With a ``gpu``, also what each job is expected to take (``scout.cost``: the ``pilots``'
    measurements where they ran, else the model for that GPU), and on what that rests."""
    df = pd.DataFrame(_rows(grid))
    df["gpus"] = df["nodes"] * df["gpus_per_node"]
    df["gpu_hours"] = df["gpus"] * df["runtime"] / 60
    df["node_hours"] = df["nodes"] * df["runtime"] / 60
    if gpu is not None:
        found = [cost.expected_seconds(grid, r["rule"], r["unit"], r, gpu, pilots or {}) for r in df.to_dict("records")]
        df["expected_hours"] = [s / 3600 if s is not None else math.nan for s, _ in found]
        df["expected_gpu_hours"] = df["expected_hours"] * df["gpus"]
        df["basis"] = [b for _, b in found]
    df = df.drop(columns="unit")
    df["stale"] = [t in stale for t in df["target"]]
    df["done"] = [all(exists(u) and u not in stale for u in users) if users else exists(t) and not st
                  for t, st, users in zip(df["target"], df["stale"], df["users"], strict=True)]  # fmt: skip
    return df.drop(columns="users")


def sharing(grid: Grid) -> str:
    """What sharing runs saves (``Grid.plans``): the jobs and requested GPU-hours of training
    every cell on its own, against the plan."""
    config = grid.config
    alone = Grid.of({**config, "training": {**config["training"], "share_runs": False}})
    alone = grid_jobs(alone, exists=lambda _: False)
    shared = grid_jobs(grid, exists=lambda _: False)
    plans = grid.plans
    n_shared = sum(p.shares is not None for p in plans.values())
    n_cont = sum(p.continues is not None for p in plans.values())
    if not n_shared and not n_cont:
        return "Every cell trains a run of its own (no two cells have the same training spec)."
    keys = [f"{c.key} = {p.shares.key}" for c, p in plans.items() if p.shares is not None]
    keys += [f"{c.key} continues {p.continues.key}" for c, p in plans.items() if p.continues is not None]
    saved = alone["gpu_hours"].sum() - shared["gpu_hours"].sum()
    return (
        f"Shared runs: {n_shared} cells share another cell's run and {n_cont} continue a shorter one; "
        f"{len(alone) - len(shared)} jobs fewer, {saved:,.0f} GPU-hours fewer requested:\n  " + "\n  ".join(keys)
    )


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: jobs (all and still to run) and the GPU- and node-hours still to request."""
    todo = table[~table["done"]]
    order = list(dict.fromkeys(table["experiment"]))
    out = pd.DataFrame(
        {
            "jobs": table.groupby("experiment").size(),
            "to_run": todo.groupby("experiment").size(),
            "max_nodes": todo.groupby("experiment")["nodes"].max(),
            "gpu_hours": todo.groupby("experiment")["gpu_hours"].sum(),
            "node_hours": todo.groupby("experiment")["node_hours"].sum(),
        }
    ).reindex(order)
    out = out.fillna(0).astype({"jobs": int, "to_run": int, "max_nodes": int})
    out.loc["total"] = [
        len(table),
        len(todo),
        int(todo["nodes"].max() if len(todo) else 0),
        *todo[["gpu_hours", "node_hours"]].sum(),
    ]
    out.index.name = "experiment"
    return out


def render(table: pd.DataFrame) -> str:
    """The plan as the text ``scout plan`` prints: per experiment, then per rule and size."""
    todo = table[~table["done"]]
    if not len(todo):
        return f"Nothing to run: all {len(table)} jobs of the grid have their outputs, made with the config's specs."
    by_shape = todo.groupby(["rule", "nodes", "gpus_per_node", "runtime"]).size().rename("jobs").reset_index()
    lines = [
        "Jobs and requested hours still to run (hours = Slurm time limit x nodes [x GPUs]; an upper bound):",
        summary(table).to_string(float_format=lambda x: f"{x:,.0f}"),
        "",
        "Job shapes still to run (runtime in minutes):",
        by_shape.to_string(index=False),
    ]
    if table["stale"].any():
        lines[0:0] = [f"{int(table['stale'].sum())} of them rerun because their outputs are stale (made with another "
                      "spec than the config gives now; scout status says why).", ""]  # fmt: skip
    disk = disk_table(todo)
    if len(disk):
        lines += [
            "",
            f"Peak disk per training run still to run (GB; checkpoints at {CHECKPOINT_BYTES_PER_PARAM} B/parameter, "
            f"exports at {EXPORT_BYTES_PER_PARAM}). A run keeps each checkpoint the grid evaluates (kept_for: the "
            "cells that evaluate it, the compute-matched curves and the analysis' probes; a selection keeps the "
            "whole grid's) with its optimizer state until training ends and exports it; training.keep_checkpoints: "
            "exported converts each when it is saved instead (exported_disk_gb), and the run can then no longer "
            "resume, or be continued, from those steps (docs/cluster.md):",
            disk.to_string(index=False, float_format=lambda x: f"{x:,.0f}"),
        ]
    return "\n".join(lines)


def render_expected(table: pd.DataFrame, gpu: cost.GPU, pilots: dict) -> str:
    """What the jobs still to run are expected to take, per job shape, beside what they request;
    each figure says whether the pilot measured it or the model gave it."""
    todo = table[~table["done"]]
    if "expected_hours" not in todo or not todo["expected_hours"].notna().any():
        return ("Expected cost: none to give (no pilot has run for these jobs, and the config gives no model sizes "
                "to model them with); run the calibration pilot: snakemake pilot (docs/real-models.md).")  # fmt: skip
    d = todo.assign(over=todo["expected_hours"] * 60 > todo["runtime"], basis=todo["basis"].replace("", "none"))
    shapes = (
        d.groupby(["rule", "nodes", "gpus_per_node", "runtime", "basis"])
        .agg(jobs=("target", "size"), requested_gpu_h=("gpu_hours", "sum"), expected_gpu_h=("expected_gpu_hours", "sum"),
             expected_job_h=("expected_hours", "sum"), over_limit=("over", "sum"))
        .reset_index()
    )  # fmt: skip
    known = d[d["expected_hours"].notna()]
    lines = [
        f"Expected cost of the jobs still to run (expected_* from the pilot's measurements where it ran, else modelled "
        f"for {gpu.name}; requested_gpu_h is the upper bound above; over_limit: jobs expected to outlast their "
        "time limit):",
        shapes.to_string(index=False, float_format=lambda x: f"{x:,.2f}" if x < 10 else f"{x:,.0f}"),
        f"Expected in all: {known['expected_gpu_hours'].sum():,.0f} GPU-hours ({known['expected_hours'].sum():,.2f} job-hours) "
        f"for {len(known)} of {len(d)} jobs, against {d['gpu_hours'].sum():,.0f} GPU-hours requested.",
    ]  # fmt: skip
    if (d["basis"] == "model").any():
        lines.append(
            f"  model: {gpu.name}, {gpu.tflops:g} TFLOPs dense bf16 a GPU; decoding at {cost.DECODE_MFU:.0%} of it, "
            f"scoring at {cost.PREFILL_MFU:.0%}, training (8 FLOPs a parameter and token) at {cost.TRAIN_MFU:.0%}; "
            f"sequences at {cost.MEAN_FILL:.0%} of their length limits; {cost.START_MIN:g} min to start and "
            f"{cost.EXPORT_MIN:g} a checkpoint export. An assumption, not a measurement: scout plan --gpu names "
            "another GPU; the pilot measures yours."
        )
    if pilots:
        lines.append(f"  pilot: {len(pilots)} training shapes measured (results/pilot; snakemake pilot): a job is its "
                     "start-up plus its steps at the pilot's mean step. What each measured (seconds; peak memory: "
                     "the job's processes on the host, its trainers on a GPU):")  # fmt: skip
        shown = cost.pilots_table(list(pilots.values()))
        lines.append(shown.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:,.2f}"))
    if (d["basis"] == "none").any():
        lines.append("  none: jobs neither the pilot nor the model covers (no pilot of their shape, no model sizes).")
    return "\n".join(lines)


def disk_table(table: pd.DataFrame) -> pd.DataFrame:
    """Training runs grouped by their peak disk and why (one row per size, largest first): the
    runs, the disk they hold together at their peaks, what each would hold with its evaluated
    checkpoints exported when saved, and the cells that evaluate its intermediate checkpoints."""
    train = table[(table["rule"] == "train") & table["peak_disk_gb"].notna()].copy()
    if not len(train):
        return pd.DataFrame()
    parts = train["target"].str.split("/")
    train["run"] = parts.str[-4] + "/" + parts.str[-3] + "/" + parts.str[-2]
    out = (
        train.groupby(["peak_disk_gb", "exported_disk_gb", "kept_for"])
        .agg(runs=("run", "size"), examples=("run", lambda r: ", ".join(list(r)[:2]) + (", ..." if len(r) > 2 else "")))
        .reset_index()
        .sort_values("peak_disk_gb", ascending=False)
    )
    out["all_at_once_gb"] = out["runs"] * out["peak_disk_gb"]
    out["kept_for"] = out["kept_for"].replace("", "-")
    return out[["peak_disk_gb", "runs", "all_at_once_gb", "exported_disk_gb", "examples", "kept_for"]]


# ------------------------------------------------------------------------------------------------
# SCOUT's teacher: GPUs per training job by how the teacher trains and where it sits
# ------------------------------------------------------------------------------------------------


def teacher_options(grid: Grid) -> pd.DataFrame:
    """Per setting the grid trains SCOUT on: OPD's training job, SCOUT's as configured, and the
    fewest nodes for a full teacher, a LoRA one, and each on the engine's GPUs (``scout.teacher_cost``):
    nodes, GPUs, GPU-hours at the requested runtime, what the teacher's trainer holds per GPU and
    what each weight sync moves. Empty where the config gives no sizes (the toy world)."""
    config = grid.config
    lora = config["methods"]["scout"].get("teacher_lora") or {}
    rows = []
    scout_settings = dict.fromkeys(c.setting for c in grid.cells if METHODS[c.method].trains_teacher)
    for setting in scout_settings:
        teacher = grid.settings[setting].teacher
        params, arch = cost.model_params(grid, teacher), cost.model_arch(grid, teacher)
        opd = grid.resources("train", setting, "opd", "opd")
        sc = grid.resources("train", setting, "scout", "scout")
        if params is None or arch is None or not sc["gpus_per_node"] or not sc.get("gpu_mem_gb"):
            continue
        tr = config["training"]
        tokens = (grid.settings[setting].max_prompt_length or tr["max_prompt_length"]) + tr["max_response_length"]
        gpus = opd["nodes"] * opd["gpus_per_node"]
        rows.append({"setting": setting, "option": "OPD", "nodes": opd["nodes"], "gpus": gpus,
                     "gpu_hours": tc.gpu_hours(gpus, opd["runtime"])})  # fmt: skip
        found = tc.options(params, arch, tokens, sc["nodes"], sc["gpus_per_node"], sc["gpu_mem_gb"],
                           lora.get("rank", schema.default("methods.scout.teacher_lora.rank")), lora.get("target_modules") or LORA_TARGETS, opd["nodes"])  # fmt: skip
        for o in found:
            rows.append({"setting": setting, "option": o.name, "nodes": o.nodes, "gpus": o.gpus,
                         "gpu_hours": tc.gpu_hours(o.gpus, sc["runtime"]), "trainer_gpus": o.trainer_gpus,
                         "state_gib": o.state_gib_per_gpu, "activation_gib": o.activation_gib, "sync_mib": o.sync_mib,
                         "fits": "yes" if o.fits else "no"})  # fmt: skip
    return pd.DataFrame(rows)


def render_teacher_options(grid: Grid) -> str:
    """``teacher_options`` as ``scout plan`` prints it (empty where there is nothing to cost)."""
    table = teacher_options(grid)
    if not len(table):
        return ""
    head = (f"SCOUT's teacher: GPUs per training job (GPU-hours at the requested runtime; scout/teacher_cost.py). "
            f"The teacher's trainer fits when its state ({tc.TRAINED_BYTES} B a trained parameter, {tc.FROZEN_BYTES} B "
            f"a frozen one, per GPU) and one micro-batch's activations take at most {tc.USABLE:.0%} of a GPU; 'shared' "
            f"puts it on the engine's GPUs (the engine sleeps while it trains); sync: what one teacher update sends "
            f"to the engine.")  # fmt: skip
    return head + "\n" + table.to_string(index=False, na_rep="", float_format=lambda x: f"{x:,.1f}")


# ------------------------------------------------------------------------------------------------
# A served teacher: the frozen-teacher cells of a teacher scoring against one server
# ------------------------------------------------------------------------------------------------


def teacher_servers(grid: Grid) -> pd.DataFrame:
    """Per teacher model: its frozen-teacher training jobs' requested GPU-hours with an engine each,
    and with one server on a node of its own instead (the jobs keep their student's GPUs; the
    server runs as long as the longest job, once per wave of as many students as it keeps up with,
    ``teacher_cost.students_per_server`` at the pace the requested runtime allows). Empty where
    the config gives no sizes (the toy world)."""
    plans = grid.plans
    by_teacher: dict[str, list] = {}
    for c in grid.cells:
        if METHODS[c.method].scores_with_frozen_teacher and plans[c].shares is None:
            by_teacher.setdefault(grid.settings[c.setting].teacher, []).append(c)
    rows = []
    for teacher, cells in by_teacher.items():
        params = cost.model_params(grid, teacher)
        res = [grid.resources("train", c.setting, c.method, c.variant) for c in cells]
        if params is None or not all(r["gpus_per_node"] for r in res):
            continue
        own = sum(tc.gpu_hours(r["nodes"] * r["gpus_per_node"], r["runtime"]) for r in res)
        places = [tc.placement(c.method, r) for c, r in zip(cells, res, strict=True)]
        students = sum(tc.gpu_hours(p["student_nodes"] * p["student_gpus"], r["runtime"])
                       for p, r in zip(places, res, strict=True))  # fmt: skip
        server_gpus = max(r["gpus_per_node"] for r in res)
        rate = tc.scored_tokens_per_second(params * 1e9, server_gpus)
        keep_up = []
        for c, r in zip(cells, res, strict=True):
            spec = grid.spec(c)
            tokens = spec["batch_size"] * spec["n"] * tc.MEAN_FILL * (spec["max_prompt_length"] + spec["max_response_length"])
            keep_up.append(tc.students_per_server(rate, tokens, r["runtime"] * 60 / spec["total_steps"]))
        waves = math.ceil(len(cells) / min(keep_up))
        server = tc.gpu_hours(server_gpus, max(r["runtime"] for r in res)) * waves
        rows.append({"teacher": teacher, "jobs": len(cells), "gpu_hours_own_engines": own,
                     "gpu_hours_one_server": students + server, "server_gpus": server_gpus,
                     "tokens_per_s": rate, "students_per_server": min(keep_up), "waves": waves})  # fmt: skip
    return pd.DataFrame(rows)


def render_teacher_servers(grid: Grid) -> str:
    """``teacher_servers`` as ``scout plan`` prints it, with the totals and the model's assumptions."""
    table = teacher_servers(grid)
    if not len(table):
        return ""
    own, shared = table["gpu_hours_own_engines"].sum(), table["gpu_hours_one_server"].sum()
    config = grid.config
    own_engines = {**config, "settings": {k: {**v, "teacher_server": None} for k, v in config["settings"].items()}}
    whole = grid_jobs(Grid.of(own_engines), exists=lambda _: False)["gpu_hours"].sum()  # the same with serving on
    head = (f"A teacher server per teacher (settings.*.teacher_server; docs/cluster.md): the frozen-teacher jobs "
            f"request {own:,.0f} GPU-hours with an engine each, {shared:,.0f} with one server per teacher "
            f"({own - shared:,.0f} fewer; the whole grid {whole:,.0f} -> {whole - own + shared:,.0f}). Modelled throughput: scoring is prefill, 2 FLOPs a parameter and token "
            f"at {tc.PREFILL_MFU:.0%} of {tc.PEAK_TFLOPS:g} TFLOPs a GPU, sequences at {tc.MEAN_FILL:.0%} of their "
            f"length limits, a student step as long as the requested runtime allows (a faster step means fewer "
            f"students per server).")  # fmt: skip
    fmt = {"gpu_hours_own_engines": "{:,.0f}", "gpu_hours_one_server": "{:,.0f}", "tokens_per_s": "{:,.0f}"}
    shown = table.assign(**{k: table[k].map(v.format) for k, v in fmt.items()})
    return head + "\n" + shown.to_string(index=False)


def render_server_limits(grid: Grid) -> str:
    """For each teacher the workflow serves: how long its server must live, from the cells it serves,
    beside its Slurm time limit (docs/cluster.md sizes it so)."""
    lines = []
    for m in grid.served:
        cells = jobs.served_users(grid, m)
        if not cells:
            continue
        runtimes = [grid.resources("train", c.setting, c.method, c.variant)["runtime"] for c in cells]
        limit = min(grid.resources("teacher_server")["runtime"], max_runtime(grid.config) or 10**9)
        short = " (shorter than its longest cell: each of its runs outlives it)" if limit < max(runtimes) else ""
        lines.append(f"  {m}: {len(cells)} cells; it must live from the first to start to the last to end: at least "
                     f"the longest cell, {max(runtimes) / 60:,.1f} h, at most all of them one after another, "
                     f"{sum(runtimes) / 60:,.1f} h; its time limit: {limit / 60:,.1f} h{short}")  # fmt: skip
    if not lines:
        return ""
    return ("Teacher servers the workflow starts (teacher_server: serve): each is launched by the first of its cells "
            "that a run trains and lives while they need it; near its time limit (resources.teacher_server.runtime) "
            "it launches its successor and hands over once it answers (teacher_serving.handover_minutes before). "
            "Give it the waves of cells that run at once, and no more than your cluster's limit:\n"
            + "\n".join(lines))  # fmt: skip


RESUMABLE = ("train", "prepare_teacher")  # jobs that resume from their last checkpoint when cut off


def render_time_limit(grid: Grid, table: pd.DataFrame) -> str:
    """Under ``resources.max_runtime``: the jobs still to run that ask for longer, submitted with the
    partition's limit; a training runs in pieces across Snakemake's retries, anything else must fit."""
    limit = max_runtime(grid.config)
    todo = table[~table["done"]] if len(table) else table
    if not limit or not len(todo):
        return ""
    long = todo[todo["runtime"] > limit]
    lines = []
    for rule, rows in long.groupby("rule", sort=False):
        most = max(pieces(int(t), limit) for t in rows["runtime"])
        if rule in RESUMABLE:
            lines.append(f"  {rule}: {len(rows)} jobs in up to {most} pieces of {limit} min, each resuming from the "
                         "last checkpoint (a queue wait and a restart a piece; verl's trainer saves before the limit)")  # fmt: skip
        else:
            lines.append(f"  {rule}: {len(rows)} jobs ask for up to {rows['runtime'].max():,} min and do not resume: "
                         f"cut off at {limit} min, they fail; shorten them or raise max_runtime")  # fmt: skip
    if not lines:
        return ""
    return f"Jobs longer than the partition's limit (resources.max_runtime: {limit} min), submitted with it:\n" + "\n".join(lines)
