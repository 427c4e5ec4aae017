"""Which settings pin the toy world's digits, and what pinning costs (figures, not timed tests).

Runs the same three jobs under each combination of the settings that select the math libraries'
code paths, and prints the fingerprint of what each job writes and its time:

- ``toy-pretrain``: the student architecture of config/config.yaml, 300 steps (``--steps``);
- ``train``: a SCOUT cell of toy-l-s-math for 4 steps (student rollouts, OPD update, two teacher
  phases), student and teacher the model just pretrained;
- ``evaluate``: that model on tm-hard, 4 samples of every question.

The combinations: the machine's own paths (``SCOUT_NATIVE_NUMERICS=1``); ATen's AVX2 kernels with
MKL's compatible branch (the pin before issue 45: the same digits on every AMD CPU, other digits on
Intel's); ATen's AVX2 kernels with MKL's AVX2 branch without the vendor shim (honoured on Intel
CPUs only; an AMD CPU takes MKL's automatic dispatch); and the pin every ``scout`` command uses
(``scout.reproducibility``: the same with the shim, preloaded here, so that MKL honours the branch
on AMD CPUs too). Equal fingerprints mean the same digits; run it on two machines to compare them.

``--emulate-intel`` runs every job under ``valgrind --tool=none``, whose virtual CPU reports itself
as an Intel CPU with AVX2 and without AVX-512, whatever the host: on an AMD host, the pinned
fingerprints must equal the native run's. (Valgrind's CPU matched a real Intel Xeon on MKL's AVX2
branch but not on its compatible branch: a cross-check, not a stand-in for Intel hardware.) About
50 times slower: give it fewer ``--steps``.

    python -m benchmarks.numerics [--workdir DIR] [--steps N] [--emulate-intel] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from scout.reproducibility import NATIVE, PINNED, build_shim, fingerprint

REPO = Path(__file__).resolve().parent.parent
SCOUT = str(Path(sys.executable).parent / "scout")
PRELOAD = "LD_PRELOAD"  # the shim, as the pinned jobs load it (before torch)
COMBINATIONS = {
    "native (nothing pinned)": {},
    "ATen avx2 + MKL COMPATIBLE (the pin before)": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    "ATen avx2 + MKL AVX2, no shim": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "pinned (what scout uses)": {**PINNED, PRELOAD: "shim"},
}
EMULATED_INTEL = ["valgrind", "--tool=none", "-q"]


def _job(args: list[str], env: dict, log: Path, prefix: list[str]) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        subprocess.run([*prefix, SCOUT, *args], check=True, stdout=f, stderr=subprocess.STDOUT, env=env)
    return time.perf_counter() - t0


def _world(work: Path, cfg: dict) -> None:
    spec = {"toy": cfg["toy"], "benchmarks": cfg["benchmarks"]}
    subprocess.run([SCOUT, "toy-data", "--spec", json.dumps(spec), "--out", str(work / "data")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    subprocess.run([SCOUT, "toy-tokenizer", "--out", str(work / "tokenizer")], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--steps", type=int, default=300, help="pretraining steps")
    p.add_argument("--emulate-intel", action="store_true", help="every job under valgrind's (Intel) virtual CPU")
    p.add_argument("--only", action="append", default=None, help="combinations whose name contains this (repeatable)")
    args = p.parse_args()
    prefix = EMULATED_INTEL if args.emulate_intel else []
    from scout import grid

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="scout-numerics-"))).resolve()
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(work / "results")
    _world(work, cfg)
    arch = {**cfg["models"]["toy-small"]["toy"], "steps": args.steps}
    base = {k: v for k, v in os.environ.items() if k not in PINNED and k != PRELOAD}
    shim = str(build_shim())
    print(f"{'combination':<44} {'pretrain':>22} {'train (SCOUT)':>22} {'evaluate':>22}")
    for name, settings in COMBINATIONS.items():
        if args.only and not any(o in name for o in args.only):
            continue
        env = {**base, NATIVE: "1", **{k: shim if k == PRELOAD else v for k, v in settings.items()}}
        out = work / f"combination-{list(COMBINATIONS).index(name)}"
        out.mkdir(exist_ok=True)
        model = out / "model"
        pre = {"arch": arch, "tokenizer": str(work / "tokenizer"), "seed": 0,
               "data": [str(work / "data" / f"{s}.jsonl") for s in cfg["toy"]["pretrain_mix"]]}  # fmt: skip
        t_pre = _job(
            ["toy-pretrain", "--spec", json.dumps(pre), "--out", str(model)], env, out / "pretrain.log", prefix
        )
        c = copy.deepcopy(cfg)
        c["training"]["steps"] = 4
        c["settings"]["toy-l-s-math"].update(student_lr=1.5e-4, teacher_lr=1.5e-4)  # not the tuning stage's
        spec = (g := grid.Grid.of(c)).spec(g.find("toy-l-s-math", "scout", 1))
        spec.update(student=str(model), teacher=str(model), train_data=str(work / "data" / "math-train.jsonl"),
                    save_every=4, reward_every=4)  # fmt: skip
        t_train = _job(["train", "--spec", json.dumps(spec), "--out", str(out / "run")], env, out / "train.log", prefix)
        bench = work / "data" / "tm-hard.jsonl"
        ev = {"model": str(model), "domain": "math", "seed": 1, "threads": 1,
              "sampling": {k: cfg["evaluation"][k] for k in ("temperature", "top_p", "max_new_tokens")},
              "benchmarks": {"tm-hard": {"rows": len(bench.read_text().splitlines()), "repeats": 4, "path": str(bench)}}}  # fmt: skip
        t_eval = _job(["evaluate", "--spec", json.dumps(ev), "--out", str(out / "eval")], env, out / "eval.log", prefix)
        figures = (
            f"{fingerprint(model / 'model.safetensors')} {t_pre:5.1f} s",
            f"{fingerprint(out / 'run' / 'model' / 'final' / 'model.safetensors')} {t_train:5.1f} s",
            f"{fingerprint(out / 'eval' / 'tm-hard.generations.jsonl')} {t_eval:5.1f} s",
        )
        print(f"{name:<44} " + " ".join(f"{x:>22}" for x in figures), flush=True)
    print(f"(jobs in {work}; times include each job's start-up)")


if __name__ == "__main__":
    main()
