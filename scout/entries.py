"""A setting (teacher-student pair) and a benchmark of the config as typed records: a field for each
key the schema declares for a ``settings`` or ``benchmarks`` entry (a test holds the two to the same
keys), the schema's default where an entry leaves a key out. The grid hands them out
(``Grid.settings``, ``Grid.benchmarks``), so that the planner reads ``setting.domain``, not a
nested dict of the config."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from scout import schema


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


def declared_keys(kind: type) -> set[str]:
    """The config keys a record holds (every field but its name)."""
    return {f.name for f in fields(kind)} - {"name"}


def _record(kind: type, section: str, name: str, entry: dict):
    values = {}
    for key in declared_keys(kind):
        if key in entry:
            values[key] = entry[key]
        elif "default" in schema.node((section, "*", key)):
            values[key] = schema.default((section, "*", key))
    return kind(name=name, **values)


def settings(config: dict) -> dict[str, Setting]:
    """The config's settings, in its order."""
    return {name: _record(Setting, "settings", name, entry) for name, entry in config["settings"].items()}


def benchmarks(config: dict) -> dict[str, Benchmark]:
    """The config's benchmarks, in its order."""
    return {name: _record(Benchmark, "benchmarks", name, entry) for name, entry in config["benchmarks"].items()}
