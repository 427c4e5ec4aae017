"""Plain values across the sandbox boundary: a tagged JSON encoding of built-in types only.

A program's results leave the sandbox as data, never as objects: each value is written with its
exact type (``int`` but not a subclass of it, ``list`` but not a user list), so no user class, no
overridden ``__eq__`` and no proxy survives the crossing. Trusted code decodes the data outside
and compares it. ``encode`` runs *inside* the sandbox (its source is pasted into the program,
which cannot import this package); ``decode`` runs outside and trusts nothing it reads.
"""

from __future__ import annotations

import functools
import inspect
import json
from json.encoder import encode_basestring_ascii as _quote

MAX_DEPTH = 64


def encode(value, depth=0):
    """[tag, payload] for None, bool, int, float, complex, str, bytes and list, tuple, set,
    frozenset and dict of those; None where anything else (or deeper nesting) is met."""
    if depth > 64:
        return None
    t = type(value)
    if value is None:
        return ["none", None]
    if t is bool:
        return ["bool", value is True]
    if t is int:
        return ["int", int.__repr__(value)]
    if t is float:
        return ["float", float.__repr__(value)]
    if t is complex:
        return ["complex", [float.__repr__(value.real), float.__repr__(value.imag)]]
    if t is str:
        return ["str", str.__str__(value)]
    if t is bytes:
        return ["bytes", bytes.hex(value)]
    if t in (list, tuple, set, frozenset):
        items = []
        for item in list.__iter__(value) if t is list else tuple.__iter__(value) if t is tuple else iter(value):
            enc = encode(item, depth + 1)
            if enc is None:
                return None
            items.append(enc)
        return [t.__name__, items]
    if t is dict:
        pairs = []
        for k in dict.keys(value):
            ek, ev = encode(k, depth + 1), encode(dict.__getitem__(value, k), depth + 1)
            if ek is None or ev is None:
                return None
            pairs.append([ek, ev])
        return ["dict", pairs]
    return None


class Malformed(ValueError):
    """The data does not decode to plain values (the program wrote something else)."""


_SCALARS = {
    "none": lambda p: None,
    "bool": lambda p: bool(p) if isinstance(p, bool) else _bad("bool", p),
    "int": lambda p: int(p) if isinstance(p, str) and p.lstrip("-").isdigit() else _bad("int", p),
    "float": lambda p: float(p) if isinstance(p, str) else _bad("float", p),
    "str": lambda p: p if isinstance(p, str) else _bad("str", p),
    "bytes": lambda p: bytes.fromhex(p) if isinstance(p, str) else _bad("bytes", p),
}


def _bad(tag: str, payload):
    raise Malformed(f"{tag} payload of type {type(payload).__name__}")


def decode(data, depth: int = 0):
    """Python built-ins from ``encode``'s output; Malformed on anything else."""
    if depth > MAX_DEPTH:
        raise Malformed("nested too deeply")
    if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], str)):
        raise Malformed(f"not a [tag, payload] pair: {str(data)[:80]}")
    tag, payload = data
    try:
        if tag in _SCALARS:
            return _SCALARS[tag](payload)
        if tag == "complex":
            return complex(float(payload[0]), float(payload[1]))
        if tag in ("list", "tuple", "set", "frozenset"):
            if not isinstance(payload, list):
                _bad(tag, payload)
            items = [decode(x, depth + 1) for x in payload]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict":
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in payload}
    except (TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, Malformed):
            raise
        raise Malformed(f"{tag}: {exc}") from exc
    raise Malformed(f"unknown tag {tag!r}")


def dumps(data) -> str:
    """JSON text of ``encode``'s output (strings, None, bools and lists only), written without the
    json module: importing json (it imports re) costs a sandboxed program about 10 ms."""
    if data is None:
        return "null"
    if data is True:
        return "true"
    if data is False:
        return "false"
    if type(data) is str:
        return _quote(data)
    return "[" + ",".join([dumps(item) for item in data]) + "]"


@functools.cache
def encoder_source() -> str:
    """``encode`` and ``dumps`` as source, for the program that runs in the sandbox (``_quote`` from
    the C accelerator the json module itself uses)."""
    return "from _json import encode_basestring_ascii as _quote\n\n\n" + inspect.getsource(encode) + (
        "\n\n" + inspect.getsource(dumps)
    )


def results_line(mark: str, stdout: str) -> list | None:
    """The last line of ``stdout`` starting with ``mark``, parsed as JSON; None if there is none."""
    for line in reversed(stdout.split("\n")):
        if line.startswith(mark):
            try:
                return json.loads(line[len(mark) :])
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
                return None
    return None
