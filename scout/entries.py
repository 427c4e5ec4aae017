"""The grid's typed records: a cell (one training run), and the config's entries and sections: a
setting (teacher-student pair), a benchmark, a model, an experiment, the evaluation, the report's
options and the teacher probes. A config record has a field for each key the schema declares there
(a test holds the two to the same keys) and the schema's default where the config leaves a key out;
a list is a tuple, so that a record cannot be changed. The grid hands them out (``Grid.settings``,
``.benchmarks``, ``.models``, ``.experiments``, ``.evaluation``, ``.report``, ``.analysis``), so
that the planner and the report read ``setting.domain``, not a nested dict of the config."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from scout import schema


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


@dataclass(frozen=True)
class Setting:
    """A teacher-student pair (``settings.NAME``)."""

    name: str
    teacher: str
    student: str
    domain: str
    train_data: str
    student_lr: float | str  # a number, or "tuned" until the tuning stage has chosen it
    teacher_lr: float | str
    teacher_lora_lr: float | str | None = None
    epochs: int | None = None
    max_prompt_length: int | None = None  # None: training.max_prompt_length
    overrides: dict | None = field(default=None, hash=False)
    mirrors: str | None = None
    caveat: str | None = None
    teacher_server: dict | str | None = field(default=None, hash=False)


@dataclass(frozen=True)
class Benchmark:
    """A test set (``benchmarks.NAME``); the tables head its column with ``label``."""

    name: str
    domain: str
    rows: int
    repeats: int
    hub: str | None = None
    config: str | None = None
    split: str | None = None
    label: str | None = None
    toy: dict | None = field(default=None, hash=False)

    @property
    def heading(self) -> str:
        """The tables' column head: its label, or its name."""
        return self.label or self.name


@dataclass(frozen=True)
class Model:
    """A model (``models.NAME``): from the hub (or a local path), a toy model built here, or a teacher
    prepared from another model (``prepare.base``)."""

    name: str
    hub: str | None = None
    toy: dict | None = field(default=None, hash=False)  # its architecture and pretraining
    prepare: dict | None = field(default=None, hash=False)  # the GRPO run that prepares it
    thinking: bool | None = None
    params: float | None = None  # billions, for what ``scout plan`` prints
    arch: dict | None = field(default=None, hash=False)

    @property
    def base(self) -> str | None:
        """The model a prepared teacher starts from; None for any other."""
        return self.prepare["base"] if self.prepare else None


@dataclass(frozen=True)
class Scout:
    """SCOUT's teacher phase (``methods.scout``) as a cell's spec resolves it: every ``interval``
    steps, ``k`` continuations of student prefixes cut at ``prefix_ratio`` of the response."""

    interval: int
    k: int
    prefix_ratio: tuple[float, float]
    kl_beta: float
    split: str
    answer_marker: dict | None = field(default=None, hash=False)
    teacher_lora: dict | None = field(default=None, hash=False)  # in a spec only where its rank is set
    teacher_lr: float | str | None = None  # "tuned" until the search has chosen it
    prefix_zero: bool = False  # the prefix-0 control: continuations from the bare prompt
    RESOLVED: ClassVar = ("teacher_lr", "prefix_zero")  # the grid's, not the config's


@dataclass(frozen=True)
class Esr:
    """ESR's response budget (``methods.esr``)."""

    max_tokens: int


@dataclass(frozen=True)
class PruneOpd:
    """Prune-OPD's token weights and adaptive budget (``methods.prune_opd``)."""

    tau: float
    w_drop: float
    w_base: float
    topk: int
    hit_fraction: float
    budget: dict = field(hash=False)


@dataclass(frozen=True)
class RelayOpd:
    """Relay-OPD's interleaved student and teacher legs (``methods.relay_opd``)."""

    max_legs: int
    max_paragraphs: int
    max_leg_tokens: int
    student_topk: int


@dataclass(frozen=True)
class Optr:
    """OPTR's trust mask and its outliers' top-k forward KL (``methods.optr``)."""

    threshold: float
    outlier: str
    topk: int


# a method section's record; a section of a method added later without one stays a mapping
METHOD_SECTIONS = {"scout": Scout, "esr": Esr, "prune_opd": PruneOpd, "relay_opd": RelayOpd, "optr": Optr}


@dataclass(frozen=True)
class Evaluation:
    """How checkpoints are evaluated (``evaluation``): the sampling, the engine and where it runs."""

    temperature: float
    top_p: float
    max_new_tokens: int
    engine: str
    device: str  # where the transformers engine runs; vLLM places itself
    engine_options: dict | None = field(default=None, hash=False)  # keyword arguments of vllm.LLM
    intermediate_repeats: int | None = None  # None: a benchmark's repeats at every checkpoint

    @property
    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}


@dataclass(frozen=True)
class Experiment:
    """An experiment (``experiments.NAME``): the settings it runs, its methods (ids, or variants
    ``{name, method, ...}``) and the seeds of every cell."""

    name: str
    settings: tuple[str, ...]
    methods: tuple = field(hash=False)
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Report:
    """How the report tests and renders (``report``)."""

    test: str
    alpha: float
    baseline: str  # the variant the p-values compare against
    pdf: bool | str
    scope: str | None = None  # what the page covers (a selection writes it)
    selection: str | None = None
    primary: dict | None = field(default=None, hash=False)  # {claims, settings} of the primary family

    @property
    def primary_on(self) -> tuple[str, ...]:
        """The settings the primary family is tested on."""
        return tuple((self.primary or {}).get("settings", ()))

    def is_primary(self, claim_id: str, setting: str) -> bool:
        """Whether a claims-page row belongs to the primary family: its claim on its settings."""
        return setting in self.primary_on and claim_id in (self.primary or {}).get("claims", ())


@dataclass(frozen=True)
class Analysis:
    """The teacher probes (``analysis``); a config without the section probes no setting."""

    settings: tuple[str, ...] = ()
    benchmark: str | None = None
    ratios: tuple[float, ...] = ()
    k: int | None = None
    responses: int | None = None
    questions: int | None = None
    checkpoints: tuple[int, ...] = ()
    seeds: tuple[int, ...] | None = None  # None: every seed the grid trains
    max_new_tokens: int | None = None


def declared_keys(kind: type) -> set[str]:
    """The config keys a record holds (every field but its name and what the grid resolves)."""
    return {f.name for f in fields(kind)} - {"name", *getattr(kind, "RESOLVED", ())}


def _record(kind: type, where: tuple, entry: dict, **name):
    """A record of ``entry`` (the config's, or a spec's section at ``where`` in the schema): the
    declared keys, with the schema's default where one is missing, and what the grid resolved."""
    values = {}
    for key in declared_keys(kind) | (set(getattr(kind, "RESOLVED", ())) & set(entry)):
        if key in entry:
            values[key] = tuple(entry[key]) if isinstance(entry[key], list) else entry[key]
        elif "default" in schema.node((*where, key)):
            values[key] = schema.default((*where, key))
    return kind(**name, **values)


def settings(config: dict) -> dict[str, Setting]:
    """The config's settings, in its order."""
    return {name: _record(Setting, ("settings", "*"), entry, name=name) for name, entry in config["settings"].items()}


def benchmarks(config: dict) -> dict[str, Benchmark]:
    """The config's benchmarks, in its order."""
    return {name: _record(Benchmark, ("benchmarks", "*"), entry, name=name) for name, entry in config["benchmarks"].items()}


def models(config: dict) -> dict[str, Model]:
    """The config's models, in its order."""
    return {name: _record(Model, ("models", "*"), entry, name=name) for name, entry in config["models"].items()}


def method_settings(method_cfg: dict) -> dict:
    """A cell's method sections (its spec's ``method_cfg``) as records, by section name."""
    return {name: _record(METHOD_SECTIONS[name], ("methods", name), section) if name in METHOD_SECTIONS else section
            for name, section in method_cfg.items()}  # fmt: skip


def evaluation(config: dict) -> Evaluation:
    return _record(Evaluation, ("evaluation",), config["evaluation"])


def experiments(config: dict) -> dict[str, Experiment]:
    """The config's experiments, in its order."""
    return {name: _record(Experiment, ("experiments", "*"), e, name=name) for name, e in config["experiments"].items()}


def report(config: dict) -> Report:
    return _record(Report, ("report",), config.get("report") or {})


def analysis(config: dict) -> Analysis:
    return _record(Analysis, ("analysis",), config.get("analysis") or {})
