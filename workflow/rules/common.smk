# Shared helpers: validated config, the grid of cells, and the input/param functions rules use.
import json
import os
import re
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

from snakemake.exceptions import WorkflowError

from scout import config as scout_config
from scout import cost as scout_cost
from scout import grid, jobs, training_runs
from scout import resources as scout_resources
from scout import serving as scout_serving
from scout import teacher_server as scout_teacher_server
from scout import tracking as scout_tracking
from scout import tuning as scout_tuning
from scout import workflow as scout_workflow

_twice = " and ".join(scout_workflow.repeated_config_flags(sys.argv))
if _twice:
    raise scout_config.ConfigError(
        f"{_twice} given more than once: snakemake would keep only the last and drop the others silently; "
        f"give all values after one flag (--configfile A B, --config KEY=VALUE KEY=VALUE)"
    )
scout_config.validate(config)
grid.check(config)  # what only the resolved cells show (intervals a run never reaches, validation sets)
# The grid, resolved once (scout.grid.Grid): every input function below reads the same cells
GRID = grid.Grid.of(config)
CELLS = GRID.cells
RUNS = GRID.runs  # the grid's cells and the tuning stage's runs


def grid_now(cfg=None):
    """The grid of the config (or of ``cfg``, the config with tuning choices) as the prepared data
    stand now: a spec's steps per epoch read the training sets' metadata, which this run may have
    just written (``Grid.of`` hands out a new grid then, and the same one otherwise)."""
    return grid.Grid.of(config if cfg is None else cfg)


RES = GRID.paths.root
# Where metrics go (TensorBoard always; W&B, MLflow): exported to every job's environment, so
# changing it never reruns a job (scout.tracking)
scout_tracking.export(config.get("tracking", {}))
# Which settings' teachers are served (settings.*.teacher_server): also in the environment, not in the
# specs, so a served teacher retrains nothing (scout.teacher_server). A server the workflow starts
# (serve) is launched by its cells' await_teacher jobs and lives while this run needs it
# (scout.serving): the run's id names its heartbeat, and what runs that are gone left behind (an
# await flag would let a cell skip waiting for its server) is cleared before anything is planned.
SERVED = {m: jobs.teacher_server_spec(GRID, m) for m in GRID.served}
SERVED_CELLS = {(c.setting, c.variant, str(c.seed)): m for m in SERVED for c in jobs.served_users(GRID, m)}
scout_teacher_server.export(config, SERVED)
if workflow.is_main_process:  # a run of its own; its jobs (which read this file again) inherit it
    os.environ[scout_serving.RUN_ENV] = uuid.uuid4().hex[:12]
    if SERVED:
        scout_serving.clear_stale(RES)
RUN = os.environ.get(scout_serving.RUN_ENV, "")
# Jobs learn which checkout launched them; a warning here when the installed scout is another one
scout_workflow.export_environment(workflow.basedir)
# The code sandbox hides the results and data folders, wherever they are (scout.grading.sandbox)
scout_workflow.export_sandbox_hide(config, RES)
TUNED = scout_tuning.tuned_settings(config)  # setting -> LRs the tuning stage chooses
# A training or evaluation target outside the configured grid, named with the configs that define it
# (the command line's paths: Snakemake has not parsed its targets when this file is read)
_outside = scout_workflow.outside_grid(
    sys.argv[1:] if workflow.is_main_process else [],
    RES,
    {(c.setting, c.variant, c.seed) for c in RUNS},
    grid.BASE_VARIANTS,
    Path(workflow.basedir) / "config",
    [os.path.relpath(f) for f in workflow.overwrite_configfiles],
    lambda: jobs.eval_records(GRID),
)
if _outside:
    raise WorkflowError("not a run of this grid:\n  " + "\n  ".join(_outside))
INDEPENDENT = set(scout_tuning.independent_settings(config))  # settings whose jobs need no choice
TOY = config["world"] == "toy"


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"


def settings_of(domain):
    return [s for s, spec in config["settings"].items() if spec["domain"] == domain]


wildcard_constraints:
    setting=_alternatives(config["settings"]),
    variant=_alternatives({c.variant for c in RUNS} | set(grid.BASE_VARIANTS)),
    seed=r"\d+",
    ckpt=r"final|step\d+",
    model=_alternatives(config["models"]),
    dataset=r"[A-Za-z0-9_.-]+",


# -- software environments (snakemake --sdm conda) and output folders ----------------------------

# Paths are relative to the rule files (workflow/rules/). GPU rules get the gpu extra (verl, vLLM).
CPU_ENV = "../../envs/scout.yaml"
GPU_ENV = "../../envs/gpu.yaml"
BACKEND = GRID.backend
TRAIN_ENV = GPU_ENV if BACKEND.environment == "gpu" else CPU_ENV
EVAL_ENV = GPU_ENV if config["evaluation"].get("engine") == "vllm" else CPU_ENV


def folder_of(index=0):
    """A job's output folder, derived from one of its outputs (not spelled out a second time, so it
    follows the outputs wherever Snakemake stages them)."""

    def folder(wildcards, output):
        return str(Path(output[index]).parent)

    return folder


# -- cluster resources (profiles/slurm) ----------------------------------------------------------

METHOD_OF = {(c.setting, c.variant, str(c.seed)): c.method for c in RUNS}
SLURM_KEYS = tuple(scout_resources.slurm_resources(scout_resources.FALLBACK))  # always the same keys


def _job_resources(family, wc):
    if family == "pilot":  # a shape's pilot asks for what its first cell's job asks for
        family, wc = "train", pilot_cell(wc)
    if family != "train":
        return GRID.resources(family)
    method = METHOD_OF[(wc.setting, wc.variant, wc.seed)]
    return jobs.train_resources(grid_now(), wc.setting, method, wc.variant)  # a served verl cell: its student's pool


MAX_RUNTIME = scout_resources.max_runtime(config)


def cluster_resources(family):
    """A rule's `resources`, from the config's `resources` section: one function per key."""
    return {
        key: (lambda wc, key=key: scout_resources.slurm_resources(_job_resources(family, wc), MAX_RUNTIME)[key])
        for key in SLURM_KEYS
    }


def job_retries(family):
    """Snakemake's retries for a family of resumable jobs (training, teacher preparation) that run
    longer than `resources.max_runtime`: one more for each piece past the first, over the retries a
    failure gets (--retries, the profile's); None (those alone) where every job fits."""
    if family == "prepare_teacher":
        runtimes = [GRID.resources(family)["runtime"]]
    else:
        runtimes = [jobs.train_resources(GRID, c.setting, c.method, c.variant)["runtime"] for c in RUNS]
    base = workflow.execution_settings.retries if workflow.execution_settings else 0  # none in a dry run
    return scout_resources.retries(runtimes, MAX_RUNTIME, base)


def cluster_threads(family):
    return lambda wc: _job_resources(family, wc)["cpus_per_node"]


def launcher(family):
    """The command prefix of a training job, as its backend runs it (verl's driver against a Ray
    cluster over the job's nodes: `scout ray-run`; in-process: none)."""
    return lambda wc: BACKEND.launcher(config, _job_resources(family, wc))


def job_spec(job, spec):
    """A job's spec as a file named by its content (``@path``): the command line stays short, and a
    changed spec still reruns the job (its parameter, the path, changes)."""
    return scout_workflow.spec_file(RES, job, spec)


# -- tuning: the config with the choices a job's spec depends on (scout.tuning) -----------------


def choice_files(choices):
    return [str(scout_tuning.choice_path(config, s, p)) for s, p in choices]


def resolved(choices=None):
    """The config with the tuning stage's choices; a choice not made yet makes Snakemake run its
    search first (a checkpoint) and ask again."""
    for setting, param in [(s, p) for s, ps in TUNED.items() for p in ps] if choices is None else choices:
        checkpoints.choose_lr.get(setting=setting, param=param)
    return scout_tuning.resolve(config)


def _run_choices(wc):
    """The choices the spec of run (wc.setting, wc.variant, wc.seed) needs; None where none can
    (no tuned setting, or a base model's row)."""
    if not TUNED or wc.variant in grid.BASE_VARIANTS:
        return None
    return training_runs.choices_needed(grid_now(), GRID.find(wc.setting, wc.variant, wc.seed))


def grid_for(wc):
    """The grid a job of run (wc.setting, wc.variant, wc.seed) is specified with: the config's, or
    the config's with the tuning choices its spec needs."""
    choices = _run_choices(wc)
    return grid_now(None if choices is None else resolved(choices))


def train_priority(wc):
    """Long jobs first, and the tuning stage's chain first of all: its runs (3), then the cells of
    a tuned setting (2: their probes and evaluations come last otherwise), then the rest (1); the
    many short evaluations (0) fill the cores at the end of the grid."""
    if not TUNED:
        return 1
    cell = GRID.find(wc.setting, wc.variant, wc.seed)
    return 3 if grid.is_search(cell) else 1 if cell.setting in INDEPENDENT else 2


def run_choices(wc):
    """The choice files a run's job reads, as inputs. A changed choice reruns it through its spec,
    which holds the chosen LR; the file's time does not (ancient): a search that writes its choice
    again, the same LR, retrains nothing."""
    return [ancient(f) for f in choice_files(_run_choices(wc) or [])]


def _search_runs(setting, param):
    return [c for c in RUNS if grid.is_search(c) and c.setting == setting and scout_tuning.param_of(c.variant) == param]


def validate_spec(wc):
    spec = jobs.validation_spec(grid_for(wc), wc.setting, wc.variant, wc.seed)
    return job_spec(f"tuning/{wc.setting}/{wc.variant}/s{wc.seed}", spec)


def validate_inputs(wc):
    spec = jobs.validation_spec(grid_for(wc), wc.setting, wc.variant, wc.seed)
    files = [b["path"] for b in spec["benchmarks"].values()] + list(spec["disjoint_from"].values())
    return files + [f"{GRID.paths.train_dir(wc.setting, wc.variant, wc.seed)}/train.json"]


def choice_inputs(wc):
    return [jobs.validation_record(grid_now(), c) for c in _search_runs(wc.setting, wc.param)]


def choice_spec(wc):
    runs = _search_runs(wc.setting, wc.param)
    s = config["settings"][wc.setting]
    name, rows, repeats = jobs.validation_data(grid_now(), s["domain"])
    points = {}
    for c in runs:
        lr = dict(c.overrides)[scout_tuning.OVERRIDE[wc.param]]
        p = points.setdefault(lr, {"lr": lr, "variant": c.variant, "seeds": [], "records": []})
        p["seeds"].append(c.seed)
        p["records"].append(jobs.validation_record(grid_now(), c))
    before = scout_tuning.before(TUNED[wc.setting], wc.param)  # chosen before this search, which trained at them
    spec = {
        "setting": wc.setting,
        "param": wc.param,
        "method": scout_tuning.SEARCH_METHOD[wc.param],
        "validation": {"data": name, "rows": rows, "repeats": repeats},
        "fixed": {p: s[p] for p in scout_tuning.AFTER[wc.param] if p in s and p not in before},
        "fixed_by": {p: str(scout_tuning.choice_path(config, wc.setting, p)) for p in before},
        "points": list(points.values()),
    }
    return job_spec(f"tuning/{wc.setting}/{wc.param}", spec)


# -- data ---------------------------------------------------------------------------------------


def dataset_spec(wc):
    return job_spec(f"data/{wc.dataset}", jobs.data_spec(grid_now(), wc.dataset))


def holdout_inputs(wc):
    """A dataset with a validation slice reads its domain's test benchmarks (the slice skips their prompts)."""
    return jobs.data_spec(grid_now(), wc.dataset).get("tests", [])


# -- training -----------------------------------------------------------------------------------


def placed_job_spec(job, spec, family, wc):
    """A training job's spec file, with the resources its backend places itself by beside it (verl;
    not in the spec: a longer time limit retrains no finished run)."""
    return scout_workflow.placed_spec_file(RES, job, spec, BACKEND.placement(_job_resources(family, wc)))


def train_spec(wc):
    g = grid_for(wc)
    cell = jobs.trained_cell(g, wc.setting, wc.variant, wc.seed)
    return placed_job_spec(f"train/{cell.key}", jobs.train_job_spec(g, cell), "train", wc)


def cell_inputs(wc):
    g = grid_for(wc)
    return jobs.train_inputs(g, jobs.trained_cell(g, wc.setting, wc.variant, wc.seed)) + run_choices(wc)


def await_flag(wc):
    """A served cell's gate: the flag its await_teacher job writes once the server answers, so that
    the cell is submitted (and holds GPUs) only then. Temporary: planned exactly when the cell is."""
    model = SERVED_CELLS.get((wc.setting, wc.variant, wc.seed))
    return [f"{RES}/servers/{model}/await/{wc.setting}/{wc.variant}/s{wc.seed}.json"] if model else []


def train_inputs(wc):
    return cell_inputs(wc) + await_flag(wc)


# -- the calibration pilot (scout.cost): a few steps of each distinct training shape --------------

PILOTS = {(c.setting, c.variant): c for c in scout_cost.pilot_cells(GRID)}


def pilot_files():
    return [f"{GRID.paths.pilot_dir(s, v)}/train.json" for s, v in PILOTS]


def pilot_cell(wc):
    """The wildcards of a pilot's shape's first cell: its resources, inputs and gate are that cell's."""
    c = PILOTS[(wc.setting, wc.variant)]
    return SimpleNamespace(setting=c.setting, variant=c.variant, seed=str(c.seed))


def pilot_inputs(wc):
    """The cell's models and data (no LR choice: a pilot's pace does not depend on it; no shorter
    run: a pilot starts from step 0), and a served teacher's gate."""
    cell = PILOTS[(wc.setting, wc.variant)]
    return jobs.train_inputs(grid_now(), cell, continuation=False) + await_flag(pilot_cell(wc))


def pilot_spec(wc):
    cell = PILOTS[(wc.setting, wc.variant)]
    spec = scout_cost.pilot_spec(jobs.train_job_spec(grid_now(), cell))
    return placed_job_spec(f"pilot/{wc.setting}/{wc.variant}", spec, "pilot", wc)


def serving_start():
    """The run's start (onstart, never in a dry run): how its servers are launched, the heartbeat
    they live by; a GPU server on one machine is refused (it would share the cells' GPUs)."""
    if not SERVED:
        return
    executor = getattr(workflow.executor_plugin, "name", "local")
    how = "slurm" if executor == "slurm" else "local"
    if how == "local" and not workflow.local_exec:
        raise WorkflowError(
            f"teacher_server: serve launches its server through Slurm or on this machine, not through the {executor} "
            "executor: start the server yourself and give teacher_server: {url, model} (docs/cluster.md)"
        )
    gpu = sorted(m for m, s in SERVED.items() if s["gpus"])
    if how == "local" and gpu:
        raise WorkflowError(
            f"teacher_server: serve would start a GPU server of {', '.join(gpu)} on this machine, beside the cells, "
            "on the same GPUs (jobs of one machine are not given GPUs of their own). On one node, start the server "
            "yourself on GPUs you keep from the workflow (CUDA_VISIBLE_DEVICES=6,7 vllm serve ... --max-logprobs 20) "
            "and give its address instead: teacher_server: {url: http://localhost:8000, model: NAME} "
            "(docs/cluster.md); or run on Slurm (--profile profiles/slurm)."
        )
    os.environ[scout_serving.LAUNCH_ENV] = how
    scout_serving.start_run(RES, RUN)


def serving_end():
    """The run's end, successful or not (onsuccess, onerror): its servers stop once no other run
    needs them, and one still queued is cancelled."""
    if SERVED:
        scout_serving.end_run(RES, RUN)


def training_data():
    """Every dataset a training job reads (the preflight counts what verl keeps of them)."""
    names = {GRID.settings[s].train_data for s in jobs.settings_in_grid(grid_now())}
    models = GRID.models
    names |= {models[m].prepare["data"] for m in jobs.models_in_grid(grid_now()) if models[m].prepare}
    return sorted(GRID.paths.data(n) for n in names)


def preflight_files():
    return [f"{RES}/preflight.json"] if BACKEND.checks_cells else []


def teacher_spec(wc):
    return placed_job_spec(f"teachers/{wc.model}", jobs.teacher_job_spec(grid_now(), wc.model), "prepare_teacher", wc)


def teacher_inputs(wc):
    prep = GRID.models[wc.model].prepare
    return [GRID.paths.data(prep["data"])] + GRID.paths.model_inputs(prep["base"])


# -- evaluation ---------------------------------------------------------------------------------


def eval_spec(wc):
    spec = jobs.eval_spec(grid_for(wc), wc.setting, wc.variant, wc.seed, wc.ckpt)
    return job_spec(f"eval/{wc.setting}/{wc.variant}/s{wc.seed}/{wc.ckpt}", spec)


def eval_inputs(wc):
    jobs.check_evaluated(grid_for(wc), wc.setting, wc.variant, wc.seed, wc.ckpt)
    s = GRID.settings[wc.setting]
    data = [GRID.paths.data(b) for b in GRID.benchmarks_for(s.domain)]
    if wc.variant == "base-student":
        return data + GRID.paths.model_inputs(s.student)
    if wc.variant == "base-teacher":
        return data + GRID.paths.model_inputs(s.teacher)
    return data + [f"{GRID.paths.train_dir(wc.setting, wc.variant, wc.seed)}/train.json"]


def eval_outputs(domain):
    return [f"{RES}/eval/{{setting}}/{{variant}}/s{{seed}}/{{ckpt}}/{b}.json" for b in GRID.benchmarks_for(domain)]


def eval_records(wc=None):
    return jobs.eval_records(grid_now(resolved() if TUNED else None))


# The whole grid's report and summaries, or a selection's beside them (scout.paths.Paths.report_dir)
REPORT = str(GRID.paths.report_dir())
SUMMARY = str(GRID.paths.summary_dir())


def summary_files():
    return [f"{SUMMARY}/runs.csv", f"{SUMMARY}/methods.csv", f"{SUMMARY}/behaviour.csv"]


# -- analysis and report ------------------------------------------------------------------------


def _grid_of_setting(setting):
    return grid_now(resolved() if TUNED and setting not in INDEPENDENT else None)


def analysis_spec(wc):
    return job_spec(f"analysis/{wc.setting}", jobs.analysis_spec(_grid_of_setting(wc.setting), wc.setting))


def analysis_inputs(wc):
    return jobs.analysis_inputs(_grid_of_setting(wc.setting), wc.setting)


def independent_targets():
    """What the grid makes of the settings that need no choice, so that Snakemake starts it while
    the searches run (the report, which needs every choice, waits for them)."""
    if not TUNED:
        return []
    units = [u for u in jobs.eval_units(grid_now()) if u[0] in INDEPENDENT or u[1] in grid.BASE_VARIANTS]
    out = []
    for setting, variant, seed, ckpt in units:
        folder = GRID.paths.eval_dir(setting, variant, seed, ckpt)
        out += [f"{folder}/{b}.json" for b in GRID.benchmarks_for(GRID.settings[setting].domain)]
    probed = [s for s in GRID.analysis.settings if s in INDEPENDENT]
    return out + [f"{jobs.analysis_dir(GRID, s)}/{n}.csv" for s in probed for n in ("continuation", "entropy")]


def toy_pretrain_spec(wc):
    return job_spec(f"toy/pretrain-{wc.model}", jobs.toy_pretrain_spec(GRID, wc.model))


def config_spec():
    """The whole config, for the jobs that read all of it (preflight, report)."""
    return job_spec("config", config)


def tuning_files():
    """Every choice of the tuning stage (the report's sensitivity figure reads them)."""
    return choice_files([(s, p) for s, params in TUNED.items() for p in params])


def report_inputs(wc):
    """What the report reads: every choice first (a choice not made yet makes Snakemake run its
    search, then ask again), every evaluation record, and the teacher probes' tables."""
    return tuning_files() + eval_records() + analysis_files()


def analysis_files():
    settings = GRID.analysis.settings
    return [f"{jobs.analysis_dir(GRID, s)}/{name}.csv" for s in settings for name in ("continuation", "entropy")]


# -- report -------------------------------------------------------------------------------------


def report_files():
    """The PDF is an output only when it is required (report.pdf: true); with `auto` it is written
    where TeX is installed and the manifest says why it is not elsewhere."""
    out = [f"{REPORT}/manifest.json"]
    return out + ([f"{REPORT}/report.pdf"] if GRID.report.pdf is True else [])
