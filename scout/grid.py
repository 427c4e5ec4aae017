"""Config -> the list of experiment cells, their resolved specs, and where their outputs live.

The Snakefile's targets, the workflow rules and the aggregation all read this one module, so a
cell exists in exactly one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scout import tuning
from scout.algorithms import scaled_teacher_lr
from scout.config import ConfigError, deep_merge
from scout.methods import METHODS
from scout.runs import NOT_WEIGHTS

BASE_VARIANTS = ("base-student", "base-teacher")
CONTROL = "opd_teacher_grpo"  # the prefix-0 control, whose teacher the probes compare with SCOUT's
# A LoRA teacher's adapters by default: every linear map of a Qwen3 layer (attention's four, the MLP's three)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_OVERRIDE_KEYS = ("interval", "epochs", "eval_every", "teacher_lr", "student_lr", "teacher_lora_rank")


@dataclass(frozen=True)
class Cell:
    """One training run: setting x variant (a method with overrides) x seed."""

    setting: str
    variant: str
    method: str
    seed: int
    overrides: tuple[tuple[str, object], ...] = ()
    experiments: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.setting}/{self.variant}/s{self.seed}"


# ------------------------------------------------------------------------------------------------
# Paths (relative to the working directory; `results` is the config's output folder)
# ------------------------------------------------------------------------------------------------


def train_dir(config: dict, setting: str, variant: str, seed: int | str) -> str:
    return f"{config.get('results', 'results')}/train/{setting}/{variant}/s{seed}"


def eval_dir(config: dict, setting: str, variant: str, seed: int | str, ckpt: str) -> str:
    return f"{config.get('results', 'results')}/eval/{setting}/{variant}/s{seed}/{ckpt}"


def data_path(config: dict, name: str) -> str:
    folder = "toy/data" if config["world"] == "toy" else "data"
    return f"{config.get('results', 'results')}/{folder}/{name}.jsonl"


HOLDOUT = ".holdout"  # DATASET.holdout: the validation slice a dataset's `holdout` keeps apart


def data_spec(config: dict, name: str) -> dict:
    """What ``scout prepare-data`` needs for one dataset or benchmark: its entry, the source, and for
    a training set the views verl will load it through (tokenizer, chat options, prompt limit), so
    that preparation counts the rows verl's overlong-prompt filter keeps. A dataset with a
    ``holdout`` is written without its validation slice, and ``DATASET.holdout`` is that slice
    (``part``); both skip rows whose prompt is a test prompt (``tests``)."""
    part = "holdout" if name.endswith(HOLDOUT) else "train"
    base = name.removesuffix(HOLDOUT)
    entry = config.get("datasets", {}).get(base) or config["benchmarks"][base]
    spec = {"name": base, **entry, **config.get("data", {})}
    if entry.get("holdout"):
        spec["part"] = part
        spec["tests"] = [data_path(config, b) for b in benchmarks_for(config, entry["domain"])]
    if part == "holdout":
        return spec
    if name in config.get("datasets", {}):
        spec["views"] = sorted(
            {json.dumps(v, sort_keys=True): v for v in _training_views(config, name)}.values(), key=view_key
        )
    return spec


def _training_views(config: dict, data: str) -> list[dict]:
    out = []
    for s in config["settings"].values():
        if s["train_data"] == data:
            out.append(_view(config, s["student"], s.get("max_prompt_length", config["training"]["max_prompt_length"])))
    for spec in config["models"].values():
        if spec.get("prepare", {}).get("data") == data:
            out.append(_view(config, spec["prepare"]["base"], config["training"]["max_prompt_length"]))
    return out


def _view(config: dict, model_id: str, max_prompt_length: int) -> dict:
    return {"tokenizer": model_path(config, model_id), "chat": chat_options(config, model_id),
            "max_prompt_length": max_prompt_length}  # fmt: skip


def view_key(view: dict) -> str:
    """How the prepared data's metadata names one view (tokenizer | prompt limit | chat options)."""
    return f"{view['tokenizer']}|{view['max_prompt_length']}|{json.dumps(view['chat'], sort_keys=True)}"


def meta_path(config: dict, name: str) -> str:
    return data_path(config, name).removesuffix(".jsonl") + ".meta.json"


def kept_rows(config: dict, data: str, view: dict) -> tuple[int, str]:
    """Rows of a training set verl will load through ``view``: from the prepared data's metadata
    (its overlong-prompt filter applied), else the configured row count (before preparation)."""
    path = Path(meta_path(config, data))
    if path.exists():
        kept = json.loads(path.read_text()).get("kept", {})
        if view_key(view) in kept:
            return kept[view_key(view)], "prepared data"
    rows = config.get("datasets", {}).get(data, {}).get("rows") or config["toy"]["splits"][data]["rows"]
    return rows, "configured rows (data not prepared yet)"


def model_path(config: dict, model_id: str) -> str:
    """Where a model is loaded from: a hub id, a toy model folder, or a prepared teacher."""
    spec = config["models"][model_id]
    res = config.get("results", "results")
    if "hub" in spec:
        return spec["hub"]
    if "toy" in spec:
        return f"{res}/toy/models/{model_id}"
    return f"{res}/teachers/{model_id}/model/final"


def model_inputs(config: dict, model_id: str) -> list[str]:
    """Files the DAG must build before a model can be used (none for hub models)."""
    spec = config["models"][model_id]
    res = config.get("results", "results")
    if "toy" in spec:
        return [f"{res}/toy/models/{model_id}/model.safetensors"]
    if "prepare" in spec:
        return [f"{res}/teachers/{model_id}/train.json"]
    return []


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


def cells(config: dict) -> list[Cell]:
    """Every training cell of every experiment; a cell named by two experiments appears once
    (and must be defined identically in both)."""
    found: dict[tuple[str, str, int], Cell] = {}
    for exp_name, exp in config["experiments"].items():
        for entry in exp["methods"]:
            if isinstance(entry, str):
                entry = {"name": entry, "method": entry}
            overrides = tuple(sorted((k, entry[k]) for k in _OVERRIDE_KEYS if k in entry))
            for setting in exp["settings"]:
                for seed in entry.get("seeds", exp["seeds"]):
                    cell = Cell(setting, entry["name"], entry["method"], seed, overrides, (exp_name,))
                    key = (setting, entry["name"], seed)
                    if key in found:
                        old = found[key]
                        if (old.method, old.overrides) != (cell.method, cell.overrides):
                            raise ConfigError(
                                f"experiments.{exp_name}: variant {entry['name']!r} of setting {setting!r} is "
                                f"defined differently in experiments {old.experiments[0]!r} and {exp_name!r}"
                            )
                        cell = Cell(**{**old.__dict__, "experiments": old.experiments + (exp_name,)})
                    found[key] = cell
    return list(found.values())


def search_cells(config: dict) -> list[Cell]:
    """The tuning stage's runs (``scout.tuning``): per tuned setting, one OPD run per student LR of
    ``tuning.student_lr``, one SCOUT run per teacher LR of ``tuning.teacher_lr`` and, for a LoRA
    teacher, one per LR of ``tuning.teacher_lora_lr`` at its rank, per seed of ``tuning.seeds``;
    experiment ``tuning``. They are not grid cells: the tables never list them."""
    out = []
    t = config.get("tuning", {})
    for setting, params in tuning.tuned_settings(config).items():
        for param in params:
            extra = (("teacher_lora_rank", tuning.lora_rank(config, setting)),) if param == "teacher_lora_lr" else ()
            for lr in tuning.search_grid(config, param):
                over = tuple(sorted(((tuning.OVERRIDE[param], lr), *extra)))
                for seed in t.get("seeds", [1]):
                    out.append(Cell(setting, tuning.variant_name(param, lr), tuning.SEARCH_METHOD[param], seed,
                                    over, ("tuning",)))  # fmt: skip
    return out


def all_cells(config: dict) -> list[Cell]:
    """Every training run the workflow knows: the tuning stage's first (it trains a run the chosen
    grid cells then share), then the experiments'."""
    return search_cells(config) + cells(config)


def is_search(cell: Cell) -> bool:
    return cell.experiments == ("tuning",)


def variant_seeds(config: dict) -> dict[tuple[str, str], list[int]]:
    """Sorted seeds of every (setting, variant), base rows included (seed 0): run r is the r-th."""
    out: dict[tuple[str, str], list[int]] = {(s, v): [0] for s in config["settings"] for v in BASE_VARIANTS}
    for c in cells(config):
        out.setdefault((c.setting, c.variant), []).append(c.seed)
    return {k: sorted(v) for k, v in out.items()}


def find_cell(config: dict, setting: str, variant: str, seed: int) -> Cell:
    for c in all_cells(config):
        if (c.setting, c.variant, c.seed) == (setting, variant, int(seed)):
            return c
    raise ConfigError(f"no cell {setting}/{variant}/s{seed} in the configured experiments")


def _steps_per_epoch(config: dict, data: str, batch: int, view: dict) -> int:
    """Steps verl runs per epoch: its dataloader drops the last partial batch (floor, not ceil),
    over the rows its overlong-prompt filter keeps."""
    if "steps" in config["training"]:
        return config["training"]["steps"]
    return kept_rows(config, data, view)[0] // batch


def _base_spec(config: dict) -> dict:
    """Training fields every run shares, taken from the ``training`` section."""
    tr = config["training"]
    device = {"device": config.get("device", "cuda")} if config["backend"] == "verl" else {}
    return {
        "world": config["world"],
        "backend": config["backend"],
        **device,
        "batch_size": tr["batch_size"],
        "mini_batch_size": tr.get("mini_batch_size", tr["batch_size"]),
        "ppo_epochs": tr.get("ppo_epochs", 1),
        "max_prompt_length": tr["max_prompt_length"],
        "max_response_length": tr["max_response_length"],
        "temperature": tr["temperature"],
        "top_p": tr["top_p"],
        "clip": tr["clip"],
        "save_every": tr["save_every"],
        "reward_every": tr.get("reward_every", 1),
        "eval_every": None,
        "threads": tr.get("threads", 1),
        "method_cfg": {},
    }


def chat_options(config: dict, model_id: str) -> dict:
    """Chat-template options a model is rendered with, in training and evaluation alike
    (``thinking: false`` on Qwen3 -> ``enable_thinking: false``)."""
    thinking = config["models"][model_id].get("thinking")
    return {} if thinking is None else {"enable_thinking": thinking}


def cell_spec(config: dict, cell: Cell) -> dict:
    """Everything a backend needs to train one cell, fully resolved (no further config lookups)."""
    setting = config["settings"][cell.setting]
    method = METHODS[cell.method]
    tr = config["training"]
    over = dict(cell.overrides)
    epochs = over.get("epochs", setting.get("epochs", 1))
    prompt_limit = setting.get("max_prompt_length", tr["max_prompt_length"])
    steps_per_epoch = _steps_per_epoch(
        config, setting["train_data"], tr["batch_size"], _view(config, setting["student"], prompt_limit)
    )
    grpo = method.student_loss == "grpo"
    spec = {
        **_base_spec(config),
        "kind": "train",
        "setting": cell.setting,
        "variant": cell.variant,
        "method": cell.method,
        "seed": cell.seed,
        "domain": setting["domain"],
        "student": model_path(config, setting["student"]),
        "teacher": model_path(config, setting["teacher"]) if method.needs_teacher else None,
        "train_data": data_path(config, setting["train_data"]),
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "total_steps": epochs * steps_per_epoch,
        "n": tr["grpo"]["n"] if grpo else tr.get("n", 1),
        "lr": over.get("student_lr", tr["grpo"]["lr"] if grpo else tuning.lr(config, cell.setting, "student_lr")),
        "kl_beta": tr["grpo"]["kl_beta"] if grpo else 0.0,
        "max_prompt_length": setting.get("max_prompt_length", tr["max_prompt_length"]),
        "eval_every": over.get("eval_every"),
        "chat": chat_options(config, setting["student"]),
    }  # not the experiments that name the cell: adding one must not retrain the runs it shares
    if grpo and "batch_size" in tr["grpo"]:  # GRPO's own prompts per step (n samples each)
        spec["batch_size"] = spec["mini_batch_size"] = tr["grpo"]["batch_size"]
    for name in method.sections(set(config["methods"])):
        sec = deep_merge(config["methods"][name], setting.get("overrides", {}).get(name, {}))
        spec["method_cfg"][name] = sec
    analysis = config.get("analysis") or {}
    probed = cell.setting in analysis.get("settings", []) and cell.seed in analysis.get("seeds", [cell.seed])
    if cell.variant == "scout" and probed and analysis.get("checkpoints"):
        spec["probe_steps"] = list(analysis["checkpoints"])  # matched checkpoints the teacher probes visit
    if method.trains_teacher:
        sc = spec["method_cfg"]["scout"]
        main_interval = sc["interval"]  # the grid's f; the sweep's denser f scale the teacher LR down from it
        sc["interval"] = over.get("interval", sc["interval"])
        sc["prefix_zero"] = method.teacher_phase == "prefix0"
        # a full teacher's spec has no LoRA key at all (rank 0), so turning LoRA on for one variant
        # leaves every other run's spec, and its cached results, as they were
        lora_cfg = sc.pop("teacher_lora", None) or {}
        rank = teacher_lora_rank(config, cell)
        if rank:
            sc["teacher_lora"] = {"alpha": 16, "target_modules": list(LORA_TARGETS), **lora_cfg, "rank": rank}
        # "tuned" until the search has chosen it
        base_lr = tuning.lr(config, cell.setting, teacher_lr_param(setting, rank))
        sc["teacher_lr"] = over.get(
            "teacher_lr",
            base_lr if base_lr == tuning.TUNED else scaled_teacher_lr(base_lr, sc["interval"], main_interval),
        )
    return spec


def teacher_lora_rank(config: dict, cell: Cell) -> int:
    """A cell's LoRA teacher rank: its variant's ``teacher_lora_rank``, else the setting's
    ``methods.scout.teacher_lora.rank``; 0 for a full teacher, or a method that trains none."""
    if not METHODS[cell.method].trains_teacher:
        return 0
    setting = config["settings"][cell.setting]
    sc = deep_merge(config["methods"].get("scout", {}), setting.get("overrides", {}).get("scout", {}))
    return dict(cell.overrides).get("teacher_lora_rank", (sc.get("teacher_lora") or {}).get("rank", 0))


def teacher_lr_param(setting: dict, rank: int) -> str:
    """The setting's key for a teacher's LR: a LoRA teacher's own where the setting gives one."""
    return "teacher_lora_lr" if rank and "teacher_lora_lr" in setting else "teacher_lr"


def teacher_prep_spec(config: dict, model_id: str) -> dict:
    """The GRPO run that prepares a teacher (Qwen3-8B-DAPO, or its toy mirror)."""
    prep = config["models"][model_id]["prepare"]
    tr = config["training"]
    view = _view(config, prep["base"], tr["max_prompt_length"])
    steps = prep.get("steps") or _steps_per_epoch({**config, "training": {}}, prep["data"], prep["batch"], view)
    return {
        **_base_spec(config),
        "kind": "teacher_prep",
        "setting": model_id,
        "variant": "prepare",
        "method": "grpo",
        "seed": 1,
        "domain": (config.get("datasets", {}).get(prep["data"]) or config["toy"]["splits"][prep["data"]])["domain"],
        "student": model_path(config, prep["base"]),
        "teacher": None,
        "train_data": data_path(config, prep["data"]),
        "epochs": prep["epochs"],
        "steps_per_epoch": steps,
        "total_steps": prep["epochs"] * steps,
        "batch_size": prep["batch"],
        "mini_batch_size": prep.get("mini_batch", prep["batch"]),
        "n": prep["n"],
        "lr": prep["lr"],
        "kl_beta": tr["grpo"]["kl_beta"],
        "temperature": prep.get("temperature", tr["temperature"]),
        "chat": chat_options(config, prep["base"]),
    }


def checkpoint_steps(spec: dict) -> list[int]:
    """Intermediate steps that are exported and evaluated: every ``eval_every`` steps (compute-matched
    runs) and the analysis' matched checkpoints (``probe_steps``), before the last step; a run that
    serves other cells too has them all in ``export_steps`` (``run_spec``)."""
    if "export_steps" in spec:
        return list(spec["export_steps"])
    every = spec.get("eval_every")
    steps = set(range(every, spec["total_steps"], every)) if every else set()
    steps |= {s for s in spec.get("probe_steps", []) if 0 < s < spec["total_steps"]}
    return sorted(steps)


def checkpoints(spec: dict) -> list[str]:
    """Checkpoints that get evaluated: the intermediate ones and final."""
    return [f"step{s}" for s in checkpoint_steps(spec)] + ["final"]


# ------------------------------------------------------------------------------------------------
# Runs: cells whose training is one run (the same weights spec), or continues a shorter one
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How a cell's run is trained: by its own job (neither field set), as another cell's run
    (``shares``: the same weights spec apart from labels), or continuing from a shorter cell's last
    checkpoint (``continues``: the same spec apart from its length, for methods whose steps do not
    depend on the run's length)."""

    shares: Cell | None = None
    continues: Cell | None = None


def _identity(spec: dict, with_length: bool = True) -> str:
    """What a run's weights depend on, as the DAG sees it (inputs by path): the spec without labels,
    cadences and exports (``runs.NOT_WEIGHTS``), and without its length when ``with_length`` is false."""
    skip = set(NOT_WEIGHTS) | (set() if with_length else {"epochs", "total_steps"})
    return json.dumps({k: v for k, v in spec.items() if k not in skip}, sort_keys=True)


_PLANS: dict[str, dict[Cell, Plan]] = {}


def run_plans(config: dict) -> dict[Cell, Plan]:
    """The plan of every cell. The first cell (in config order: the main grid first) of a weights
    spec trains it; a longer run continues the longest shorter one of the same spec where its
    method allows it (``Method.length_free``) and the backend does it exactly (the embedded one;
    tested in tests/test_runs.py). ``training.share_runs: false`` trains every cell on its own."""
    memo = json.dumps(config, default=str)  # in order: the order decides which cell trains a run
    if memo in _PLANS:
        return _PLANS[memo]
    every = all_cells(config)
    plans = {c: Plan() for c in every}
    if config["training"].get("share_runs", True):
        specs = {c: cell_spec(config, c) for c in every}
        first: dict[str, Cell] = {}
        for c in every:
            key = _identity(specs[c])
            if key in first:
                plans[c] = Plan(shares=first[key])
            else:
                first[key] = c
        if config["backend"] == "embedded":
            owners = list(first.values())
            for c in owners:
                if not METHODS[c.method].length_free:
                    continue
                mine = _identity(specs[c], with_length=False)
                shorter = [d for d in owners if _identity(specs[d], with_length=False) == mine
                           and specs[d]["total_steps"] < specs[c]["total_steps"]]  # fmt: skip
                if shorter:
                    plans[c] = Plan(continues=max(shorter, key=lambda d: specs[d]["total_steps"]))
    _PLANS[memo] = plans
    return plans


def unselected(config: dict) -> dict:
    """The whole grid a selection was cut from (``config.select`` keeps its experiments and probes
    in ``selected_from``), or the config itself where nothing was cut."""
    whole = config.get("selected_from")
    if not whole:
        return config
    out = {k: v for k, v in config.items() if k not in ("selected_from", "analysis")}
    return {**out, **whole}


def run_spec(config: dict, cell: Cell) -> dict:
    """The spec a cell's training job runs: ``cell_spec`` plus every checkpoint its run is evaluated
    at for the cells it serves (``export_steps``) and, for a continuation, where it starts
    (``continue_from``: the shorter run's folder and last step). A tuning run exports what any grid
    cell it may come to serve needs, so that its spec does not change when the search chooses it.
    Under a selection it is the whole grid's spec of that run: cutting the grid down never makes
    the runs it keeps stale (their exports and probed steps stay those of the whole grid)."""
    whole = unselected(config)
    if whole is not config:
        same = next((c for c in all_cells(whole) if c.key == cell.key and c.overrides == cell.overrides), None)
        if same is not None:
            return run_spec(whole, same)
    spec = cell_spec(config, cell)
    total = spec["total_steps"]
    if is_search(cell):
        spec["export_steps"] = _search_exports(config, cell, total)
        return spec
    plans = run_plans(config)
    steps = set(checkpoint_steps(spec))
    for other, plan in plans.items():
        if cell in (plan.shares, plan.continues):
            steps |= {s for s in checkpoint_steps(cell_spec(config, other)) if s < total}
            if plan.continues == cell:
                steps |= {s for s in [cell_spec(config, other)["total_steps"]] if s < total}
    start = plans[cell].continues
    if start is not None:
        base = cell_spec(config, start)["total_steps"]
        spec["continue_from"] = {"run": train_dir(config, start.setting, start.variant, start.seed), "step": base}
        steps = {s for s in steps if s > base}
    spec["export_steps"] = sorted(s for s in steps if 0 < s < total)
    return spec


def _search_exports(config: dict, cell: Cell, total: int) -> list[int]:
    """The steps a tuning run exports: those of every grid cell of its setting and method that could
    share or continue its run (no overrides but its length, evaluation interval and LRs)."""
    free = {"epochs", "eval_every", "student_lr", "teacher_lr"}

    def fixed(c: Cell) -> set:  # a LoRA search run's rank
        return {kv for kv in c.overrides if kv[0] not in free}

    steps: set[int] = set()
    for c in cells(config):
        if (c.setting, c.method) == (cell.setting, cell.method) and fixed(c) == fixed(cell):
            steps |= set(checkpoint_steps(cell_spec(config, c)))
    return sorted(s for s in steps if 0 < s < total)


def choices_needed(config: dict, cell: Cell) -> list[tuple[str, str]]:
    """The tuning stage's choices (setting, LR) a run's job spec waits for. A search run: the searches
    before its own (the teacher LR's runs train at the chosen student LR). A grid cell: each LR its
    own spec leaves ``tuned`` (GRPO keeps its own LR; only a method that trains a teacher has a
    teacher LR), in every tuned setting, since a run is shared with any cell whose spec equals its
    own; none for a setting no choice can touch (``tuning.independent_settings``)."""
    tuned = tuning.tuned_settings(config)
    if is_search(cell):
        return [(cell.setting, p) for p in tuning.before(tuned[cell.setting], tuning.param_of(cell.variant))]
    if cell.setting in tuning.independent_settings(config):
        return []
    spec = cell_spec(config, cell)
    teacher = teacher_lr_param(config["settings"][cell.setting], teacher_lora_rank(config, cell))
    own = {"student_lr": spec["lr"], teacher: spec["method_cfg"].get("scout", {}).get("teacher_lr")}
    return [(s, p) for s, params in tuned.items() for p in params if own.get(p) == tuning.TUNED]


def serves(config: dict, cell: Cell) -> bool:
    """Whether a run is any grid cell's: its own, or one a grid cell shares or continues."""
    if not is_search(cell):
        return True
    return any(cell in (p.shares, p.continues) for p in run_plans(config).values())


# ------------------------------------------------------------------------------------------------
# Job specs: what each job of the workflow is given (its params); the results record them, so
# that what exists can be compared with what the config asks for now (scout.freshness)
# ------------------------------------------------------------------------------------------------


def _with_resources(config: dict, spec: dict, family: str, cell: Cell | None = None) -> dict:
    """The verl backend places its pools from the job's resources; the embedded one needs none."""
    if config["backend"] != "verl":
        return spec
    from scout.resources import job_resources

    where = (cell.setting, cell.method, cell.variant) if cell else ()
    return {**spec, "resources": job_resources(config, family, *where)}


def train_job_spec(config: dict, cell: Cell) -> dict:
    """The spec of a cell's training job."""
    return _with_resources(config, run_spec(config, cell), "train", cell)


def teacher_job_spec(config: dict, model_id: str) -> dict:
    """The spec of a teacher-preparation job."""
    return _with_resources(config, teacher_prep_spec(config, model_id), "prepare_teacher")


def toy_pretrain_spec(config: dict, model_id: str) -> dict:
    """The spec of a toy model's pretraining job."""
    res = config.get("results", "results")
    return {
        "arch": config["models"][model_id]["toy"],
        "tokenizer": f"{res}/toy/tokenizer",
        "data": [data_path(config, s) for s in config["toy"]["pretrain_mix"]],
        "seed": config["toy"]["seed"],
    }


def record_source(config: dict, setting: str, variant: str, seed: str | int, ckpt: str) -> tuple[str, str, str, str]:
    """The evaluated unit whose records stand for this one: itself, or the run it shares or
    continues from (its step N in the shorter run's naming: ``final`` at that run's last step)."""
    if variant in BASE_VARIANTS:
        return setting, variant, str(seed), ckpt
    cell = find_cell(config, setting, variant, int(seed))
    plan = run_plans(config)[cell]
    if plan.shares is not None:
        s = plan.shares
        return record_source(config, s.setting, s.variant, s.seed, ckpt)
    if plan.continues is not None:
        step = cell_spec(config, cell)["total_steps"] if ckpt == "final" else int(ckpt[4:])
        base = cell_spec(config, plan.continues)
        if step <= base["total_steps"]:
            name = "final" if step == base["total_steps"] else f"step{step}"
            s = plan.continues
            return record_source(config, s.setting, s.variant, s.seed, name)
    return setting, variant, str(seed), ckpt


def trained_cell(config: dict, setting: str, variant: str, seed: str | int) -> Cell:
    """The cell of a training job; a cell whose run is another cell's has no job of its own."""
    cell = find_cell(config, setting, variant, int(seed))
    owner = run_plans(config)[cell].shares
    if owner is not None:
        raise ConfigError(f"{cell.key} shares the run of {owner.key} (the same training spec): target that one")
    return cell


def train_inputs(config: dict, cell: Cell) -> list[str]:
    """What a training job reads: its data, its models, and the shorter run a continuation starts from."""
    s = config["settings"][cell.setting]
    out = [data_path(config, s["train_data"]), *model_inputs(config, s["student"]), *model_inputs(config, s["teacher"])]
    start = run_plans(config)[cell].continues
    if start is not None:
        out.append(f"{train_dir(config, start.setting, start.variant, start.seed)}/train.json")
    return out


def check_evaluated(config: dict, setting: str, variant: str, seed: str | int, ckpt: str) -> None:
    """Refuse an evaluation job for a unit whose records are another run's (a shared run)."""
    source = record_source(config, setting, variant, seed, ckpt)
    if source != (setting, variant, str(seed), ckpt):
        s, v, n, c = source
        raise ConfigError(f"{setting}/{variant}/s{seed}/{ckpt} is evaluated as {s}/{v}/s{n}/{c} (a shared run): "
                          "target that one")  # fmt: skip


def shared_runs(config: dict) -> dict[tuple[str, str], tuple[str, str]]:
    """(setting, variant) -> (setting, variant) whose runs it reports, for variants that train none of
    their own (every seed shares another cell's run): the tables say so."""
    plans = run_plans(config)
    out: dict[tuple[str, str], set] = {}
    for c in cells(config):
        s = plans[c].shares
        out.setdefault((c.setting, c.variant), set()).add((s.setting, s.variant) if s else None)
    return {k: next(iter(v)) for k, v in out.items() if len(v) == 1 and None not in v}


def benchmarks_for(config: dict, domain: str) -> list[str]:
    return [b for b, spec in config["benchmarks"].items() if spec["domain"] == domain]


def _base_units(config: dict) -> list[tuple[str, str, str, str]]:
    """The untrained student and teacher of each setting the grid trains (a reduced experiment,
    ``select``, evaluates and reports its own settings only)."""
    used = {c.setting for c in cells(config)}
    return [(setting, v, "0", "final") for setting in config["settings"] if setting in used for v in BASE_VARIANTS]


def report_units(config: dict) -> list[tuple[str, str, str, str]]:
    """(setting, variant, seed, checkpoint) of every result the report shows: base rows and every
    cell's checkpoints, whichever run they come from (``record_source``)."""
    units = _base_units(config)
    for cell in cells(config):
        units += [(cell.setting, cell.variant, str(cell.seed), ck) for ck in checkpoints(cell_spec(config, cell))]
    return units


def settings_in_grid(config: dict) -> list[str]:
    """The settings a job of the grid touches: those its cells train and those its teacher probes
    visit (a reduced experiment, ``select``, builds the models and data of these only)."""
    used = {c.setting for c in cells(config)} | set(config.get("analysis", {}).get("settings", []))
    return [s for s in config["settings"] if s in used]


def models_in_grid(config: dict) -> list[str]:
    """The models the grid's jobs load: teacher and student of each setting it touches, and the base
    each prepared teacher starts from (what pretraining, teacher preparation and data serve)."""
    settings = [config["settings"][s] for s in settings_in_grid(config)]
    used = {s[role] for s in settings for role in ("teacher", "student")}
    used |= {config["models"][m]["prepare"]["base"] for m in used if "prepare" in config["models"][m]}
    return sorted(used)


def eval_units(config: dict) -> list[tuple[str, str, str, str]]:
    """(setting, variant, seed, checkpoint) of every evaluation job: base rows and the checkpoints
    of every run that is trained (a shared run is evaluated once, under the cell that trains it)."""
    units = _base_units(config)
    plans = run_plans(config)
    needed = {k: v for k, v in config.items() if k != "selected_from"}  # a selection evaluates what it uses
    for cell in all_cells(config):
        if plans[cell].shares is None and serves(config, cell):  # a tuning run the grid does not use: validation only
            spec = run_spec(needed, cell)
            units += [(cell.setting, cell.variant, str(cell.seed), ck) for ck in checkpoints(spec)]
    return units


def eval_records(config: dict) -> list[str]:
    """Every evaluation record the grid writes (one per unit and benchmark of its domain)."""
    out = []
    for setting, variant, seed, ckpt in eval_units(config):
        domain = config["settings"][setting]["domain"]
        out += [f"{eval_dir(config, setting, variant, seed, ckpt)}/{b}.json" for b in benchmarks_for(config, domain)]
    return out


def eval_spec(config: dict, setting: str, variant: str, seed: str | int, ckpt: str) -> dict:
    """Everything an evaluation job needs: model, benchmarks with their files and sampling."""
    s = config["settings"][setting]
    evaluated = s["teacher"] if variant == "base-teacher" else s["student"]
    run_dir, step = None, None
    if variant in BASE_VARIANTS:
        model = model_path(config, evaluated)
    else:
        run_dir = train_dir(config, setting, variant, seed)
        model = f"{run_dir}/model/{ckpt}"
        cell = find_cell(config, setting, variant, int(seed))
        step = int(ckpt[4:]) if ckpt.startswith("step") else cell_spec(config, cell)["total_steps"]
    method = variant
    if variant not in BASE_VARIANTS:
        method = find_cell(config, setting, variant, int(seed)).method
    return {
        "world": config["world"],
        "setting": setting,
        "variant": variant,
        "method": method,
        "seed": int(seed),
        "checkpoint": ckpt,
        "model": model,
        "domain": s["domain"],
        "benchmarks": {
            b: {**config["benchmarks"][b], "path": data_path(config, b), "repeats": _repeats(config, b, ckpt)}
            for b in benchmarks_for(config, s["domain"])
        },
        "sampling": {k: config["evaluation"][k] for k in ("temperature", "top_p", "max_new_tokens")},
        "engine": config["evaluation"].get("engine", "transformers"),
        "engine_options": config["evaluation"].get("engine_options", {}),
        "chat": chat_options(config, evaluated),
        "threads": config["training"].get("threads", 1),
        "run_dir": run_dir,  # evaluation results are logged into the training run they evaluate
        "step": step,
    }


def validation_sets(config: dict) -> dict[str, dict]:
    """Every set a validation may name, with its domain and rows: the toy world's ``toy.validation``
    and, in the paper world, each dataset's ``holdout`` slice (``DATASET.holdout``)."""
    out = dict(config.get("toy", {}).get("validation", {}))
    for name, d in config.get("datasets", {}).items():
        if d.get("holdout"):
            out[name + HOLDOUT] = {"domain": d["domain"], "rows": d["holdout"]}
    return out


def validation_data(config: dict, domain: str) -> tuple[str, int, int]:
    """(dataset, rows, repeats) of a domain's validation set (``tuning.validation``)."""
    v = config["tuning"]["validation"][domain]
    return v["data"], validation_sets(config)[v["data"]]["rows"], v["repeats"]


def validation_record(config: dict, cell: Cell) -> str:
    """The record of a tuning run's validation (the workflow's ``validate`` output)."""
    name, _, _ = validation_data(config, config["settings"][cell.setting]["domain"])
    return f"{tuning.validation_dir(config, cell.setting, cell.variant, cell.seed)}/validation/{name}.json"


def validation_spec(config: dict, setting: str, variant: str, seed: str | int) -> dict:
    """A tuning run's evaluation on its domain's validation set: the final checkpoint, the test
    benchmarks' files named so that the job refuses a validation prompt that is also a test one."""
    s = config["settings"][setting]
    name, rows, repeats = validation_data(config, s["domain"])
    spec = eval_spec(config, setting, variant, seed, "final")
    spec["disjoint_from"] = {b: v["path"] for b, v in spec["benchmarks"].items()}
    spec["benchmarks"] = {name: {"domain": s["domain"], "rows": rows, "repeats": repeats,
                                 "path": data_path(config, name)}}  # fmt: skip
    spec["run_dir"] = None  # the run's tracking logs its test evaluations only
    return spec


def _repeats(config: dict, benchmark: str, ckpt: str) -> int:
    """Samples per question: the benchmark's ``repeats`` at final checkpoints, whose precision the
    tables and claims rest on; ``evaluation.intermediate_repeats`` (fewer) at the curves' points."""
    full = config["benchmarks"][benchmark]["repeats"]
    if ckpt == "final":
        return full
    return min(full, config["evaluation"].get("intermediate_repeats", full))


def analysis_dir(config: dict, setting: str) -> str:
    return f"{config.get('results', 'results')}/analysis/{setting}"


def analysis_spec(config: dict, setting: str) -> dict:
    """The teacher probes of one setting: the initial teacher on the initial student's and its own
    responses to one benchmark (the base rows' evaluation generations), and each SCOUT run's
    trained teacher on the initial and the final student's responses."""
    a = config["analysis"]
    bench = a["benchmark"]
    teacher = config["settings"][setting]["teacher"]
    return {
        "setting": setting,
        "teacher": model_path(config, teacher),
        "benchmark_path": data_path(config, bench),
        "student_generations": f"{eval_dir(config, setting, 'base-student', 0, 'final')}/{bench}.generations.jsonl",
        "teacher_generations": f"{eval_dir(config, setting, 'base-teacher', 0, 'final')}/{bench}.generations.jsonl",
        "runs": [
            {
                "seed": seed,
                "checkpoint": ckpt,
                "teacher": f"{run_dir(config, setting, 'scout', seed)}/model/{ckpt}-teacher",
                "generations": f"{source_dir(config, setting, 'scout', seed, ckpt)}/{bench}.generations.jsonl",
            }
            for seed in probed_seeds(config, setting, "scout")
            for ckpt in _probed_checkpoints(config, setting, seed)
        ],
        # other trained teachers, probed on the initial student's prefixes: the prefix-0 control's
        # (label "control") and each LoRA teacher's (labelled by its variant)
        "controls": [
            {"label": label, "seed": seed, "teacher": f"{run_dir(config, setting, variant, seed)}/model/final-teacher"}
            for variant, label in compared_teachers(config, setting)
            for seed in probed_seeds(config, setting, variant)
        ],
        "ratios": a["ratios"],
        "split": config["methods"]["scout"].get("split", "response"),  # prefixes cut as SCOUT cuts them
        "answer_marker": config["methods"]["scout"].get("answer_marker", {}).get(config["settings"][setting]["domain"]),
        "k": a["k"],
        "responses": a.get("responses"),
        "questions": a.get("questions"),
        "max_new_tokens": a["max_new_tokens"],
        "sampling": {k: config["evaluation"][k] for k in ("temperature", "top_p")},
        "engine_options": config["evaluation"].get("engine_options", {}),
        "engine": config["evaluation"].get("engine", "transformers"),
        "chat": chat_options(config, teacher),
        "threads": config["training"].get("threads", 1),
    }


def probed_seeds(config: dict, setting: str, variant: str) -> list[int]:
    """The seeds of a variant whose trained teachers the probes visit: ``analysis.seeds`` where the
    config limits them (a claim's extra seeds need not all be probed), else every seed."""
    seeds = variant_seeds(config).get((setting, variant), [])
    wanted = (config.get("analysis") or {}).get("seeds")
    return [s for s in seeds if wanted is None or s in wanted]


def compared_teachers(config: dict, setting: str) -> list[tuple[str, str]]:
    """(variant, probe label) of the trained teachers the probes set beside SCOUT's on a setting: the
    prefix-0 control's, then every SCOUT variant whose teacher trains LoRA adapters."""
    out = [(CONTROL, "control")] if (setting, CONTROL) in variant_seeds(config) else []
    lora = {c.variant for c in cells(config)
            if c.setting == setting and c.method == "scout" and dict(c.overrides).get("teacher_lora_rank")}  # fmt: skip
    return out + [(v, v) for v in sorted(lora)]


def probe_labels(checkpoint: str) -> tuple[str, str]:
    """(teacher, prefixes) labels of a SCOUT run's ``checkpoint`` in the analysis' continuation.csv;
    the final checkpoint keeps the plain names ("scout", "final-student")."""
    if checkpoint == "final":
        return "scout", "final-student"
    return f"scout@{checkpoint}", f"student@{checkpoint}"


def _probed_checkpoints(config: dict, setting: str, seed: int) -> list[str]:
    """The matched checkpoints of a SCOUT run the probes visit (``analysis.checkpoints``) and final."""
    spec = cell_spec(config, find_cell(config, setting, "scout", seed))
    return [f"step{s}" for s in checkpoint_steps(spec) if s in spec.get("probe_steps", [])] + ["final"]


def analysis_inputs(config: dict, setting: str) -> list[str]:
    bench = config["analysis"]["benchmark"]
    out = [data_path(config, bench)] + model_inputs(config, config["settings"][setting]["teacher"])
    out += [f"{eval_dir(config, setting, v, 0, 'final')}/{bench}.json" for v in BASE_VARIANTS]
    for variant, _ in compared_teachers(config, setting):
        out += [f"{run_dir(config, setting, variant, seed)}/train.json" for seed in probed_seeds(config, setting, variant)]
    for seed in probed_seeds(config, setting, "scout"):
        out.append(f"{run_dir(config, setting, 'scout', seed)}/train.json")
        out += [
            f"{source_dir(config, setting, 'scout', seed, c)}/{bench}.json"
            for c in _probed_checkpoints(config, setting, seed)
        ]
    return out


def run_owner(config: dict, setting: str, variant: str, seed: int | str) -> Cell:
    """The cell whose job trains a cell's run: itself, or the one it shares (a tuning run, say)."""
    cell = find_cell(config, setting, variant, int(seed))
    return run_plans(config)[cell].shares or cell


def run_dir(config: dict, setting: str, variant: str, seed: int | str) -> str:
    """The folder of the run a cell's training is (``run_owner``'s)."""
    owner = run_owner(config, setting, variant, seed)
    return train_dir(config, owner.setting, owner.variant, owner.seed)


def source_dir(config: dict, setting: str, variant: str, seed: int | str, ckpt: str) -> str:
    """The evaluation folder whose records stand for a unit's (``record_source``)."""
    return eval_dir(config, *record_source(config, setting, variant, seed, ckpt))
