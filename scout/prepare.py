"""Data preparation: fetch a dataset, convert it to the common schema, check it, write JSONL.

Sources (config ``data.source``):

- ``hub``: the Hugging Face Hub through ``datasets`` / ``huggingface_hub``, cached under
  ``data.cache`` (or HF_HOME); with ``data.offline: true`` only that cache is read.
- ``mirror``: a local folder holding one snapshot per repository at ``{mirror}/{owner}/{name}``,
  as ``huggingface-cli download --repo-type dataset REPO --local-dir {mirror}/REPO`` writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from scout.catalogue import DataError, Unconvertible, check_row, entry
from scout.io import DamagedInput, read_jsonl, write_jsonl
from scout.prompts import normalized, view_key
from scout.schema import default


def _read_files(spec: dict, files: Iterable[str]) -> list[dict]:
    rows: list[dict] = []
    for name in files:
        if spec.get("source", default("data.source")) == "mirror":
            path = Path(spec["mirror"]) / spec["hub"] / name
            if not path.exists():
                raise DataError(f"{spec['name']}: {path} is missing from the mirror")
        else:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(spec["hub"], name, repo_type="dataset", cache_dir=spec.get("cache"))
        rows += read_jsonl(path)
    return rows


def _load_split(spec: dict) -> list[dict]:
    if spec.get("source", default("data.source")) != "mirror":
        return _load(spec, spec["hub"], spec.get("cache"))
    where = Path(spec["mirror"]) / spec["hub"]
    if not where.is_dir():
        raise DataError(f"{spec['name']}: no snapshot of {spec['hub']} in the mirror (looked for {where})")
    # datasets keys its cache of local folders on their layout, not their content: a fresh cache
    # per run, so an updated mirror is never shadowed by an old conversion
    with tempfile.TemporaryDirectory(prefix="scout-datasets-") as cache:
        return _load(spec, str(where), cache)


def _load(spec: dict, where: str, cache: str | None) -> list[dict]:
    import datasets

    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(where, spec.get("config"), split=spec["split"], cache_dir=cache)
    except (ValueError, FileNotFoundError) as exc:
        raise DataError(
            f"{spec['name']}: cannot load {where} (config {spec.get('config')}, split {spec['split']}): {exc}"
        ) from exc
    return ds.to_list()


def fetch(spec: dict) -> list[dict]:
    """Source rows of one dataset, as dicts of its own columns."""
    if spec.get("offline"):
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    e = entry(spec["name"])
    return _read_files(spec, e.files) if e.files else _load_split(spec)


def refused_path(out: str | Path) -> Path:
    """The rows of a prepared file that could not be converted (beside it)."""
    return Path(out).with_suffix(".refused.json")


def convert(name: str, source: list[dict], refused: list | None = None) -> tuple[list[dict], int, int]:
    """Common-schema rows, plus how many rows the filter and the deduplication dropped. Rows whose
    tests cannot be converted to calls are appended to ``refused`` (id and reason)."""
    e = entry(name)
    if source:
        missing = [c for c in e.columns if all(c not in r for r in source[:100])]
        if missing:
            have = ", ".join(sorted(source[0]))
            raise DataError(f"{name}: source is missing column(s) {', '.join(missing)} (it has: {have})")
    rows, filtered, seen = [], 0, set()
    for i, raw in enumerate(source):
        try:
            row = e.convert(raw, i)
        except Unconvertible as exc:
            if refused is None:
                raise DataError(f"{name}: source row {i} cannot be graded by values: {exc}") from exc
            refused.append({"row": i, "id": str(raw.get("task_id", raw.get("id", i))), "reason": str(exc)})
            continue
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise DataError(f"{name}: source row {i} does not convert ({type(exc).__name__}: {exc})") from exc
        if row is None:
            filtered += 1
            continue
        problem = check_row(row)
        if problem:
            raise DataError(f"{name}: converted row {i} ({row.get('id')}): {problem}")
        if e.dedup:
            key = e.dedup(row)
            if key in seen:
                continue
            seen.add(key)
        rows.append(row)
    dup = next((i for i, n in Counter(r["id"] for r in rows).items() if n > 1), None)
    if dup is not None:
        raise DataError(f"{name}: duplicate row id {dup!r}")
    return rows, filtered, len(source) - filtered - len(rows) - len(refused or [])


def prompt_tokens(tokenizer, prompt, chat: dict) -> int:
    """A prompt's length as verl's overlong filter measures it: the chat template applied with
    the generation prompt and the config's template options, tokenized."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **chat)
    if isinstance(out, dict) or hasattr(out, "input_ids"):  # a BatchEncoding, as transformers 5 returns
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return len(out)


def kept_by_view(rows: list[dict], views: list[dict], log=print) -> dict[str, int]:
    """Rows verl keeps for each view (tokenizer, chat options, prompt limit) after its filter."""
    from transformers import AutoTokenizer

    kept = {}
    for view in views:
        tok = AutoTokenizer.from_pretrained(view["tokenizer"])
        n = sum(prompt_tokens(tok, r["prompt"], view["chat"]) <= view["max_prompt_length"] for r in rows)
        kept[view_key(view)] = n
        log(f"{view['tokenizer']}: {n} of {len(rows)} prompts within {view['max_prompt_length']} tokens")
    return kept


def check_refused(spec: dict, rows: list, refused: list[dict], filtered: int, dups: int) -> None:
    """A preparation that keeps no rows, or refuses more than ``data.max_refused`` of them, is an
    error, not an empty or thinned benchmark (a source in another format refuses every row)."""
    share = spec.get("max_refused", default("data.max_refused"))
    total = len(rows) + len(refused)
    if rows and len(refused) <= share * total:
        return
    first = "; ".join(f"{r['id']}: {r['reason']}" for r in refused[:3]) or "none"
    counts = f"{len(rows)} kept, {len(refused)} refused, {filtered} filtered out, {dups} duplicates"
    why = "keeps no rows" if not rows else f"refuses {len(refused)} of {total} rows, more than data.max_refused ({share:g})"
    raise DataError(
        f"{spec['name']}: preparation from {spec['hub']} {why} ({counts}); first reasons refused: {first}. "
        "Is the source in another format than the catalogue's converter reads?"
    )


def prepare(spec: dict, out: str | Path, log=print) -> int:
    """Fetch, convert, check the row count, write atomically. Returns the number of rows."""
    t0 = time.perf_counter()
    log(f"{spec['name']}: fetching {spec['hub']} ({spec.get('source', default('data.source'))})")
    source = fetch(spec)
    refused: list[dict] = []
    rows, filtered, dups = convert(spec["name"], source, refused)
    log(f"{spec['name']}: {len(source)} source rows, {filtered} filtered out, {dups} duplicates dropped -> {len(rows)}")
    for r in refused:
        log(f"{spec['name']}: refused row {r['row']} ({r['id']}): its tests cannot be graded by values: {r['reason']}")
    check_refused(spec, rows, refused, filtered, dups)
    if len(rows) + len(refused) != spec["rows"]:
        raise DataError(
            f"{spec['name']}: {len(rows)} rows after filtering and deduplication, expected {spec['rows']} "
            f"({len(source)} source rows from {spec['hub']}, split {spec.get('split')}); a changed upstream "
            "dataset or a wrong source/config"
        )
    if spec.get("holdout"):  # a validation slice: written as NAME.holdout, never trained on
        tests = [r for path in spec.get("tests", []) for r in read_jsonl(path)]
        held, skipped = holdout_rows(rows, spec["holdout"], spec["name"], tests)
        chosen = {r["id"] for r in held}
        log(f"{spec['name']}: {len(held)} rows held out for validation ({skipped} candidates skipped: their prompt "
            f"is a test prompt); {len(rows) - len(held)} left to train on")  # fmt: skip
        rows = held if spec.get("part") == "holdout" else [r for r in rows if r["id"] not in chosen]
    write_jsonl(out, rows)
    if spec.get("views"):  # a training set: what verl will load of it, per model that trains on it
        meta = {"rows": len(rows), "kept": kept_by_view(rows, spec["views"], log)}
        Path(str(out).removesuffix(".jsonl") + ".meta.json").write_text(json.dumps(meta, indent=1))
    side = refused_path(out)
    if refused:
        side.write_text(json.dumps(refused, indent=1))
        log(f"{spec['name']}: {len(refused)} row(s) refused, listed in {side}")
    elif side.exists():
        side.unlink()
    log(f"{spec['name']}: wrote {out} in {time.perf_counter() - t0:.1f}s")
    return len(rows)


def holdout_rows(rows: list[dict], n: int, name: str, tests: list[dict]) -> tuple[list[dict], int]:
    """The validation slice of a training set: ``n`` rows in an order fixed by their ids (SHA-256 of
    ``name:id``), skipping rows whose prompt is also a test prompt; and how many were skipped. The
    training set is the rest, so both files come out the same from every preparation."""
    test_prompts = {normalized(r["prompt"]) for r in tests}
    order = sorted(rows, key=lambda r: hashlib.sha256(f"{name}:{r['id']}".encode()).hexdigest())
    held, skipped = [], 0
    for r in order:
        if len(held) == n:
            break
        if normalized(r["prompt"]) in test_prompts:
            skipped += 1
            continue
        held.append(r)
    if len(held) < n:
        raise DataError(f"{name}: only {len(held)} rows can be held out for validation, {n} asked for")
    return held, skipped


def load_rows(path: str | Path, expected: int | None = None, name: str | None = None, log=print) -> list[dict]:
    """Rows of a prepared file, checked against the common schema (and the expected count: rows
    refused at preparation may be absent, and the log says how many)."""
    if not Path(path).exists():
        raise DamagedInput(path, "missing")
    try:
        rows = read_jsonl(path)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedInput(path, f"unreadable ({exc})") from exc
    for n, row in enumerate(rows, 1):
        problem = check_row(row)
        if problem:
            raise DataError(f"{path}: row {n}: {problem}")
    if not rows:
        raise DataError(f"{path}: {name or 'dataset'} holds no rows")
    side = refused_path(path)
    if expected is not None and side.exists():  # refused at preparation: expected to be absent
        n = len(json.loads(side.read_text()))
        log(f"{name or path}: {len(rows)} of {expected} rows; {n} refused at preparation, listed in {side}")
        expected -= n
    if expected is not None and len(rows) != expected:
        raise DataError(f"{path}: {name or 'dataset'} has {len(rows)} rows, expected {expected}")
    return rows
