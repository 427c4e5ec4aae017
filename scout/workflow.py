"""What the Snakefile hands its jobs besides inputs: spec files, and the environment they run in.

A job's spec travels as a file named by its content (``{results}/specs/{job}.{digest}.json``), so
its command line stays one line, and a changed spec is a changed parameter that makes Snakemake
rerun the job. The files are written when the workflow is evaluated (dry runs too): small,
immutable, and rewritten identically by every evaluation. Beside a training job's spec, its
resources, which are not part of what it computes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent


# snakemake's flags a remake needs as the user gave them: (name, how many values), by alias
_KEPT = {"--configfile": ("--configfile", "+"), "--configfiles": ("--configfile", "+"), "--config": ("--config", "+"),
         "-C": ("--config", "+"), "--profile": ("--profile", 1), "--workflow-profile": ("--workflow-profile", 1),
         "--cores": ("--cores", 1), "-c": ("--cores", 1), "--jobs": ("--jobs", 1), "-j": ("--jobs", 1),
         "--snakefile": ("--snakefile", 1), "-s": ("--snakefile", 1), "--directory": ("--directory", 1),
         "-d": ("--directory", 1), "--executor": ("--executor", 1), "-e": ("--executor", 1)}  # fmt: skip
# the config flags by alias (their canonical names)
_CONFIG_FLAGS = {alias: flag for alias, (flag, _) in _KEPT.items() if flag in ("--config", "--configfile")}


def repeated_config_flags(argv: list[str]) -> list[str]:
    """The config flags a command line gives more than once: snakemake silently drops all but the
    last (``--config a=1 --config b=2`` runs without a=1), so the workflow refuses them by name."""
    seen: dict[str, int] = {}
    for token in argv:
        if token == "--":
            break
        flag = _CONFIG_FLAGS.get(token.split("=", 1)[0])
        if flag:
            seen[flag] = seen.get(flag, 0) + 1
    return sorted(f for f, n in seen.items() if n > 1)


REMAKE_ENV = "SCOUT_REMAKE_ARGS"


def remake_args(argv: list[str]) -> list[str]:
    """The part of a snakemake command line that a remake of one of its files needs: the config
    files and ``--config`` pairs (``select`` too), the profile or cores, the Snakefile and working
    directory; targets, dry runs and forcing flags are left out."""
    out, i = [], 1
    while i < len(argv) and argv[i] != "--":
        name, eq, value = argv[i].partition("=")
        kept = _KEPT.get(name)
        i += 1
        if not kept:
            continue
        flag, count = kept
        if eq:
            out += [flag, value]
            continue
        values = []
        while i < len(argv) and argv[i] != "--" and not (argv[i].startswith("-") and len(argv[i]) > 1):
            values.append(argv[i])
            i += 1
            if count == 1:
                break
        out += [flag, *values]
    if not {"--cores", "--jobs", "--profile", "--executor"} & set(out):
        out += ["--cores", "1"]
    return out


def spec_digest(spec: dict) -> str:
    """A job spec's identity: the first 12 hex digits of the SHA-256 of its file's text. A job that
    reads the spec back computes the same digest (key order and numbers survive the round trip)."""
    return hashlib.sha256(json.dumps(spec, indent=1).encode()).hexdigest()[:12]


def spec_file(results: str, job: str, spec: dict) -> str:
    """``@path`` of the file holding ``spec`` (the form ``scout --spec`` reads). Keys keep their
    order: the config's order is meaningful (the first cell of a shared run trains it, tables list
    experiments in order), so a job must read the config as the workflow did."""
    text = json.dumps(spec, indent=1)
    digest = spec_digest(spec)
    path = Path(results) / "specs" / f"{job}.{digest}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return f"@{path}"


def placed_spec_file(results: str, job: str, spec: dict, resources: dict | None) -> str:
    """:func:`spec_file`, and beside it the resources the job runs on, where its backend places
    itself by them (verl: ``{job}.{digest}.resources.json``). Not in the spec: its path is a param
    Snakemake compares to decide a rerun, and a longer time limit, more memory or another node count
    must retrain no finished run. Rewritten when they change; ``scout train`` reads them."""
    at = spec_file(results, job, spec)
    if resources is not None:
        path, text = resources_path(at), json.dumps(resources, indent=1)
        if not path.exists() or path.read_text() != text:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return at


def resources_path(spec_at: str) -> Path:
    path = Path(spec_at.removeprefix("@"))
    return path.with_name(f"{path.name.removesuffix('.json')}.resources.json")


def resources_of(spec_at: str) -> dict | None:
    """The resources written beside a job's spec file (:func:`placed_spec_file`), or None."""
    if not spec_at.startswith("@") or not resources_path(spec_at).exists():
        return None
    return json.loads(resources_path(spec_at).read_text())


def export_environment(workflow_dir: str) -> None:
    """Jobs learn which checkout launched them (``scout`` warns when it is another one), and the
    workflow warns at once when the installed ``scout`` package is not this checkout's."""
    os.environ["SCOUT_WORKFLOW"] = str(Path(workflow_dir).resolve())
    if REMAKE_ENV not in os.environ or "--target-jobs" not in sys.argv:  # a Slurm job keeps its submitter's
        os.environ[REMAKE_ENV] = shlex.join(remake_args(sys.argv))
    if Path(workflow_dir).resolve() != CHECKOUT:
        print(
            f"warning: the scout package imported here is {CHECKOUT}, not this workflow's checkout "
            f"{Path(workflow_dir).resolve()}; jobs would run the other code (pip install -e {workflow_dir})",
            file=sys.stderr,
        )


SANDBOX_HIDE = "SCOUT_SANDBOX_HIDE"  # scout.grading.sandbox.HIDE_ENV (not imported: the workflow needs no grader)


def export_sandbox_hide(config: dict, results: str) -> None:
    """Name the folders that hold benchmarks' expected values to the code sandbox of every job: the
    results folder (its prepared benchmarks) and the data preparation's mirror and cache. The
    sandbox hides a job's working directory itself, but a results folder elsewhere (a scratch file
    system) or a Ray worker's other working directory it cannot know."""
    data = config.get("data", {})
    folders = [results, data.get("mirror"), data.get("cache")]
    have = [p for p in os.environ.get(SANDBOX_HIDE, "").split(os.pathsep) if p]
    new = [str(Path(f).expanduser().resolve()) for f in folders if f]
    os.environ[SANDBOX_HIDE] = os.pathsep.join(dict.fromkeys([*have, *new]))


_RUN_TARGET = r"(?:train|eval)/(?P<setting>[^/]+)/(?P<variant>[^/]+)/s(?P<seed>\d+)(?:/|$)"


def outside_grid(targets, results: str, runs: set[tuple[str, str, int]], base_variants, config_dir: Path,
                 configfiles: list[str], evaluations=None) -> list[str]:  # fmt: skip
    """Why each run target (a training's or an evaluation's path) names no run of the configured
    grid, and which of the checkout's configs define its variant: snakemake alone says only "No
    rule to produce" or fails inside an input function. ``evaluations``: a callable giving every
    evaluation record of the grid, to name a record of a run that is in the grid but not of it (a
    misspelled benchmark, another domain's, a checkpoint it does not export)."""
    import re

    import yaml

    pattern = re.compile(rf"^(?:\./)?{re.escape(results.rstrip('/'))}/{_RUN_TARGET}")
    out = []
    for target in targets:
        m = pattern.match(str(target))
        if not m:
            continue
        setting, variant, seed = m["setting"], m["variant"], int(m["seed"])
        if variant in base_variants or (setting, variant, seed) in runs:
            if evaluations is not None and str(target).endswith(".json") and "/eval/" in str(target):
                out += _not_evaluated(str(target).removeprefix("./"), evaluations())
            continue
        seeds = sorted(s for st, v, s in runs if (st, v) == (setting, variant))
        if seeds:
            out.append(f"{target}: seed {seed} is not one of {setting}/{variant}'s seeds in this grid ({seeds})")
            continue
        here, elsewhere = [], []  # configs of the checkout whose experiments run the variant
        for path in sorted(config_dir.glob("*.yaml")):
            try:
                exps = (yaml.safe_load(path.read_text()) or {}).get("experiments") or {}
            except (OSError, yaml.YAMLError):
                continue
            for name, exp in exps.items():
                names = {m if isinstance(m, str) else m.get("name") for m in exp.get("methods", [])}
                if variant in names:
                    where = f"{path.relative_to(config_dir.parent)} (experiment {name})"
                    if setting in exp.get("settings", []):
                        here.append(where)
                    else:
                        elsewhere.append(f"{where} for {', '.join(exp.get('settings', []))}")
        given = " ".join(configfiles) or "config/config.yaml"
        text = f"{target}: {setting}/{variant} is not in the grid of {given}"
        if here:
            text += (f"; {', '.join(here)} defines it: name that file after yours (the target first: "
                     f"--configfile takes every word after it), snakemake {target} --configfile {given} "
                     f"{here[0].split(' ')[0]}")  # fmt: skip
        elif elsewhere:
            text += f"; {variant} runs in {'; '.join(elsewhere)}, not {setting}"
        else:
            text += (f", nor in a config of {config_dir}; the grid's variants of {setting}: "
                     f"{', '.join(sorted({v for st, v, _ in runs if st == setting})) or 'none'}")  # fmt: skip
        out.append(text)
    return out


def _not_evaluated(target: str, records) -> list[str]:
    """Why an evaluation record of a run of the grid is not one the grid makes: what that run is
    evaluated at and on."""
    records = set(records)
    if target in records:
        return []
    unit = target.rsplit("/", 2)[0]  # results/eval/setting/variant/sN
    theirs = [r.removeprefix(unit + "/") for r in records if r.startswith(unit + "/")]
    ckpts = sorted({r.split("/")[0] for r in theirs})
    benches = sorted({r.split("/")[1].removesuffix(".json") for r in theirs})
    if not theirs:
        return [f"{target}: this run is not evaluated in this grid (it shares another run's, or trains for a choice)"]
    return [f"{target}: not an evaluation of this grid; {unit} is evaluated at {', '.join(ckpts)} "
            f"on {', '.join(benches)}"]  # fmt: skip
