"""The same digits on every x86-64 machine with AVX2: pinned numerical code paths and fingerprints.

Two machines with the same packages part ways where their math libraries pick code paths by
instruction set: ATen's vectorised kernels (softmax, norms, the optimizer's updates) and MKL's
matrix products. ``python -m benchmarks.numerics`` measures it on the toy world: each of the two
settings below changes the digits of a pretraining run, and a third (oneDNN's ISA cap) changes
nothing, so it is left out. MKL's reproducible AVX2 branch is taken in its strict mode: only there
does a row's product not depend on the other rows of the batch or on the columns computed beside
it, so that prefilling a repeated prompt once, dropping finished rows, and inference on packed
weights keep their digits (``tests/test_qwen3.py``). Every ``scout`` command pins both before
torch computes anything, so the workflow's jobs compute on the AVX2 paths whatever the machine has,
and a user sets nothing; ``SCOUT_NATIVE_NUMERICS=1`` keeps the machine's own (faster where it has
AVX-512; other digits). Jobs run single-threaded (``training.threads``), which MKL's
reproducibility also requires.

Fingerprints (the first 12 hex digits of a file's SHA-256) of the toy data, the tokenizer, the
pretrained models and trained runs are recorded in ``config/fingerprints.yaml``; ``scout
fingerprints`` compares a results folder with them, so that a change of digits is made on purpose.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"}
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
