"""The same digits on every x86-64 machine with AVX2: pinned numerical code paths and fingerprints.

Two machines with the same packages part ways where their math libraries pick code paths by CPU:
ATen's vectorised kernels (softmax, norms, the optimizer's updates) pick theirs by instruction set,
and MKL's matrix products by instruction set and by vendor. Every ``scout`` command pins both
before torch computes anything, so the workflow's jobs compute the same digits whatever the machine
has, and a user sets nothing:

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, on machines with AVX-512 too. Their arithmetic
  is exact IEEE code, so every CPU with AVX2 computes the same digits with them.
- ``MKL_CBWR=COMPATIBLE``: MKL's reproducible branch for "Intel and Intel compatible" CPUs (SSE2
  code, without the approximate ``rcpps``/``rsqrtps`` whose results differ between vendors). MKL
  honours its other branches (``AVX2``, ...) on Intel CPUs only and silently takes its automatic
  dispatch elsewhere: with ``MKL_CBWR=AVX2`` an AMD machine computed other digits than an Intel
  one. ``python -m benchmarks.numerics --emulate-intel`` shows it on one machine: valgrind's virtual
  CPU is an Intel one. The compatible branch costs time: about twice as long a matrix product.

``python -m benchmarks.numerics`` measures each setting's effect; capping oneDNN's ISA changes
nothing, so it is not set. ``SCOUT_NATIVE_NUMERICS=1`` keeps the machine's own paths (faster;
other digits). Jobs run single-threaded (``training.threads``), which MKL's reproducibility also
requires.

Fingerprints (the first 12 hex digits of a file's SHA-256) of the toy data, the tokenizer, the
pretrained models and trained runs are recorded in ``config/fingerprints.yaml``; ``scout
fingerprints`` compares a results folder with them, so that a change of digits is made on purpose.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
NATIVE = "SCOUT_NATIVE_NUMERICS"
RECORD = Path(__file__).resolve().parent.parent / "config" / "fingerprints.yaml"


def pin_numerics(env: dict | None = None) -> dict[str, str]:
    """Pin the code paths (unless ``SCOUT_NATIVE_NUMERICS=1``); returns the settings in force. It
    must run before torch computes anything: ATen and MKL read these once, at their first use."""
    env = os.environ if env is None else env
    if env.get(NATIVE) == "1":
        return {}
    env.update(PINNED)
    return dict(PINNED)


def numerics() -> dict:
    """What this process computes with, for provenance: the ATen kernels' instruction set, MKL's
    reproducibility branch and the thread count."""
    import torch

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "(unset: MKL picks by CPU)"),
        "threads": torch.get_num_threads(),
        "pinned": os.environ.get(NATIVE) != "1" and all(os.environ.get(k) == v for k, v in PINNED.items()),
    }


def fingerprint(path: str | Path) -> str:
    """The first 12 hex digits of a file's SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


# Families of training code paths: OPD's loss (ESR, Prune-OPD and OPTR reshape it), GRPO's, Relay's
# rollout, and SCOUT's teacher phase; one cell of each stands for its family in the record
FAMILIES = ("opd", "grpo", "relay_opd", "scout")


def toy_files(config: dict) -> list[str]:
    """What the record fingerprints of a toy grid (paths under its results folder): the data, the
    tokenizer, the pretrained and prepared models, the first setting's first seed of each method
    family (SCOUT's teacher too), and the untrained student's samples on the first benchmark."""
    from scout import grid

    names = (*config["toy"]["splits"], *config["benchmarks"], *config["toy"].get("validation", {}))
    out = [f"toy/data/{name}.jsonl" for name in names]
    out.append("toy/tokenizer/tokenizer.json")
    models = config["models"]
    out += [f"toy/models/{m}/model.safetensors" for m in models if "toy" in models[m]]
    out += [f"teachers/{m}/model/final/model.safetensors" for m in models if "prepare" in models[m]]
    main = config["experiments"].get("main", {})
    settings, seeds = main.get("settings", []), main.get("seeds", [])
    if settings and seeds:
        setting, seed = settings[0], seeds[0]
        root = config.get("results", "results")
        for method in FAMILIES:
            if method in main["methods"]:  # in the folder of the run the cell is (a tuning run's, say)
                run = f"{grid.run_dir(config, setting, method, seed).removeprefix(root + '/')}/model"
                out.append(f"{run}/final/model.safetensors")
                if method == "scout":
                    out.append(f"{run}/final-teacher/model.safetensors")
        bench = grid.benchmarks_for(config, config["settings"][setting]["domain"])[0]
        out.append(f"eval/{setting}/base-student/s0/final/{bench}.generations.jsonl")
    return out


def measure(config: dict) -> dict[str, str | None]:
    """The fingerprint of each of :func:`toy_files` in the config's results folder (None: missing)."""
    root = Path(config.get("results", "results"))
    return {f: fingerprint(root / f) if (root / f).is_file() else None for f in toy_files(config)}


def recorded(section: str, record: Path = RECORD) -> dict[str, str]:
    import yaml

    data = yaml.safe_load(record.read_text()) if record.exists() else {}
    return dict((data or {}).get(section, {}).get("files", {}))


def tally(rows: list[tuple[str, str, str, str]]) -> dict[str, int]:
    """How many of :func:`compare`'s rows have each verdict."""
    return {v: sum(r[3] == v for r in rows) for v in ("same", "differs", "missing", "not recorded")}


def compare(want: dict[str, str], got: dict[str, str | None]) -> list[tuple[str, str, str, str]]:
    """(file, recorded, measured, verdict) for every file of either side; verdict is "same",
    "differs", "missing" (not made yet) or "not recorded"."""
    rows = []
    for f in dict.fromkeys([*want, *got]):
        w, g = want.get(f), got.get(f)
        verdict = ("not recorded" if w is None else "missing" if g is None else "same" if w == g else "differs")
        rows.append((f, w or "-", g or "-", verdict))
    return rows


def write_record(section: str, got: dict[str, str | None], note: str, record: Path = RECORD) -> None:
    """Record the measured fingerprints as ``section`` (the others kept)."""
    import yaml

    data = (yaml.safe_load(record.read_text()) if record.exists() else None) or {}
    data[section] = {"note": note, "files": {f: h for f, h in got.items() if h is not None}}
    header = ("# Fingerprints (first 12 hex digits of SHA-256) of toy grids' files, recorded on x86-64 with AVX2\n"
              "# under the locked packages (constraints/*.lock); `scout fingerprints` compares a results folder\n"
              "# with a section and `--record` rewrites it. A change of digits is made on purpose: rerun the grid,\n"
              "# record it, and say why in the commit.\n")  # fmt: skip
    record.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
