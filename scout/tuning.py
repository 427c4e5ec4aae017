"""The paper's tuning protocol, as a stage of the grid: learning rates chosen on a validation set.

The paper searched the student LR on OPD, then the teacher LR on SCOUT with that student LR fixed
(appendix, "Hyperparameter Settings"). A setting whose ``student_lr`` or ``teacher_lr`` is
``tuned`` gets the same: one search run per point of ``tuning.student_lr`` (OPD) and then of
``tuning.teacher_lr`` (SCOUT), each evaluated on its domain's validation set (``tuning.validation``:
a held-out slice of the training distribution, drawn apart from every test benchmark), and the
point with the best validation Avg is written to ``results/tuning/{setting}/{param}.json`` with
every point's score. The grid's cells read the choice from there (:func:`resolve`): every method
of the setting trains at the chosen student LR (GRPO keeps its own, as in the paper), and every
method that trains a teacher (the prefix-0 control and OPTR+SCOUT too) at the chosen teacher LR.

Beyond the paper: a LoRA teacher learns at another LR (about ten times a full teacher's for
policy-gradient RL, "LoRA Without Regret"), so a setting may give its LoRA teachers their own,
``teacher_lora_lr``. Said ``tuned``, it is searched on SCOUT with a LoRA teacher (at the rank its
LoRA variants use) over ``tuning.teacher_lora_lr``, at the chosen student LR, beside the full
teacher's search; only where a LoRA variant trains in the setting.

A search run is an ordinary training cell (``grid.search_cells``): the one whose spec equals a grid
cell's once the choice is made (the chosen point, seed 1) is that cell's run, never trained twice.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from scout import schema
from scout.config import ConfigError, results_root, teacher_lora_rank, validation_sets
from scout.io import read_record
from scout.methods import METHODS
from scout.prompts import normalized

TUNED = "tuned"
PARAMS = ("student_lr", "teacher_lr", "teacher_lora_lr")
AFTER = {"student_lr": (), "teacher_lr": ("student_lr",), "teacher_lora_lr": ("student_lr",)}  # trains at their choices
SEARCH_METHOD = {"student_lr": "opd", "teacher_lr": "scout", "teacher_lora_lr": "scout"}
VARIANT_PREFIX = {"student_lr": "opd-lr", "teacher_lr": "scout-tlr", "teacher_lora_lr": "scout-lora-tlr"}
OVERRIDE = {"student_lr": "student_lr", "teacher_lr": "teacher_lr", "teacher_lora_lr": "teacher_lr"}  # a run's key


def search_grid(config: dict, param: str) -> list[float]:
    """The learning rates searched for ``param``: ``tuning.<param>``, or the paper's (the schema's
    default: its appendix, "Hyperparameter Settings")."""
    return list(schema.setting(config, ("tuning", param)))


def before(params: list[str], param: str) -> list[str]:
    """The searches among ``params`` (a setting's tuned ones) whose choices ``param``'s search trains at."""
    return [p for p in params if p in AFTER[param]]


def lora_ranks(config: dict, setting: str) -> set[int]:
    """The LoRA ranks of the teachers the grid trains in ``setting`` (none: every teacher is full),
    read from the experiments' entries (``scout.config.teacher_lora_rank``)."""
    ranks = set()
    for e in config["experiments"].values():
        if setting not in e["settings"]:
            continue
        for m in e["methods"]:
            entry = {"name": m, "method": m} if isinstance(m, str) else m
            if entry["method"] in METHODS:
                ranks.add(teacher_lora_rank(config, setting, entry["method"], entry))
    return ranks - {0}


def lora_rank(config: dict, setting: str) -> int:
    """The rank the LoRA teacher LR is searched at: the one every LoRA variant of the setting uses."""
    ranks = lora_ranks(config, setting)
    if len(ranks) != 1:
        raise ConfigError(f"settings.{setting}.teacher_lora_lr: tuned, but its LoRA teachers have ranks "
                          f"{sorted(ranks)}; the search runs at one rank")  # fmt: skip
    return ranks.pop()


class Pending(Exception):
    """A tuned value whose search has not finished: the cell cannot be specified yet."""


def tuned_params(setting: dict) -> list[str]:
    """The parameters a setting leaves to the search, in search order."""
    return [p for p in PARAMS if setting.get(p) == TUNED]


def tuned_settings(config: dict) -> dict[str, list[str]]:
    """setting -> its tuned parameters, for the settings the grid trains (the LoRA teacher's LR only
    where a LoRA teacher trains)."""
    used = {s for e in config["experiments"].values() for s in e["settings"]}
    out = {s: tuned_params(spec) for s, spec in config["settings"].items() if s in used}
    out = {s: [x for x in p if x != "teacher_lora_lr" or lora_ranks(config, s)] for s, p in out.items()}
    return {s: p for s, p in out.items() if p}


def errors(config: dict) -> list[str]:
    """What keeps a config's tuned settings from being searched: a tuned LR needs its domain's
    validation set, held out of the training data and the benchmarks (``grid.check``)."""
    errs, t = [], config.get("tuning", {})
    sets = validation_sets(config)
    for name, s in config["settings"].items():
        params = tuned_params(s)
        if not params:
            continue
        v = t.get("validation", {}).get(s["domain"])
        if v is None:
            errs.append(f"settings.{name}: tuned, but tuning.validation has no {s['domain']} validation set")
        elif v["data"] not in sets:
            where = "toy.validation" if config["world"] == "toy" else "a dataset's holdout, named DATASET.holdout"
            errs.append(
                f"tuning.validation.{s['domain']}.data: unknown validation set {v['data']!r} ({where}); "
                f"expected one of {sorted(sets)}"
            )
        elif sets[v["data"]]["domain"] != s["domain"]:
            errs.append(f"tuning.validation.{s['domain']}.data: {v['data']!r} is not a {s['domain']} set")
        elif v["data"] == s["train_data"] or v["data"] in config["benchmarks"]:
            errs.append(
                f"tuning.validation.{s['domain']}.data: {v['data']!r} is a training set or a benchmark, not held out"
            )
    return errs


def independent_settings(config: dict) -> list[str]:
    """Settings whose runs are what they are whatever the searches choose: not tuned, and with
    models or data of their own (a run of a tuned setting could otherwise come to equal one of
    theirs and be shared). The workflow starts their jobs while the searches run."""
    tuned = tuned_settings(config)
    keys = {(config["settings"][t]["teacher"], config["settings"][t]["student"], config["settings"][t]["train_data"])
            for t in tuned}  # fmt: skip
    return [
        name
        for name, s in config["settings"].items()
        if name not in tuned and (s["teacher"], s["student"], s["train_data"]) not in keys
    ]


def variant_name(param: str, lr: float) -> str:
    """The search run's variant: ``opd-lr3e-5``, ``scout-tlr1.5e-4``, ``scout-lora-tlr1.2e-3``."""
    mantissa, exponent = f"{lr:.6e}".split("e")
    return f"{VARIANT_PREFIX[param]}{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def choice_path(config: dict, setting: str, param: str) -> Path:
    return Path(results_root(config)) / "tuning" / setting / f"{param}.json"


def validation_dir(config: dict, setting: str, variant: str, seed: int | str) -> str:
    return f"{results_root(config)}/tuning/{setting}/{variant}/s{seed}"


def param_of(variant: str) -> str | None:
    """The parameter a search run's variant searches (None: not a search run's name)."""
    for param, prefix in sorted(VARIANT_PREFIX.items(), key=lambda kv: -len(kv[1])):
        if variant.startswith(prefix) and variant[len(prefix) : len(prefix) + 1].isdigit():
            return param
    return None


def choose(points: list[dict]) -> dict:
    """The point with the highest validation score (``{"lr", "score"}`` each, in grid order; a tie
    goes to the earlier point). Refuses an empty search or a score that is not a number."""
    if not points:
        raise ValueError("no search points to choose from")
    bad = [p["lr"] for p in points if not isinstance(p["score"], (int, float)) or math.isnan(p["score"])]
    if bad:
        raise ValueError(f"search points without a validation score: {bad}")
    best = max(range(len(points)), key=lambda i: (points[i]["score"], -i))
    return points[best]


def chosen(config: dict, setting: str, param: str) -> float | None:
    """The chosen value, or None while the search has not finished."""
    return chosen_in(choice_path(config, setting, param))


def chosen_in(path: str | Path) -> float | None:
    path = Path(path)
    return float(json.loads(path.read_text())["chosen"]) if path.exists() else None


def resolve(config: dict, strict: bool = False) -> dict:
    """A copy of ``config`` that carries the search's choices where they are written
    (``tuning.chosen``, read by :func:`lr`); the settings keep saying ``tuned``, so the search stays
    part of the grid. With ``strict``, a choice not written yet raises :class:`Pending`."""
    out = copy.deepcopy(config)
    found: dict[str, dict[str, float]] = {}
    for setting, params in tuned_settings(config).items():
        for param in params:
            value = chosen(config, setting, param)
            if value is None and strict:
                raise Pending(f"{setting}: {param} is being tuned ({choice_path(config, setting, param)} not written)")
            if value is not None:
                found.setdefault(setting, {})[param] = value
    if found:
        out.setdefault("tuning", {})["chosen"] = found
    return out


def lr(config: dict, setting: str, param: str) -> float | str:
    """A setting's student or teacher LR: its number, the search's choice (a resolved config), or
    ``tuned`` while the search runs."""
    value = config["settings"][setting][param]
    if value != TUNED:
        return value
    return config.get("tuning", {}).get("chosen", {}).get(setting, {}).get(param, TUNED)


def pending(config: dict) -> list[tuple[str, str]]:
    """(setting, param) whose choice is not written yet."""
    return [(s, p) for s, ps in tuned_settings(config).items() for p in ps if chosen(config, s, p) is None]


def write_choice(spec: dict, out: str | Path, log=print) -> dict:
    """Read every search point's validation record, choose, and write the choice with the table."""
    points = []
    for p in spec["points"]:
        records = [read_record(f, ("mean", "sem"), "validation record") for f in p["records"]]
        scores = [r["mean"] for r in records]
        # the evaluation's standard error of the seeds' mean (each seed's over its repeats, in quadrature):
        # how far apart two points must be before the choice between them is more than a draw
        sem = math.sqrt(sum(r.get("sem", math.nan) ** 2 for r in records)) / len(records)
        points.append({"lr": p["lr"], "variant": p["variant"], "seeds": p["seeds"],
                       "score": sum(scores) / len(scores), "scores": scores, "sem": sem})  # fmt: skip
    best = choose(points)
    result = {
        "setting": spec["setting"],
        "param": spec["param"],
        "method": spec["method"],
        "validation": spec["validation"],
        "metric": "validation accuracy (avg@k over the validation set, mean over the seeds)",
        "fixed": {**spec.get("fixed", {}), **{p: chosen_in(path) for p, path in spec.get("fixed_by", {}).items()}},
        "points": points,
        "chosen": best["lr"],
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    for p in points:
        mark = "  <- chosen" if p is best else ""
        log(
            f"{spec['setting']} {spec['param']} {p['lr']:g}: validation {100 * p['score']:.1f} "
            f"(± {100 * p['sem']:.1f}){mark}"
        )
    return result


def overlap(validation: list[dict], tests: dict[str, list[dict]]) -> dict[str, list[str]]:
    """Benchmark -> ids of its rows whose prompt is also a validation prompt (none: disjoint)."""
    held = {normalized(r["prompt"]) for r in validation}
    hits = {name: [r["id"] for r in rows if normalized(r["prompt"]) in held] for name, rows in tests.items()}
    return {name: ids for name, ids in hits.items() if ids}
