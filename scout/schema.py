"""The config's JSON schema (``workflow/schemas/config.schema.yaml``, the one the workflow validates
with) and its errors in words: each names the key, what was expected, and why a number arrived
as text where it did.

The schema is where each setting is declared, once: its type, allowed range, help and default.
Code reads a default from here (:func:`default`, :func:`setting`), never writes its own, and the
key reference in ``docs/config-keys.md`` is generated from it (``python -m scout.schema``).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parent.parent / "workflow" / "schemas" / "config.schema.yaml"

STRINGS_HINT = (
    "snakemake's --config reads every value as a string; give numbers in a --configfile overlay, or "
    "pick cells with --config 'select={settings: [...], methods: [...], seeds: [1]}'"
)


def where(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


@functools.cache
def document() -> dict:
    """The schema, read once a process (validation, each variant's overrides and every default read
    it): libyaml's loader where PyYAML has it (7 ms against 64 ms, in every job)."""
    return yaml.load(SCHEMA.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _keys(path: str | tuple) -> list[str]:
    """A setting's path: dotted, or a tuple where a name holds a dot (``q4b-q1.7b-math``)."""
    return path.split(".") if isinstance(path, str) else list(path)


def node(path: str | tuple) -> dict:
    """The schema of a setting by its path; a name of the user's (a setting, a model) takes its
    map's entry schema, so ``settings.toy-l-s-math.epochs`` and ``settings.*.epochs`` agree."""
    doc, here = document(), document()
    for key in _keys(path):
        here = _resolve(doc, here)
        props = here.get("properties", {})
        if key in props:
            here = props[key]
        elif isinstance(here.get("additionalProperties"), dict):
            here = here["additionalProperties"]
        else:
            branch = [b for b in here.get("oneOf", []) + here.get("anyOf", []) if key in _resolve(doc, b).get("properties", {})]
            if not branch:
                raise KeyError(f"the schema has no setting {'.'.join(_keys(path))}")
            here = _resolve(doc, branch[0])["properties"][key]
    return _resolve(doc, here)


def _resolve(doc: dict, here: dict) -> dict:
    """A ``$ref`` followed to its definition, the referring node's own keys (its help, its default)
    over the definition's."""
    if "$ref" not in here:
        return here
    target = doc
    for part in here["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return {**_resolve(doc, target), **{k: v for k, v in here.items() if k != "$ref"}}


def default(path: str | tuple):
    """The default the schema declares for a setting (a copy: callers may change it)."""
    declared = node(path)
    if "default" not in declared:
        raise KeyError(f"the schema declares no default for {'.'.join(_keys(path))}")
    return copy.deepcopy(declared["default"])


def setting(config: dict, path: str | tuple):
    """A setting's value in a config, or its declared default where the config leaves it out."""
    here = config
    for key in _keys(path):
        if not isinstance(here, dict) or key not in here:
            return default(path)
        here = here[key]
    return here


def schema_errors(config: dict) -> list[str]:
    import jsonschema  # here, not at the top: every job imports this module, few validate (0.1 s a job)

    validator = jsonschema.Draft202012Validator(document())
    out = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        if err.validator == "additionalProperties":
            out.append(unknown_key(err))
        elif err.validator in ("oneOf", "anyOf") and isinstance(err.instance, dict):
            # the branch meant for a mapping says what is wrong inside it; "is not of type 'string'"
            # from the other branches is about the whole value, and names the wrong thing
            inside = [e for e in err.context if list(e.relative_path) or e.validator != "type"]
            sub = max(inside, key=lambda e: len(list(e.absolute_path)), default=None)
            if sub is None:
                out.append(f"{where(err.absolute_path)}: {err.message}")
            elif sub.validator == "additionalProperties":
                out.append(unknown_key(sub))
            else:
                out.append(f"{where(sub.absolute_path)}: {sub.message}{number_hint(sub.instance)}")
        elif err.validator in ("oneOf", "anyOf"):
            wanted = " or ".join(expected(branch, validator.schema) for branch in err.validator_value)
            out.append(f"{where(err.absolute_path)}: {err.instance!r} is not {wanted}{number_hint(err.instance)}")
        else:
            out.append(f"{where(err.absolute_path)}: {err.message}{number_hint(err.instance)}")
    return out


def unknown_key(err) -> str:
    extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
    allowed = ", ".join(sorted(err.schema.get("properties", {}))) or "none"
    return f"{where([*err.absolute_path, *extra[:1]])}: unknown key; expected one of: {allowed}"


def expected(schema: dict, root: dict | None = None) -> str:
    """A schema branch in words: "an integer (at least 0)", "a string matching ^[0-9]+$", "'tuned'"
    (a ``$ref`` into ``root``'s ``$defs`` read as what it refers to)."""
    article = {"integer": "an integer", "object": "a mapping", "array": "a list", "string": "a string",
               "number": "a number", "boolean": "true or false"}  # fmt: skip
    ref = schema.get("$ref", "")
    if ref.startswith("#/$defs/") and root is not None:
        return expected(root.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {}), root)
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kinds = schema.get("type", "value")
    text = " or ".join(article.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
    limits = [f"at least {schema['minimum']}" if "minimum" in schema else "",
              f"above {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"at most {schema['maximum']}" if "maximum" in schema else "",
              f"below {schema['exclusiveMaximum']}" if "exclusiveMaximum" in schema else ""]  # fmt: skip
    text += f" ({', '.join(x for x in limits if x)})" if any(limits) else ""
    return text + (f" matching {schema['pattern']}" if "pattern" in schema else "")


def number_hint(value) -> str:
    """Why a number arrived as text, for any key the schema refuses it at (a type, oneOf or anyOf)."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    try:
        float(text)
    except ValueError:
        return ""
    if "e" in text.lower() and "." not in text.split("e")[0].lower():
        return (f" (YAML reads a number in e-notation without a decimal point as text: write {float(text):.1e}; "
                f"or it came from snakemake --config: {STRINGS_HINT})")  # fmt: skip
    return f" (a number written as text: drop the quotes; {STRINGS_HINT})"


# -- the key reference (docs/config-keys.md) -------------------------------------------------------

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "config-keys.md"


def reference() -> str:
    """Every key of the schema as Markdown: the top-level keys, then a table per section, each key
    with what it takes, its default and its help. ``python -m scout.schema`` writes it; a test keeps
    it current."""
    doc = document()
    out = ["# Config keys", "",
           "Generated from `workflow/schemas/config.schema.yaml` by `python -m scout.schema`; do not edit by",
           "hand. `<name>` stands for a name of yours (a model, a setting, a benchmark), `[]` for each",
           "entry of a list. A key marked required must be given where its section is; a key with no",
           "default says in its help what happens without it. A key left out and the same key given at",
           "its default make the same job specs, so writing a default out retrains nothing.", ""]  # fmt: skip
    header = ["| key | takes | default | what it is |", "|---|---|---|---|"]
    required = set(doc.get("required", []))
    sections, top = [], []
    for key, sub in doc["properties"].items():
        rows = list(_rows(doc, _resolve(doc, sub), (key,), key in required))
        if len(rows) > 1:
            sections.append((key, rows))
        else:
            top += rows
    out += ["## Top level", "", *header, *map(_row, top), ""]
    for key, rows in sections:
        out += [f"## `{key}`", ""]
        if rows[0][3]:
            out += [rows[0][3], ""]
        out += [*header, *map(_row, rows[1:]), ""]
    return "\n".join(out).rstrip() + "\n"


def _row(row: tuple) -> str:
    path, takes, dflt, help_ = row
    return f"| `{'.'.join(path)}` | {takes} | {dflt} | {help_} |"


def _rows(doc: dict, here: dict, path: tuple, required: bool):
    """(path, takes, default, help) of a key and of every key under it."""
    props = here.get("properties", {})
    entry = here.get("additionalProperties")
    yield path, _takes(doc, here), _default(here, required), _text(here.get("description", ""))
    for key, sub in props.items():
        yield from _rows(doc, _resolve(doc, sub), (*path, key), key in here.get("required", []))
    items = _resolve(doc, here["items"]) if isinstance(here.get("items"), dict) else {}
    for key, sub in items.get("properties", {}).items():  # a list of mappings: each entry's keys
        yield from _rows(doc, _resolve(doc, sub), (*path, "[]", key), key in items.get("required", []))
    if isinstance(entry, dict) and (_resolve(doc, entry).get("properties") or _resolve(doc, entry).get("additionalProperties")):
        yield from list(_rows(doc, _resolve(doc, entry), (*path, "<name>"), True))[1:]


def _takes(doc: dict, here: dict) -> str:
    if "if" in here and "else" in here:  # a string that must be the then-branch's, or else a mapping
        return f"{_takes(doc, here['then'])} or {_takes(doc, here['else'])}"
    if "oneOf" in here or "anyOf" in here:
        return " or ".join(_takes(doc, _resolve(doc, b)) for b in here.get("oneOf", here.get("anyOf")))
    if "const" in here:
        return f"`{here['const']}`"
    if "enum" in here:
        return ("one of " if len(here["enum"]) > 1 else "") + ", ".join(f"`{v}`" for v in here["enum"])
    if here.get("type") == "array" and isinstance(here.get("items"), dict):
        return f"a list, each {_takes(doc, _resolve(doc, here['items']))}"
    if here.get("type") == "object" and isinstance(here.get("additionalProperties"), dict):
        return "a mapping of names"
    return expected(here) if "type" in here else "see its help"


def _default(here: dict, required: bool) -> str:
    if "default" in here:
        return f"`{json.dumps(here['default'])}`"
    return "required" if required else ""


def _text(description: str) -> str:
    return " ".join(str(description).split()).replace("|", "\\|")


if __name__ == "__main__":
    REFERENCE.write_text(reference())
    print(f"wrote {REFERENCE}")
