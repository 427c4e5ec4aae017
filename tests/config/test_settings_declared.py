"""Each setting is declared once, in the schema the workflow validates with: its type, range, help
and default. Code reads defaults from there (``scout.schema``), and the key reference in
``docs/config-keys.md`` is generated from it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import jsonschema
import pytest

from scout import schema
from tests.support.toy import REPO

# Literal fallbacks that are not a setting's default: the key is a schema key's name, the value is
# something else's
NOT_SETTINGS = {
    ("scout/analysis.py", "label"): "a probe row's label, not a benchmark's",
    ("scout/commands.py", "seed"): "a spec's seed, for a spec that names none",
    ("scout/cost.py", "step"): "the step a continued run starts from; none: 0",
    ("scout/grid.py", "overrides"): "a variant's overrides as JSON; none: an empty mapping",
    ("scout/tracking.py", "kind"): "a job spec's kind",
    ("scout/verl/data.py", "id"): "a data row's id, in an error message",
    ("scout/verl/preflight.py", "backend"): "verl's own config key, at verl's default",
}


def test_a_default_is_read_by_its_settings_path():
    assert schema.default("evaluation.engine") == "transformers"
    assert schema.default("training.threads") == 1 and schema.default("training.share_runs") is True
    # a name of the user's (a setting, with a dot in it) takes its map's entry
    assert schema.default(("settings", "q4b-q1.7b-math", "epochs")) == schema.default("settings.*.epochs") == 1
    assert schema.default("resources.train.default.teacher_trainer") == "own"  # through a $ref
    assert schema.setting({"evaluation": {"engine": "vllm"}}, "evaluation.engine") == "vllm"
    assert schema.setting({"evaluation": {}}, "evaluation.engine") == "transformers"
    assert schema.setting({}, "tuning.seeds") == [1]
    got = schema.default("tuning.seeds")
    got.append(2)  # a copy: the next reader gets the declared value
    assert schema.default("tuning.seeds") == [1]
    with pytest.raises(KeyError, match="the schema declares no default for training.batch_size"):
        schema.default("training.batch_size")
    with pytest.raises(KeyError, match="the schema has no setting training.batchsize"):
        schema.default("training.batchsize")


def _declared(node: dict, path: tuple = ()):
    """(path, node) of every schema node that declares a default, ``$defs`` included."""
    if isinstance(node, dict):
        if "default" in node and path and path[-1] != "properties":  # not a key named "default"
            yield path, node
        for key, sub in node.items():
            if key != "default":
                yield from _declared(sub, (*path, key))
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _declared(sub, (*path, str(i)))


def test_every_declared_default_is_a_value_its_setting_accepts():
    doc = schema.document()
    found = list(_declared(doc))
    assert len(found) >= 30
    for path, node in found:
        check = {k: v for k, v in node.items() if k != "default"} | {"$defs": doc["$defs"]}
        errors = list(jsonschema.Draft202012Validator(check).iter_errors(node["default"]))
        assert not errors, f"{'.'.join(path)}: default {node['default']!r}: {errors[0].message}"
    # and the check can fail: a default out of its range is caught
    bad = {"type": "integer", "minimum": 1, "$defs": doc["$defs"]}
    assert list(jsonschema.Draft202012Validator(bad).iter_errors(0))


def test_the_key_reference_is_generated_from_the_schema_and_every_key_has_its_help():
    text = schema.reference()
    on_disk = (REPO / "docs" / "config-keys.md").read_text()
    assert on_disk == text, "docs/config-keys.md is not the schema's: run python -m scout.schema"
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) >= 200
    helpless = [row.split("|")[1].strip() for row in rows if not row.rstrip(" |").split("|")[-1].strip()]
    assert helpless == [], f"keys without help in the schema: {helpless}"
    assert "| `evaluation.engine` | one of `transformers`, `vllm` | `\"transformers\"` |" in text
    assert "| `training.batch_size` | an integer (at least 1) | required | prompts per step |" in text


def _keys(node, out: set) -> set:
    if isinstance(node, dict):
        out |= set(node.get("properties", {}))
        for sub in node.values():
            _keys(sub, out)
    elif isinstance(node, list):
        for sub in node:
            _keys(sub, out)
    return out


def literal_defaults(source: str, keys: set) -> list[tuple[int, str, str]]:
    """``x.get("<a schema key>", <a literal>)`` calls: a default written in code. An empty mapping,
    list or string, or None, is an absence, not a default."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        if len(node.args) != 2 or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in keys:
            continue
        try:
            value = ast.literal_eval(node.args[1])
        except ValueError:  # computed from something else (another key, the run's seed)
            continue
        if value not in (None, "", [], (), {}):
            out.append((node.lineno, node.args[0].value, ast.unparse(node)))
    return out


def test_the_code_writes_no_default_of_its_own():
    keys = _keys(schema.document(), set())
    found = []
    for path in sorted((REPO / "scout").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for line, key, call in literal_defaults(path.read_text(), keys):
            if (rel, key) not in NOT_SETTINGS:
                found.append(f"{rel}:{line}: {call}")
    assert found == [], "defaults written in code; read them from the schema (scout.schema.setting or default):\n" + "\n".join(found)
    # every exception still names a fallback the code has
    for rel, key in NOT_SETTINGS:
        assert any(k == key for _, k, _ in literal_defaults((REPO / rel).read_text(), keys)), (rel, key)
    # and the scan finds one
    planted = 'def f(config):\n    return config["training"].get("threads", 1), config.get("results", "out")\n'
    assert [(k, c) for _, k, c in literal_defaults(planted, keys)] == [
        ("threads", "config['training'].get('threads', 1)"),
        ("results", "config.get('results', 'out')"),
    ]


def test_a_setting_the_docs_name_is_one_the_schema_accepts():
    """``training.share_runs`` was documented but refused by validation (no schema key); now declared."""
    from scout import config as C
    from tests.support.toy import toy_config

    cfg = toy_config()
    cfg["training"]["share_runs"] = False
    C.validate(cfg)
    assert Path(REPO / "docs" / "reference.md").read_text().count("training.share_runs: false")


@pytest.mark.parametrize("where, kind", [(("settings", "*"), "Setting"), (("benchmarks", "*"), "Benchmark"),
                                         (("models", "*"), "Model"), (("experiments", "*"), "Experiment"),
                                         (("evaluation",), "Evaluation"),
                                         (("report",), "Report"), (("methods", "scout"), "Scout"),
                                         (("methods", "esr"), "Esr"), (("methods", "prune_opd"), "PruneOpd"),
                                         (("methods", "relay_opd"), "RelayOpd"), (("methods", "optr"), "Optr"),
                                         (("analysis",), "Analysis")])  # fmt: skip
def test_a_typed_entry_holds_exactly_the_keys_the_schema_declares(where, kind):
    """``scout.entries``' records and the schema's entries cannot drift: a key added to one alone fails."""
    from scout import entries

    declared = set(schema.node(where)["properties"])
    assert entries.declared_keys(getattr(entries, kind)) == declared


def test_a_typed_entry_reads_the_schema_default_and_leaves_the_rest_unset():
    from scout import entries
    from scout.grid import Grid
    from tests.support.toy import toy_config

    cfg = toy_config()
    cfg["settings"]["toy-l-s-math"].pop("epochs", None)
    cfg["settings"]["toy-l-s-math"]["max_prompt_length"] = 40
    grid = Grid.of(cfg)
    s = grid.settings["toy-l-s-math"]
    assert isinstance(s, entries.Setting) and s.name == "toy-l-s-math"
    assert (s.teacher, s.student, s.domain) == ("toy-large", "toy-small", "math")
    assert s.epochs == 1 == schema.default("settings.*.epochs")  # unwritten: the schema's default
    assert s.max_prompt_length == 40 and s.caveat is None  # written; unwritten without a default
    b = grid.benchmarks["tc-hard"]
    assert (b.domain, b.rows, b.repeats, b.label) == ("code", 256, 10, None)
    assert grid.benchmarks_for("code") == ["tc-easy", "tc-hard"]  # config order
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.domain = "code"


def test_a_typed_section_reads_defaults_and_freezes_lists():
    from scout import entries
    from scout.grid import Grid
    from tests.support.toy import toy_config

    cfg = toy_config()
    cfg["report"] = {"alpha": 0.05, "primary": {"claims": ["scout_beats_opd"], "settings": ["toy-l-s-math"]}}
    grid = Grid.of(cfg)
    r = grid.report
    assert (r.alpha, r.test, r.baseline, r.pdf) == (0.05, "welch", "opd", "auto")  # written; the schema's defaults
    assert r.scope is None and r.selection is None
    assert r.is_primary("scout_beats_opd", "toy-l-s-math")
    assert not r.is_primary("scout_beats_opd", "toy-mg-s-math") and not r.is_primary("esr_beats_opd", "toy-l-s-math")
    main = grid.experiments["main"]
    assert isinstance(main, entries.Experiment) and main.settings == tuple(cfg["experiments"]["main"]["settings"])
    assert list(grid.experiments) == list(cfg["experiments"])  # config order
    a = grid.analysis
    assert a.settings == tuple(cfg["analysis"]["settings"]) and a.ratios == tuple(cfg["analysis"]["ratios"])
    assert a.benchmark == cfg["analysis"]["benchmark"]
    del cfg["analysis"]
    assert Grid.of(cfg).analysis == entries.Analysis()  # no section: no setting probed
    assert Grid.of(cfg).analysis.settings == ()
    assert grid.benchmarks["tm-hard"].heading == "tm-hard"  # no label: the name heads its column
    large, small = grid.models["toy-large"], grid.models["toy-small"]
    assert large.toy == cfg["models"]["toy-large"]["toy"] and large.hub is None and large.base is None
    prepared = [m for m in grid.models.values() if m.prepare]
    assert prepared and all(m.base == cfg["models"][m.name]["prepare"]["base"] for m in prepared)
    assert small.params is None  # unwritten, no default
    ev = grid.evaluation
    assert ev.sampling == {k: cfg["evaluation"][k] for k in ("temperature", "top_p", "max_new_tokens")}
    assert ev.device == schema.default("evaluation.device") and ev.engine_options is None  # unwritten
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.alpha = 0.2


def test_a_cells_method_settings_are_records_that_lose_no_key_of_its_spec():
    """Every method section of every cell of the toy and the paper grid, as the spec resolves it
    (variants' and settings' overrides merged, SCOUT's teacher LR and prefix-0 flag added), reads
    back whole from its record; a section of a method without a record stays a mapping."""
    import yaml

    from scout import entries
    from scout.grid import Grid

    seen = set()
    for name in ("config.yaml", "paper.yaml"):
        grid = Grid.of(yaml.safe_load((REPO / "config" / name).read_text()))
        for cell in grid.cells:
            spec = grid.spec(cell)
            for section, record in grid.method_settings(cell).items():
                written = spec["method_cfg"][section]
                if section not in entries.METHOD_SECTIONS:  # a method added without a record of its own
                    assert record == written
                    continue
                assert isinstance(record, entries.METHOD_SECTIONS[section])
                assert {k: getattr(record, k) for k in written} == {
                    k: tuple(v) if isinstance(v, list) else v for k, v in written.items()
                }, (cell.key, section)
                seen.add(section)
    assert seen == set(entries.METHOD_SECTIONS)
    control = next(c for c in grid.cells if c.method == "opd_teacher_grpo")
    scout = next(c for c in grid.cells if c.variant == "scout")
    assert grid.method_settings(control)["scout"].prefix_zero and not grid.method_settings(scout)["scout"].prefix_zero
    assert grid.method_settings(scout)["scout"].teacher_lr == grid.spec(scout)["method_cfg"]["scout"]["teacher_lr"]
    assert entries.method_settings({"mine": {"x": 1}}) == {"mine": {"x": 1}}  # a method added without a record
