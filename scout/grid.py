"""Config -> the experiment cells, their resolved specs and the runs they share.

The Snakefile's targets, the workflow rules and the report all read the cells from here, so a
cell exists in exactly one place. ``Grid`` is one validated config's grid resolved once: its cells,
specs, seeds and run plans, the config's sections as typed records (``scout.entries``), where its
outputs lie (``Grid.paths``), its backend and each job's resources, and the whole grid a
selection was cut from. A command or the workflow builds it where it reads the config
(``Grid.of``), and what plans, reports or checks takes the grid, not the config (``scout.jobs``,
``scout.plan``, ``scout.status``, ``scout.results``, the report): the functions below that take a
config are the resolution itself.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from functools import cached_property
from pathlib import Path

from scout import backends, entries, schema, sharing, teacher_server, tuning
from scout.algorithms import scaled_teacher_lr
from scout.config import ConfigError, deep_merge, method_cfg
from scout.config import teacher_lora_rank as lora_rank_of
from scout.entries import Cell
from scout.methods import METHODS
from scout.paths import Paths
from scout.prompts import view_key
from scout.resources import job_resources

BASE_VARIANTS = ("base-student", "base-teacher")
CONTROL = "opd_teacher_grpo"  # the prefix-0 control, whose teacher the probes compare with SCOUT's
_OVERRIDE_KEYS = ("interval", "epochs", "eval_every", "teacher_lr", "student_lr", "teacher_lora_rank")


def data_view(config: dict, model_id: str, max_prompt_length: int) -> dict:
    return {"tokenizer": Paths.of(config).model(model_id), "chat": chat_options(config, model_id),
            "max_prompt_length": max_prompt_length}  # fmt: skip


def kept_rows(config: dict, data: str, view: dict) -> tuple[int, str]:
    """Rows of a training set verl will load through ``view``: from the prepared data's metadata
    (its overlong-prompt filter applied), else the configured row count (before preparation)."""
    path = Path(Paths.of(config).meta(data))
    if path.exists():
        kept = json.loads(path.read_text()).get("kept", {})
        if view_key(view) in kept:
            return kept[view_key(view)], "prepared data"
    rows = config.get("datasets", {}).get(data, {}).get("rows") or config["toy"]["splits"][data]["rows"]
    return rows, "configured rows (data not prepared yet)"


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


def _expand_cells(config: dict) -> list[Cell]:
    """Every training cell of every experiment; a cell named by two experiments appears once
    (and must be defined identically in both)."""
    found: dict[tuple[str, str, int], Cell] = {}
    for exp_name, exp in config["experiments"].items():
        for entry in exp["methods"]:
            if isinstance(entry, str):
                entry = {"name": entry, "method": entry}
            overrides = tuple(sorted((k, entry[k]) for k in _OVERRIDE_KEYS if k in entry))
            if entry.get("overrides"):  # its own method settings, as JSON: a cell is hashable
                overrides = tuple(sorted([*overrides, ("overrides", json.dumps(entry["overrides"], sort_keys=True))]))
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


def _expand_search_cells(config: dict) -> list[Cell]:
    """The tuning stage's runs (``scout.tuning``): per tuned setting, one OPD run per student LR of
    ``tuning.student_lr``, one SCOUT run per teacher LR of ``tuning.teacher_lr`` and, for a LoRA
    teacher, one per LR of ``tuning.teacher_lora_lr`` at its rank, per seed of ``tuning.seeds``;
    experiment ``tuning``. They are not grid cells: the tables never list them."""
    out = []
    for setting, params in tuning.tuned_settings(config).items():
        for param in params:
            extra = (("teacher_lora_rank", tuning.lora_rank(config, setting)),) if param == "teacher_lora_lr" else ()
            for lr in tuning.search_grid(config, param):
                over = tuple(sorted(((tuning.OVERRIDE[param], lr), *extra)))
                for seed in schema.setting(config, "tuning.seeds"):
                    out.append(Cell(setting, tuning.variant_name(param, lr), tuning.SEARCH_METHOD[param], seed,
                                    over, ("tuning",)))  # fmt: skip
    return out


def is_search(cell: Cell) -> bool:
    return cell.experiments == ("tuning",)


def _steps_per_epoch(config: dict, data: str, batch: int, view: dict) -> int:
    """Steps verl runs per epoch: its dataloader drops the last partial batch (floor, not ceil),
    over the rows its overlong-prompt filter keeps."""
    if "steps" in config["training"]:
        return config["training"]["steps"]
    return kept_rows(config, data, view)[0] // batch


def _base_spec(config: dict) -> dict:
    """Training fields every run shares, taken from the ``training`` section."""
    tr = config["training"]
    return {
        "world": config["world"],
        "backend": config["backend"],
        **backends.of(config).spec_fields(config),
        "batch_size": tr["batch_size"],
        "mini_batch_size": tr.get("mini_batch_size", tr["batch_size"]),
        "ppo_epochs": schema.setting(config, "training.ppo_epochs"),
        "max_prompt_length": tr["max_prompt_length"],
        "max_response_length": tr["max_response_length"],
        "temperature": tr["temperature"],
        "top_p": tr["top_p"],
        "clip": tr["clip"],
        "save_every": tr["save_every"],
        "reward_every": schema.setting(config, "training.reward_every"),
        "eval_every": None,
        "threads": schema.setting(config, "training.threads"),
        "method_cfg": {},
    }


def chat_options(config: dict, model_id: str) -> dict:
    """Chat-template options a model is rendered with, in training and evaluation alike
    (``thinking: false`` on Qwen3 -> ``enable_thinking: false``)."""
    thinking = config["models"][model_id].get("thinking")
    return {} if thinking is None else {"enable_thinking": thinking}


def _resolve_spec(config: dict, cell: Cell) -> dict:
    setting = config["settings"][cell.setting]
    method = METHODS[cell.method]
    tr = config["training"]
    over = dict(cell.overrides)
    epochs = over.get("epochs", schema.setting(config, ("settings", cell.setting, "epochs")))
    prompt_limit = setting.get("max_prompt_length", tr["max_prompt_length"])
    steps_per_epoch = _steps_per_epoch(
        config, setting["train_data"], tr["batch_size"], data_view(config, setting["student"], prompt_limit)
    )
    grpo = method.student_loss == "grpo"
    at = Paths.of(config)
    spec = {
        **_base_spec(config),
        "kind": "train",
        "setting": cell.setting,
        "variant": cell.variant,
        "method": cell.method,
        "seed": cell.seed,
        "domain": setting["domain"],
        "student": at.model(setting["student"]),
        "teacher": at.model(setting["teacher"]) if method.needs_teacher else None,
        "train_data": at.data(setting["train_data"]),
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "total_steps": epochs * steps_per_epoch,
        "n": tr["grpo"]["n"] if grpo else schema.setting(config, "training.n"),
        "lr": over.get("student_lr", tr["grpo"]["lr"] if grpo else tuning.lr(config, cell.setting, "student_lr")),
        "kl_beta": tr["grpo"]["kl_beta"] if grpo else 0.0,
        "max_prompt_length": setting.get("max_prompt_length", tr["max_prompt_length"]),
        "eval_every": over.get("eval_every"),
        "chat": chat_options(config, setting["student"]),
    }  # not the experiments that name the cell: adding one must not retrain the runs it shares
    if grpo and "batch_size" in tr["grpo"]:  # GRPO's own prompts per step (n samples each)
        spec["batch_size"] = spec["mini_batch_size"] = tr["grpo"]["batch_size"]
    own = json.loads(over.get("overrides", "{}"))  # the variant's own method settings
    for name in method.sections(set(config["methods"])):
        spec["method_cfg"][name] = deep_merge(method_cfg(config, cell.setting, name), own.get(name, {}))
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
            declared = {k: schema.default(f"methods.scout.teacher_lora.{k}") for k in ("alpha", "target_modules")}
            sc["teacher_lora"] = {**declared, **lora_cfg, "rank": rank}
        # "tuned" until the search has chosen it
        base_lr = tuning.lr(config, cell.setting, teacher_lr_param(setting, rank))
        sc["teacher_lr"] = over.get(
            "teacher_lr",
            base_lr if base_lr == tuning.TUNED else scaled_teacher_lr(base_lr, sc["interval"], main_interval),
        )
    return spec


def teacher_lora_rank(config: dict, cell: Cell) -> int:
    """A cell's LoRA teacher rank (``scout.config.teacher_lora_rank``)."""
    return lora_rank_of(config, cell.setting, cell.method, dict(cell.overrides))


def teacher_lr_param(setting: dict, rank: int) -> str:
    """The setting's key for a teacher's LR: a LoRA teacher's own where the setting gives one."""
    return "teacher_lora_lr" if rank and "teacher_lora_lr" in setting else "teacher_lr"


def teacher_prep_spec(config: dict, model_id: str) -> dict:
    """The GRPO run that prepares a teacher (Qwen3-8B-DAPO, or its toy mirror)."""
    prep = config["models"][model_id]["prepare"]
    tr = config["training"]
    view = data_view(config, prep["base"], tr["max_prompt_length"])
    steps = prep.get("steps") or _steps_per_epoch({**config, "training": {}}, prep["data"], prep["batch"], view)
    at = Paths.of(config)
    return {
        **_base_spec(config),
        "kind": "teacher_prep",
        "setting": model_id,
        "variant": "prepare",
        "method": "grpo",
        "seed": 1,
        "domain": (config.get("datasets", {}).get(prep["data"]) or config["toy"]["splits"][prep["data"]])["domain"],
        "student": at.model(prep["base"]),
        "teacher": None,
        "train_data": at.data(prep["data"]),
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


def check(config: dict) -> dict:
    """What only the grid shows about a config (``scout.config.validate`` has checked the rest): a
    tuned setting's validation set, and per cell an update or evaluation interval the run never
    reaches. Raises ConfigError listing every problem; returns the config."""
    errs = tuning.errors(config)
    errs += _step_no_ops(config)
    if errs:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errs))
    return config


def _step_no_ops(config: dict) -> list[str]:
    """Per cell: a teacher update interval or an evaluation interval the run never reaches."""
    errs, seen = [], set()
    grid = Grid.of(config)
    try:
        found = grid.cells
    except ConfigError as exc:
        return [str(exc)]
    for cell in found:
        spec = grid.spec(cell)
        total, over = spec["total_steps"], dict(cell.overrides)
        key = (cell.variant, cell.setting)
        if key in seen:
            continue
        seen.add(key)
        sc = grid.method_settings(cell).get("scout")
        if sc and sc.interval > total:
            errs.append(
                f"{cell.setting}/{cell.variant}: teacher update interval {sc.interval} exceeds the run's "
                f"{total} steps, so the teacher would never be updated"
            )
        if over.get("eval_every") and over["eval_every"] >= total:
            errs.append(
                f"{cell.setting}/{cell.variant}: eval_every {over['eval_every']} is not below the run's "
                f"{total} steps, so only the final checkpoint would be evaluated"
            )
    return errs


# ------------------------------------------------------------------------------------------------
# The grid of one config, resolved once
# ------------------------------------------------------------------------------------------------


class Grid:
    """One config's cells, the tuning stage's runs, each cell's spec, the seeds of each variant and
    how each run is trained, each computed once. What a spec says depends on the prepared data as
    well (``kept_rows``), so ``Grid.of`` hands out the same object while the config and the training
    sets' metadata files stay as they were, and a new one after either changes. The grid keeps its
    own copy of the config, so a caller that edits its dict afterwards changes no grid handed out."""

    _MEMO: OrderedDict[tuple, Grid] = OrderedDict()

    def __init__(self, config: dict):
        self.config = config
        self._specs: dict[Cell, dict] = {}

    @classmethod
    def of(cls, config: dict) -> Grid:
        key = (json.dumps(config, default=str), _metadata_state(config))
        grid = cls._MEMO.get(key)
        if grid is None:
            grid = cls._MEMO[key] = cls(copy.deepcopy(config))
            while len(cls._MEMO) > 16:
                cls._MEMO.popitem(last=False)
        return grid

    @cached_property
    def backend(self) -> backends.Backend:
        """The backend the config names (its jobs' resources, specs and preflight)."""
        return backends.of(self.config)

    def resources(self, family: str, setting: str = "", method: str = "", variant: str = "") -> dict:
        """What a job of ``family`` asks the cluster for (``scout.resources.job_resources``)."""
        return job_resources(self.config, family, setting, method, variant)

    @cached_property
    def served(self) -> dict[str, list[str]]:
        """Teacher model -> the settings whose teacher the workflow serves (``teacher_server: serve``)."""
        return teacher_server.served_by_workflow(self.config)

    @cached_property
    def paths(self) -> Paths:
        return Paths.of(self.config)

    @cached_property
    def settings(self) -> dict[str, entries.Setting]:
        return entries.settings(self.config)

    @cached_property
    def benchmarks(self) -> dict[str, entries.Benchmark]:
        return entries.benchmarks(self.config)

    @cached_property
    def experiments(self) -> dict[str, entries.Experiment]:
        return entries.experiments(self.config)

    @cached_property
    def models(self) -> dict[str, entries.Model]:
        return entries.models(self.config)

    @cached_property
    def evaluation(self) -> entries.Evaluation:
        return entries.evaluation(self.config)

    @cached_property
    def report(self) -> entries.Report:
        return entries.report(self.config)

    @cached_property
    def analysis(self) -> entries.Analysis:
        return entries.analysis(self.config)

    def benchmarks_for(self, domain: str) -> list[str]:
        """The benchmarks a setting of ``domain`` is evaluated on, in config order."""
        return [b.name for b in self.benchmarks.values() if b.domain == domain]

    @property
    def is_cut(self) -> bool:
        """Whether a selection (``select``) cut this grid from a larger one."""
        return bool(self.config.get("selected_from"))

    @cached_property
    def whole(self) -> Grid:
        """The grid a selection was cut from; this one where nothing was cut."""
        return Grid.of(unselected(self.config)) if self.is_cut else self

    @cached_property
    def alone(self) -> Grid:
        """This grid on its own: a selection's cells as if no larger grid stood behind it (the
        checkpoints its own cells are evaluated at, not every one the whole grid's runs export)."""
        return Grid.of({k: v for k, v in self.config.items() if k != "selected_from"}) if self.is_cut else self

    def in_whole(self, cell: Cell) -> Cell | None:
        """The whole grid's cell that is this one (the same key and overrides; the first one, as
        ``find``), or None: under a selection a kept run is the whole grid's run."""
        return self.whole._by_identity.get((cell.key, cell.overrides))

    @cached_property
    def _by_identity(self) -> dict[tuple[str, tuple], Cell]:
        return {(c.key, c.overrides): c for c in reversed(self.runs)}  # the first one wins

    @cached_property
    def cells(self) -> list[Cell]:
        return _expand_cells(self.config)

    @cached_property
    def search_cells(self) -> list[Cell]:
        return _expand_search_cells(self.config)

    @cached_property
    def runs(self) -> list[Cell]:
        """Every training run the workflow knows: the tuning stage's first (it trains a run the
        chosen grid cells then share), then the experiments'."""
        return self.search_cells + self.cells

    @cached_property
    def seeds(self) -> dict[tuple[str, str], list[int]]:
        """Sorted seeds of every (setting, variant), base rows included (seed 0): run r is the r-th."""
        out: dict[tuple[str, str], list[int]] = {(s, v): [0] for s in self.config["settings"] for v in BASE_VARIANTS}
        for c in self.cells:
            out.setdefault((c.setting, c.variant), []).append(c.seed)
        return {k: sorted(v) for k, v in out.items()}

    @cached_property
    def variants(self) -> dict[str, Cell]:
        """The first cell of each variant: a variant's method and overrides are the same everywhere."""
        out: dict[str, Cell] = {}
        for c in self.cells:
            out.setdefault(c.variant, c)
        return out

    @cached_property
    def _index(self) -> dict[tuple[str, str, int], Cell]:
        return {(c.setting, c.variant, c.seed): c for c in reversed(self.runs)}  # the first one wins

    def find(self, setting: str, variant: str, seed: int | str) -> Cell:
        cell = self._index.get((setting, variant, int(seed)))
        if cell is None:
            raise ConfigError(f"no cell {setting}/{variant}/s{seed} in the configured experiments")
        return cell

    def spec(self, cell: Cell) -> dict:
        """Everything a backend needs to train one cell, fully resolved (no further config lookups),
        computed once per cell; a copy, so a caller's edits stay its own."""
        if cell not in self._specs:
            self._specs[cell] = _resolve_spec(self.config, cell)
        return copy.deepcopy(self._specs[cell])

    def method_settings(self, cell: Cell) -> dict:
        """A cell's method sections as its spec resolves them (the variant's and the setting's
        overrides merged in), as records: ``grid.method_settings(cell)["scout"].interval``."""
        if cell not in self._specs:
            self.spec(cell)
        return entries.method_settings(self._specs[cell]["method_cfg"])

    @cached_property
    def plans(self) -> dict[Cell, sharing.Plan]:
        return sharing.plan_runs(self.config, self.runs, lambda c: self._specs.get(c) or self.spec(c))


def unselected(config: dict) -> dict:
    """The whole config a selection was cut from (``config.select`` keeps its experiments and probes
    in ``selected_from``), or the config itself where nothing was cut."""
    whole = config.get("selected_from")
    if not whole:
        return config
    out = {k: v for k, v in config.items() if k not in ("selected_from", "analysis")}
    return {**out, **whole}


def _metadata_state(config: dict) -> tuple:
    """When each training set's metadata changed (a spec's steps per epoch read it), or None."""
    out = []
    for name in sorted({s["train_data"] for s in config.get("settings", {}).values()}):
        try:
            out.append(Path(Paths.of(config).meta(name)).stat().st_mtime_ns)
        except (OSError, KeyError):
            out.append(None)
    return tuple(out)
