"""Which settings pin the toy world's digits, and what pinning costs (figures, not timed tests).

Runs the same three jobs under each combination of the settings that select the math libraries'
code paths, and prints the fingerprint of what each job writes and its time:

- ``toy-pretrain``: the student architecture of config/config.yaml, 300 steps;
- ``train``: a SCOUT cell of toy-l-s-math for 4 steps (student rollouts, OPD update, two teacher
  phases), student and teacher the model just pretrained;
- ``evaluate``: that model on tm-hard, 4 samples of every question.

The combinations: the machine's own paths (``SCOUT_NATIVE_NUMERICS=1``), each setting alone, the
pinned pair that every ``scout`` command uses (``scout.reproducibility.PINNED``), the pair with
MKL's branch in its strict mode, and the pair with oneDNN's ISA capped as well. Equal fingerprints
mean the same digits; run it on two machines to compare them.

    python -m benchmarks.numerics [--workdir DIR]
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

from scout.reproducibility import NATIVE, PINNED, fingerprint

REPO = Path(__file__).resolve().parent.parent
SCOUT = str(Path(sys.executable).parent / "scout")
COMBINATIONS = {
    "native (nothing pinned)": {},
    "MKL_CBWR=AVX2 alone": {"MKL_CBWR": "AVX2"},
    "ATEN_CPU_CAPABILITY=avx2 alone": {"ATEN_CPU_CAPABILITY": "avx2"},
    "pinned (both: what scout uses)": dict(PINNED),
    "both, MKL in strict mode": {**PINNED, "MKL_CBWR": "AVX2,STRICT"},
    "both + ONEDNN_MAX_CPU_ISA=AVX2": {**PINNED, "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def _job(args: list[str], env: dict, log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        subprocess.run([SCOUT, *args], check=True, stdout=f, stderr=subprocess.STDOUT, env=env)
    return time.perf_counter() - t0


def _world(work: Path, cfg: dict) -> None:
    spec = {"toy": cfg["toy"], "benchmarks": cfg["benchmarks"]}
    subprocess.run([SCOUT, "toy-data", "--spec", json.dumps(spec), "--out", str(work / "data")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    subprocess.run([SCOUT, "toy-tokenizer", "--out", str(work / "tokenizer")], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args()
    from scout import grid

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="scout-numerics-"))).resolve()
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(work / "results")
    _world(work, cfg)
    arch = {**cfg["models"]["toy-small"]["toy"], "steps": 300}
    base = {k: v for k, v in os.environ.items() if k not in PINNED and k != "ONEDNN_MAX_CPU_ISA"}
    print(f"{'combination':<34} {'pretrain':>22} {'train (SCOUT)':>22} {'evaluate':>22}")
    for name, settings in COMBINATIONS.items():
        env = {**base, NATIVE: "1", **settings}
        out = work / f"combination-{list(COMBINATIONS).index(name)}"
        out.mkdir(exist_ok=True)
        model = out / "model"
        pre = {"arch": arch, "tokenizer": str(work / "tokenizer"), "seed": 0,
               "data": [str(work / "data" / f"{s}.jsonl") for s in cfg["toy"]["pretrain_mix"]]}  # fmt: skip
        t_pre = _job(["toy-pretrain", "--spec", json.dumps(pre), "--out", str(model)], env, out / "pretrain.log")
        c = copy.deepcopy(cfg)
        c["training"]["steps"] = 4
        spec = grid.cell_spec(c, grid.find_cell(c, "toy-l-s-math", "scout", 1))
        spec.update(student=str(model), teacher=str(model), train_data=str(work / "data" / "math-train.jsonl"),
                    save_every=4, reward_every=4)  # fmt: skip
        t_train = _job(["train", "--spec", json.dumps(spec), "--out", str(out / "run")], env, out / "train.log")
        bench = work / "data" / "tm-hard.jsonl"
        ev = {"model": str(model), "domain": "math", "seed": 1, "threads": 1,
              "sampling": {k: cfg["evaluation"][k] for k in ("temperature", "top_p", "max_new_tokens")},
              "benchmarks": {"tm-hard": {"rows": len(bench.read_text().splitlines()), "repeats": 4, "path": str(bench)}}}  # fmt: skip
        t_eval = _job(["evaluate", "--spec", json.dumps(ev), "--out", str(out / "eval")], env, out / "eval.log")
        figures = (
            f"{fingerprint(model / 'model.safetensors')} {t_pre:5.1f} s",
            f"{fingerprint(out / 'run' / 'model' / 'final' / 'model.safetensors')} {t_train:5.1f} s",
            f"{fingerprint(out / 'eval' / 'tm-hard.generations.jsonl')} {t_eval:5.1f} s",
        )
        print(f"{name:<34} " + " ".join(f"{x:>22}" for x in figures), flush=True)
    print(f"(jobs in {work}; times include each job's start-up)")


if __name__ == "__main__":
    main()
