"""What each job of the workflow is given and needs, from the grid of cells (``scout.grid``): the
units the rules expand (evaluations, validations, teacher probes), each job's spec (its params, which
the results record, so that what exists can be compared with what the config asks for now:
``scout.freshness``), its inputs, and where a cell's run and records live once runs are shared.
"""

from __future__ import annotations

import json
from pathlib import Path

from scout import schema, serving, tuning
from scout.config import HOLDOUT, ConfigError, validation_sets
from scout.grid import BASE_VARIANTS, CONTROL, Cell, Grid, chat_options, data_view, teacher_prep_spec, view_key
from scout.methods import METHODS
from scout.resources import max_runtime
from scout.runs import checkpoint_steps, checkpoints
from scout.training_runs import run_spec, serves


def data_spec(grid: Grid, name: str) -> dict:
    """What ``scout prepare-data`` needs for one dataset or benchmark: its entry, the source, and for
    a training set the views verl will load it through (tokenizer, chat options, prompt limit), so
    that preparation counts the rows verl's overlong-prompt filter keeps. A dataset with a
    ``holdout`` is written without its validation slice, and ``DATASET.holdout`` is that slice
    (``part``); both skip rows whose prompt is a test prompt (``tests``)."""
    part = "holdout" if name.endswith(HOLDOUT) else "train"
    base = name.removesuffix(HOLDOUT)
    entry = grid.config.get("datasets", {}).get(base) or grid.config["benchmarks"][base]
    spec = {"name": base, **entry, **grid.config.get("data", {})}
    if entry.get("holdout"):
        spec["part"] = part
        spec["tests"] = [grid.paths.data(b) for b in grid.benchmarks_for(entry["domain"])]
    if part == "holdout":
        return spec
    if name in grid.config.get("datasets", {}):
        spec["views"] = sorted(
            {json.dumps(v, sort_keys=True): v for v in _training_views(grid, name)}.values(), key=view_key
        )
    return spec


def _training_views(grid: Grid, data: str) -> list[dict]:
    out = []
    for s in grid.settings.values():
        if s.train_data == data:
            out.append(data_view(grid.config, s.student, s.max_prompt_length or grid.config["training"]["max_prompt_length"]))
    for m in grid.models.values():
        if m.prepare and m.prepare["data"] == data:
            out.append(data_view(grid.config, m.base, grid.config["training"]["max_prompt_length"]))
    return out


def train_resources(grid: Grid, setting: str, method: str, variant: str) -> dict:
    """What a training job asks for: its configured resources, as its backend places them (a verl
    cell scoring against a teacher server asks for its student's pool alone)."""
    served = bool(grid.settings[setting].teacher_server) and METHODS[method].scores_with_frozen_teacher
    res = grid.resources("train", setting, method, variant)
    return grid.backend.train_resources(method, res, served)


def train_job_spec(grid: Grid, cell: Cell) -> dict:
    """The spec of a cell's training job: what it computes. Where it runs (its resources, which
    the verl backend places its pools by) travels apart (``Backend.placement``)."""
    return run_spec(grid, cell)


def teacher_job_spec(grid: Grid, model_id: str) -> dict:
    """The spec of a teacher-preparation job (its resources apart, as a training job's)."""
    return teacher_prep_spec(grid.config, model_id)


def served_users(grid: Grid, model_id: str) -> list[Cell]:
    """The training runs that score against the server the workflow starts for a teacher model."""
    settings = grid.served.get(model_id, [])
    plans = grid.plans
    return [c for c in grid.runs if c.setting in settings and plans[c].shares is None
            and METHODS[c.method].scores_with_frozen_teacher]  # fmt: skip


def served_outputs(grid: Grid, model_id: str) -> list[str]:
    """The ``train.json`` of each run a workflow-started server serves: when all exist, it is not needed."""
    return sorted(f"{grid.paths.train_dir(c.setting, c.variant, c.seed)}/train.json" for c in served_users(grid, model_id))


def teacher_server_spec(grid: Grid, model_id: str) -> dict:
    """The spec of a teacher server the workflow starts (``scout serve-teacher``, launched by
    ``scout.serving``): the teacher's weights, long enough contexts and enough top-k for its users,
    where its files go, and its job's resources."""
    users = served_users(grid, model_id)
    specs = [grid.spec(c) for c in users]
    lengths = [s["max_prompt_length"] + s["max_response_length"] for s in specs]
    options = grid.config.get("teacher_serving", {})
    r = grid.resources("teacher_server")
    sections = [grid.method_settings(c) for c in users]
    topk = [m.topk for s in sections for m in (s.get("prune_opd"), s.get("optr")) if m]
    results = str(Path(grid.paths.root).resolve())
    return {
        "model": model_id,
        "path": grid.paths.model(model_id) if grid.models[model_id].hub
        else str(Path(grid.paths.model(model_id)).resolve()),  # a Slurm job may start elsewhere
        "results": results,
        "folder": str(serving.folder(results, model_id)),
        "max_model_len": max(lengths, default=1) + 1,
        "max_logprobs": max([20, *topk]),
        "gpus": r["nodes"] * r["gpus_per_node"],
        "resources": {k: r[k] for k in ("nodes", "gpus_per_node", "cpus_per_node", "mem_mb")}
        | {"runtime": min(r["runtime"], max_runtime(grid.config) or r["runtime"])},  # a server at its limit is launched again
        **{k: options[k] for k in ("idle_minutes", "start_minutes", "handover_minutes", "args", "engine", "sbatch")
           if k in options},
    }


def toy_pretrain_spec(grid: Grid, model_id: str) -> dict:
    """The spec of a toy model's pretraining job."""
    res = grid.paths.root
    return {
        "arch": grid.models[model_id].toy,
        "tokenizer": f"{res}/toy/tokenizer",
        "data": [grid.paths.data(s) for s in grid.config["toy"]["pretrain_mix"]],
        "seed": grid.config["toy"]["seed"],
    }


def record_source(grid: Grid, setting: str, variant: str, seed: str | int, ckpt: str) -> tuple[str, str, str, str]:
    """The evaluated unit whose records stand for this one: itself, or the run it shares or
    continues from (its step N in the shorter run's naming: ``final`` at that run's last step)."""
    if variant in BASE_VARIANTS:
        return setting, variant, str(seed), ckpt
    cell = grid.find(setting, variant, int(seed))
    plan = grid.plans[cell]
    if plan.shares is not None:
        s = plan.shares
        return record_source(grid, s.setting, s.variant, s.seed, ckpt)
    if plan.continues is not None:
        step = grid.spec(cell)["total_steps"] if ckpt == "final" else int(ckpt[4:])
        base = grid.spec(plan.continues)
        if step <= base["total_steps"]:
            name = "final" if step == base["total_steps"] else f"step{step}"
            s = plan.continues
            return record_source(grid, s.setting, s.variant, s.seed, name)
    return setting, variant, str(seed), ckpt


def trained_cell(grid: Grid, setting: str, variant: str, seed: str | int) -> Cell:
    """The cell of a training job; a cell whose run is another cell's has no job of its own."""
    cell = grid.find(setting, variant, int(seed))
    owner = grid.plans[cell].shares
    if owner is not None:
        raise ConfigError(f"{cell.key} shares the run of {owner.key} (the same training spec): target that one")
    return cell


def train_inputs(grid: Grid, cell: Cell, continuation: bool = True) -> list[str]:
    """What a training job reads: its data, its models, and the shorter run a continuation starts from."""
    s = grid.settings[cell.setting]
    out = [grid.paths.data(s.train_data), *grid.paths.model_inputs(s.student), *grid.paths.model_inputs(s.teacher)]
    start = grid.plans[cell].continues if continuation else None
    if start is not None:
        out.append(f"{grid.paths.train_dir(start.setting, start.variant, start.seed)}/train.json")
    return out


def check_evaluated(grid: Grid, setting: str, variant: str, seed: str | int, ckpt: str) -> None:
    """Refuse an evaluation job for a unit whose records are another run's (a shared run)."""
    source = record_source(grid, setting, variant, seed, ckpt)
    if source != (setting, variant, str(seed), ckpt):
        s, v, n, c = source
        raise ConfigError(f"{setting}/{variant}/s{seed}/{ckpt} is evaluated as {s}/{v}/s{n}/{c} (a shared run): "
                          "target that one")  # fmt: skip


def shared_runs(grid: Grid) -> dict[tuple[str, str], tuple[str, str]]:
    """(setting, variant) -> (setting, variant) whose runs it reports, for variants that train none of
    their own (every seed shares another cell's run): the tables say so."""
    plans = grid.plans
    out: dict[tuple[str, str], set] = {}
    for c in grid.cells:
        s = plans[c].shares
        out.setdefault((c.setting, c.variant), set()).add((s.setting, s.variant) if s else None)
    return {k: next(iter(v)) for k, v in out.items() if len(v) == 1 and None not in v}



def _base_units(grid: Grid) -> list[tuple[str, str, str, str]]:
    """The untrained student and teacher of each setting the grid trains (a reduced experiment,
    ``select``, evaluates and reports its own settings only)."""
    used = {c.setting for c in grid.cells}
    return [(setting, v, "0", "final") for setting in grid.settings if setting in used for v in BASE_VARIANTS]


def report_units(grid: Grid) -> list[tuple[str, str, str, str]]:
    """(setting, variant, seed, checkpoint) of every result the report shows: base rows and every
    cell's checkpoints, whichever run they come from (``record_source``)."""
    units = _base_units(grid)
    for cell in grid.cells:
        units += [(cell.setting, cell.variant, str(cell.seed), ck) for ck in checkpoints(grid.spec(cell))]
    return units


def settings_in_grid(grid: Grid) -> list[str]:
    """The settings a job of the grid touches: those its cells train and those its teacher probes
    visit (a reduced experiment, ``select``, builds the models and data of these only)."""
    used = {c.setting for c in grid.cells} | set(grid.analysis.settings)
    return [s for s in grid.settings if s in used]


def models_in_grid(grid: Grid) -> list[str]:
    """The models the grid's jobs load: teacher and student of each setting it touches, and the base
    each prepared teacher starts from (what pretraining, teacher preparation and data serve)."""
    settings = [grid.settings[s] for s in settings_in_grid(grid)]
    used = {m for s in settings for m in (s.teacher, s.student)}
    used |= {grid.models[m].base for m in used if grid.models[m].base}
    return sorted(used)


def eval_units(grid: Grid) -> list[tuple[str, str, str, str]]:
    """(setting, variant, seed, checkpoint) of every evaluation job: base rows and the checkpoints
    of every run that is trained (a shared run is evaluated once, under the cell that trains it)."""
    units = _base_units(grid)
    plans = grid.plans
    for cell in grid.runs:
        if plans[cell].shares is None and serves(grid, cell):  # a tuning run the grid does not use: validation only
            spec = run_spec(grid.alone, cell)  # a selection evaluates what it uses
            units += [(cell.setting, cell.variant, str(cell.seed), ck) for ck in checkpoints(spec)]
    return units


def eval_records(grid: Grid) -> list[str]:
    """Every evaluation record the grid writes (one per unit and benchmark of its domain)."""
    out = []
    for setting, variant, seed, ckpt in eval_units(grid):
        domain = grid.settings[setting].domain
        out += [f"{grid.paths.eval_dir(setting, variant, seed, ckpt)}/{b}.json" for b in grid.benchmarks_for(domain)]
    return out


def engine_device(grid: Grid) -> dict:
    """Where a transformers engine runs (``evaluation.device``): in the spec only away from the
    CPU, its default, so that specs made before the key keep their digests; vLLM places itself."""
    ev = grid.evaluation
    if ev.engine != "transformers" or ev.device == schema.default("evaluation.device"):
        return {}
    return {"device": ev.device}


def eval_spec(grid: Grid, setting: str, variant: str, seed: str | int, ckpt: str) -> dict:
    """Everything an evaluation job needs: model, benchmarks with their files and sampling."""
    s = grid.settings[setting]
    evaluated = s.teacher if variant == "base-teacher" else s.student
    run_dir, step = None, None
    if variant in BASE_VARIANTS:
        model = grid.paths.model(evaluated)
    else:
        run_dir = grid.paths.train_dir(setting, variant, seed)
        model = f"{run_dir}/model/{ckpt}"
        cell = grid.find(setting, variant, int(seed))
        step = int(ckpt[4:]) if ckpt.startswith("step") else grid.spec(cell)["total_steps"]
    method = variant
    if variant not in BASE_VARIANTS:
        method = grid.find(setting, variant, int(seed)).method
    return {
        "world": grid.paths.world,
        "setting": setting,
        "variant": variant,
        "method": method,
        "seed": int(seed),
        "checkpoint": ckpt,
        "model": model,
        "domain": s.domain,
        "benchmarks": {
            b: {**grid.config["benchmarks"][b], "path": grid.paths.data(b), "repeats": _repeats(grid, b, ckpt)}
            for b in grid.benchmarks_for(s.domain)
        },
        "sampling": grid.evaluation.sampling,
        "engine": grid.evaluation.engine,
        **engine_device(grid),
        "engine_options": grid.evaluation.engine_options or {},
        "chat": chat_options(grid.config, evaluated),
        "threads": schema.setting(grid.config, "training.threads"),
        "run_dir": run_dir,  # evaluation results are logged into the training run they evaluate
        "step": step,
    }


def validation_data(grid: Grid, domain: str) -> tuple[str, int, int]:
    """(dataset, rows, repeats) of a domain's validation set (``tuning.validation``)."""
    v = grid.config["tuning"]["validation"][domain]
    return v["data"], validation_sets(grid.config)[v["data"]]["rows"], v["repeats"]


def validation_record(grid: Grid, cell: Cell) -> str:
    """The record of a tuning run's validation (the workflow's ``validate`` output)."""
    name, _, _ = validation_data(grid, grid.settings[cell.setting].domain)
    return f"{tuning.validation_dir(grid.config, cell.setting, cell.variant, cell.seed)}/validation/{name}.json"


def validation_spec(grid: Grid, setting: str, variant: str, seed: str | int) -> dict:
    """A tuning run's evaluation on its domain's validation set: the final checkpoint, the test
    benchmarks' files named so that the job refuses a validation prompt that is also a test one."""
    s = grid.settings[setting]
    name, rows, repeats = validation_data(grid, s.domain)
    spec = eval_spec(grid, setting, variant, seed, "final")
    spec["disjoint_from"] = {b: v["path"] for b, v in spec["benchmarks"].items()}
    spec["benchmarks"] = {name: {"domain": s.domain, "rows": rows, "repeats": repeats,
                                 "path": grid.paths.data(name)}}  # fmt: skip
    spec["run_dir"] = None  # the run's tracking logs its test evaluations only
    return spec


def _repeats(grid: Grid, benchmark: str, ckpt: str) -> int:
    """Samples per question: the benchmark's ``repeats`` at final checkpoints, whose precision the
    tables and claims rest on; ``evaluation.intermediate_repeats`` (fewer) at the curves' points."""
    full = grid.benchmarks[benchmark].repeats
    if ckpt == "final":
        return full
    fewer = grid.evaluation.intermediate_repeats
    return full if fewer is None else min(full, fewer)


def analysis_dir(grid: Grid, setting: str) -> str:
    return f"{grid.paths.root}/analysis/{setting}"


def analysis_spec(grid: Grid, setting: str) -> dict:
    """The teacher probes of one setting: the initial teacher on the initial student's and its own
    responses to one benchmark (the base rows' evaluation generations), and each SCOUT run's
    trained teacher on the initial and the final student's responses."""
    a = grid.analysis
    bench = a.benchmark
    teacher = grid.settings[setting].teacher
    return {
        "setting": setting,
        "teacher": grid.paths.model(teacher),
        "benchmark_path": grid.paths.data(bench),
        "student_generations": f"{grid.paths.eval_dir(setting, 'base-student', 0, 'final')}/{bench}.generations.jsonl",
        "teacher_generations": f"{grid.paths.eval_dir(setting, 'base-teacher', 0, 'final')}/{bench}.generations.jsonl",
        "runs": [
            {
                "seed": seed,
                "checkpoint": ckpt,
                "teacher": f"{run_dir(grid, setting, 'scout', seed)}/model/{ckpt}-teacher",
                "generations": f"{source_dir(grid, setting, 'scout', seed, ckpt)}/{bench}.generations.jsonl",
            }
            for seed in probed_seeds(grid, setting, "scout")
            for ckpt in _probed_checkpoints(grid, setting, seed)
        ],
        # other trained teachers, probed on the initial student's prefixes: the prefix-0 control's
        # (label "control") and each LoRA teacher's (labelled by its variant)
        "controls": [
            {"label": label, "seed": seed, "teacher": f"{run_dir(grid, setting, variant, seed)}/model/final-teacher"}
            for variant, label in compared_teachers(grid, setting)
            for seed in probed_seeds(grid, setting, variant)
        ],
        "ratios": list(a.ratios),
        "split": schema.setting(grid.config, "methods.scout.split"),  # prefixes cut as SCOUT cuts them
        "answer_marker": grid.config["methods"]["scout"].get("answer_marker", {}).get(grid.settings[setting].domain),
        "k": a.k,
        "responses": a.responses,
        "questions": a.questions,
        "max_new_tokens": a.max_new_tokens,
        "sampling": {"temperature": grid.evaluation.temperature, "top_p": grid.evaluation.top_p},
        "engine_options": grid.evaluation.engine_options or {},
        "engine": grid.evaluation.engine,
        **engine_device(grid),
        "chat": chat_options(grid.config, teacher),
        "threads": schema.setting(grid.config, "training.threads"),
    }


def probed_seeds(grid: Grid, setting: str, variant: str) -> list[int]:
    """The seeds of a variant whose trained teachers the probes visit: ``analysis.seeds`` where the
    config limits them (a claim's extra seeds need not all be probed), else every seed."""
    seeds = grid.seeds.get((setting, variant), [])
    wanted = grid.analysis.seeds
    return [s for s in seeds if wanted is None or s in wanted]


def compared_teachers(grid: Grid, setting: str) -> list[tuple[str, str]]:
    """(variant, probe label) of the trained teachers the probes set beside SCOUT's on a setting: the
    prefix-0 control's, then every SCOUT variant whose teacher trains LoRA adapters."""
    out = [(CONTROL, "control")] if (setting, CONTROL) in grid.seeds else []
    lora = {c.variant for c in grid.cells
            if c.setting == setting and c.method == "scout" and dict(c.overrides).get("teacher_lora_rank")}  # fmt: skip
    return out + [(v, v) for v in sorted(lora)]


def probe_labels(checkpoint: str) -> tuple[str, str]:
    """(teacher, prefixes) labels of a SCOUT run's ``checkpoint`` in the analysis' continuation.csv;
    the final checkpoint keeps the plain names ("scout", "final-student")."""
    if checkpoint == "final":
        return "scout", "final-student"
    return f"scout@{checkpoint}", f"student@{checkpoint}"


def _probed_checkpoints(grid: Grid, setting: str, seed: int) -> list[str]:
    """The matched checkpoints of a SCOUT run the probes visit (``analysis.checkpoints``) and final."""
    spec = grid.spec(grid.find(setting, "scout", seed))
    return [f"step{s}" for s in checkpoint_steps(spec) if s in spec.get("probe_steps", [])] + ["final"]


def analysis_inputs(grid: Grid, setting: str) -> list[str]:
    bench = grid.analysis.benchmark
    out = [grid.paths.data(bench)] + grid.paths.model_inputs(grid.settings[setting].teacher)
    out += [f"{grid.paths.eval_dir(setting, v, 0, 'final')}/{bench}.json" for v in BASE_VARIANTS]
    for variant, _ in compared_teachers(grid, setting):
        out += [f"{run_dir(grid, setting, variant, seed)}/train.json" for seed in probed_seeds(grid, setting, variant)]
    for seed in probed_seeds(grid, setting, "scout"):
        out.append(f"{run_dir(grid, setting, 'scout', seed)}/train.json")
        out += [
            f"{source_dir(grid, setting, 'scout', seed, c)}/{bench}.json"
            for c in _probed_checkpoints(grid, setting, seed)
        ]
    return out


def run_owner(grid: Grid, setting: str, variant: str, seed: int | str) -> Cell:
    """The cell whose job trains a cell's run: itself, or the one it shares (a tuning run, say)."""
    cell = grid.find(setting, variant, int(seed))
    return grid.plans[cell].shares or cell


def run_dir(grid: Grid, setting: str, variant: str, seed: int | str) -> str:
    """The folder of the run a cell's training is (``run_owner``'s)."""
    owner = run_owner(grid, setting, variant, seed)
    return grid.paths.train_dir(owner.setting, owner.variant, owner.seed)


def source_dir(grid: Grid, setting: str, variant: str, seed: int | str, ckpt: str) -> str:
    """The evaluation folder whose records stand for a unit's (``record_source``)."""
    return grid.paths.eval_dir(*record_source(grid, setting, variant, seed, ckpt))
