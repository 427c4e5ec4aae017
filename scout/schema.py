"""The config's JSON schema (``workflow/schemas/config.schema.yaml``, the one the workflow validates
with) and its errors in words: each names the key, what was expected, and why a number arrived
as text where it did."""

from __future__ import annotations

import functools
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
    """The schema, read once a process (validation and each variant's overrides both read it)."""
    return yaml.safe_load(SCHEMA.read_text())


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
            wanted = " or ".join(expected(branch) for branch in err.validator_value)
            out.append(f"{where(err.absolute_path)}: {err.instance!r} is not {wanted}{number_hint(err.instance)}")
        else:
            out.append(f"{where(err.absolute_path)}: {err.message}{number_hint(err.instance)}")
    return out


def unknown_key(err) -> str:
    extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
    allowed = ", ".join(sorted(err.schema.get("properties", {}))) or "none"
    return f"{where([*err.absolute_path, *extra[:1]])}: unknown key; expected one of: {allowed}"


def expected(schema: dict) -> str:
    """A schema branch in words: "an integer (at least 0)", "a string matching ^[0-9]+$"."""
    article = {"integer": "an integer", "object": "a mapping", "array": "a list", "string": "a string",
               "number": "a number", "boolean": "true or false"}  # fmt: skip
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kinds = schema.get("type", "value")
    text = " or ".join(article.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
    limits = [f"at least {schema['minimum']}" if "minimum" in schema else "",
              f"above {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"at most {schema['maximum']}" if "maximum" in schema else ""]  # fmt: skip
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
