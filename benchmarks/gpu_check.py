"""The first GPU node's check: the cluster path for two steps of each kind of cell, before a grid is
spent on the cluster.

On one machine with NVIDIA GPUs and the GPU install (``pip install -e ".[gpu,cluster]"``), it builds
a small toy world (or links a finished toy grid's ``results/toy``), then trains each cell through the
workflow's own job (``scout train --spec``: scout's driver, verl's trainer, vLLM's engines), two
steps each:

- ``opd``: OPD, the student's pool and the teacher's engine (2 GPUs);
- ``scout``: SCOUT with a full teacher, its trainer on a pool of its own and the weight sync over
  NCCL (3 GPUs);
- ``scout-lora``: SCOUT with the shared LoRA teacher, trained on its engine's GPU (2 GPUs);
- ``prune_opd-served``: Prune-OPD scoring against a teacher server (vLLM's OpenAI-compatible
  server on the student's GPU; 1 GPU);
- ``grpo``: GRPO, the student alone (1 GPU);

then evaluates GRPO's exported checkpoint with vLLM, as ``scout evaluate`` does in the grid.

    python -m benchmarks.gpu_check [--device cuda|cpu] [--cells opd,scout,...] [--toy-grid DIR]
                                   [--work DIR] [--timeout 900] [--plan]

Printed per cell: the verdict, the mean step time (verl's ``timing_s/step``), each trainer's peak
GPU memory (verl's ``perf/max_memory_allocated_gb``; the vLLM engines hold the share of the GPU
their config gives them, printed beside), the teacher self-test's gap against its limit (the engine
against the float32 reference), the weight sync's checksums at both ends, and the rollout's
log-probs against the actor's after a sync (Pearson's r). The exit status is non-zero if a cell
failed or a self-test went over its limit. Cells run one at a time on one GPU; with more GPUs,
cells whose GPUs fit side by side run together, each on GPUs of its own. A cell needing more GPUs
than the machine has is listed as not checked, with the GPUs it needs.

``--device cpu`` runs the same cells on verl's CPU platform with vLLM's CPU build (``make
install-vllm``), the path CI runs: tests/verl/test_verl_cpu.py builds its world, specs and runs with
this module's functions and reads them with its report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SETTING = "toy-l-s-math"
# config/config.yaml and its targets of their own (the LoRA teacher's variant is toy-lora.yaml's)
OVERLAYS = ("toy-extra.yaml", "toy-tune.yaml", "toy-lora.yaml", "verl-cpu.yaml")
# small enough for verl on 2 cores; head_dim 32, as vLLM's CPU attention needs
ARCH = {"hidden_size": 64, "heads": 2, "kv_heads": 1, "intermediate_size": 128, "lr": 3e-3, "batch": 32}
SIZES = {"toy-small": (1, 800, 0.6), "toy-large": (2, 1000, 0.0)}  # layers, pretraining steps, hasty


@dataclass(frozen=True)
class Check:
    variant: str
    served: bool = False  # the teacher behind a server, the job without a teacher engine
    lora: bool = False  # SCOUT's shared LoRA teacher (scout-lora), a teacher phase every step


CHECKS = {
    "opd": Check("opd"),
    "scout": Check("scout"),
    "scout-lora": Check("scout-lora", lora=True),
    "prune_opd-served": Check("prune_opd", served=True),
    "grpo": Check("grpo"),
}
EVALUATED = "grpo"  # the cell whose exported checkpoint vLLM evaluates


# -- the world ---------------------------------------------------------------------------------------


def world_config(root: Path, device: str) -> dict:
    """The toy config with the verl backend on ``device``, shrunk to two steps of 4 prompts,
    responses of at most 32 tokens, and its outputs under ``root/results``."""
    from scout.config import deep_merge

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for overlay in OVERLAYS:
        cfg = deep_merge(cfg, yaml.safe_load((REPO / "config" / overlay).read_text()))
    cfg["device"] = device
    cfg["results"] = str(root / "results")
    # no tuning stage here: the tuned LRs at the middle of the grids it searches
    cfg["settings"][SETTING].update(student_lr=1.5e-4, teacher_lr=1.5e-4, teacher_lora_lr=1.2e-3)
    for s in cfg["toy"]["splits"].values():
        s.update(rows=64, min_ops=1, max_ops=2)
    for b in cfg["benchmarks"].values():
        b.update(rows=4, repeats=1)
    for name, (layers, steps, hasty) in SIZES.items():
        cfg["models"][name]["toy"] = {**ARCH, "layers": layers, "steps": steps, "hasty": hasty}
    cfg["training"].update(steps=2, batch_size=4, save_every=2, max_response_length=32, max_prompt_length=48)
    cfg["training"]["grpo"].update(n=4, batch_size=4)
    cfg["methods"]["scout"].update(interval=2, k=4)
    cfg["methods"]["prune_opd"]["budget"].update(initial=16, min=8, max=32, margin=2)
    cfg["methods"]["esr"]["max_tokens"] = 16
    return cfg


def build_world(root: Path, device: str, toy_grid: Path | None = None, log=print) -> dict:
    """A toy world small enough for verl on 2 cores: 1-2 operation tasks, a 1-layer student and a
    2-layer teacher, briefly pretrained so that rewards and advantages are not all zero. With
    ``toy_grid``, that finished grid's data, tokenizer and models are used instead."""
    from scout.paths import Paths
    from scout.toy.world import build_data, build_tokenizer_files

    cfg = world_config(root, device)
    toy = Path(cfg["results"]) / "toy"
    if toy_grid is not None:
        theirs = Path(toy_grid) / "results" / "toy"
        if not (theirs / "models" / "toy-large" / "model.safetensors").exists():
            raise SystemExit(f"--toy-grid: no finished toy world under {theirs} (run `make toy` there first)")
        base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        for name in SIZES:  # the grid's own models, and its benchmarks at their rows
            cfg["models"][name]["toy"] = base["models"][name]["toy"]
        toy.parent.mkdir(parents=True, exist_ok=True)
        if not toy.exists():
            toy.symlink_to(theirs.resolve())
        return {"root": root, "config": cfg}
    t0 = time.perf_counter()
    build_data(cfg, toy / "data")
    build_tokenizer_files(toy / "tokenizer")
    # the two models at once, each a workflow toy_pretrain job (one thread each, numerics pinned)
    jobs = []
    for name, (layers, _, _) in SIZES.items():
        spec = {"arch": cfg["models"][name]["toy"], "tokenizer": str(toy / "tokenizer"),
                "data": [str(toy / "data" / "math-train.jsonl")], "seed": layers}  # fmt: skip
        cmd = [sys.executable, "-m", "scout.cli", "toy-pretrain", "--spec", json.dumps(spec), "--out", Paths.of(cfg).model(name)]
        jobs.append((name, subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for name, job in jobs:
        out = job.communicate()[0]
        if job.returncode:
            raise RuntimeError(f"pretraining {name} failed:\n{out[-3000:]}")
    log(f"toy world built in {time.perf_counter() - t0:.0f} s under {toy}")
    return {"root": root, "config": cfg}


# -- the jobs ----------------------------------------------------------------------------------------


def spec(cfg: dict, variant: str, **over) -> dict:
    """The workflow's training spec of seed 1 of a cell of the check's setting, with its resources."""
    from scout import grid, resources, training_runs

    g = grid.Grid.of(cfg)
    cell = g.find(SETTING, variant, 1)
    out = {**training_runs.run_spec(g, cell), **over}
    out["resources"] = resources.job_resources(cfg, "train", cell.setting, cell.method, cell.variant)
    return out


def lora_spec(cfg: dict, **over) -> dict:
    """SCOUT with a LoRA teacher and a teacher phase every step: short prefixes, K = 16 and sampling
    at temperature 1.5, so that some group has mixed rewards. The toy teacher finishes long student
    prefixes the same way every time (no update at K = 8 once), and at temperature 1.0 it solved
    nearly every continuation (rewards 1.0, 1.0, 1.0 and 0.75 in one CI run: no mixed group in four
    phases, no update); at 1.5 its rewards were 0.25-0.59 and every phase updated."""
    out = spec(cfg, "scout-lora", **{"temperature": 1.5, **over})
    out["method_cfg"]["scout"].update(interval=1, k=16, prefix_ratio=[0.1, 0.1])
    return out


def served_spec(cfg: dict, variant: str) -> dict:
    """The spec of a frozen-teacher cell whose setting's teacher is served (``teacher_server``):
    placed without a teacher engine."""
    from scout import grid, jobs

    served = {**cfg, "settings": {**cfg["settings"], SETTING: {**cfg["settings"][SETTING], "teacher_server": "serve"}}}
    g = grid.Grid.of(served)
    cell = g.find(SETTING, variant, 1)
    return {**jobs.train_job_spec(g, cell), "resources": jobs.train_resources(g, SETTING, cell.method, variant)}


def check_spec(cfg: dict, name: str) -> dict:
    c = CHECKS[name]
    return served_spec(cfg, c.variant) if c.served else lora_spec(cfg) if c.lora else spec(cfg, c.variant)


def gpus_needed(job_spec: dict) -> int:
    """GPUs a cell's job asks for (its pools; a served teacher shares the student's GPU)."""
    r = job_spec["resources"]
    return r["nodes"] * r["gpus_per_node"]


def job(job_spec: dict, out: Path) -> tuple[list[str], dict]:
    """A training job's command, as the workflow runs it (the spec in a file beside the run
    folder), and its environment (this interpreter's folder first on PATH, for ``scout``; both ends
    of a weight sync log their checksums)."""
    path = out.parent / f"{out.name}.spec.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job_spec))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "SCOUT_SYNC_CHECKSUM": "1"}
    return [sys.executable, "-m", "scout.cli", "train", "--spec", f"@{path}", "--out", str(out)], env


def train(root: Path, job_spec: dict, out: Path, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a training job to its end; its output is kept beside its run folder (``{out}.log``)."""
    cmd, job_env = job(job_spec, out)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**job_env, **(env or {})}, cwd=root)
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    return done


@contextmanager
def openai_server(model: str | Path, log: Path, name: str, device: str = "cpu", max_logprobs: int = 20,
                  env: dict | None = None) -> Iterator[str]:  # fmt: skip
    """vLLM's OpenAI-compatible server on a local port while the block runs, as a user starts a
    teacher server: float32 with 1 GB of KV cache on the CPU build; bfloat16 and a fifth of the GPU
    on CUDA, beside the student's pool. Its output goes to ``log`` (quoted if it fails to start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dtype, share = ("float32", "0.1") if device == "cpu" else ("bfloat16", "0.2")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", name, "--dtype", dtype, "--max-model-len", "256",
           "--gpu-memory-utilization", share, "--port", str(port), "--max-logprobs", str(max_logprobs),
           "--enforce-eager"]  # fmt: skip
    out = open(log, "w")  # noqa: SIM115 - open for the server's lifetime
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})})  # fmt: skip
    url, t0 = f"http://127.0.0.1:{port}", time.monotonic()
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 240:
                    raise RuntimeError(f"vLLM's server did not start: {log.read_text()[-3000:]}") from None
                time.sleep(1)
        print(f"vLLM server up in {time.monotonic() - t0:.1f}s", flush=True)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        out.close()


def served_run(world: dict, variant: str, out: Path, timeout: float = 900, env: dict | None = None):
    """Train a served-teacher cell against the toy teacher behind vLLM's server, up for this run
    alone; the returned process carries the server's answered ``requests``."""
    from scout import teacher_server as ts
    from scout.paths import Paths
    from scout.serve import requests_answered

    cfg = world["config"]
    out.parent.mkdir(parents=True, exist_ok=True)
    model = Paths.of(cfg).model("toy-large")
    with openai_server(model, out.parent / f"{out.name}.server.log", "toy-large", cfg["device"], env=env) as url:
        served_env = {**(env or {}), ts.ENV: json.dumps({SETTING: {"url": url, "model": "toy-large"}})}
        done = train(world["root"], served_spec(cfg, variant), out, timeout=timeout, env=served_env)
        done.requests = requests_answered(url)
    return done


def run_check(world: dict, name: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    out = world["root"] / "runs" / name
    if CHECKS[name].served:
        return served_run(world, CHECKS[name].variant, out, timeout, env)
    return train(world["root"], check_spec(world["config"], name), out, timeout, env)


def evaluate(world: dict, variant: str, timeout: float = 600, env: dict | None = None) -> dict:
    """``scout evaluate`` with vLLM of the final checkpoint a cell's run exported
    (``runs/{variant}/model/final``), as the grid's evaluation jobs run it, into ``eval/{variant}``:
    the return code, the seconds and {benchmark: mean}."""
    from scout import grid, jobs

    cfg, out = world["config"], world["root"] / "eval" / variant
    export = world["root"] / "runs" / variant / "model" / "final"
    s = jobs.eval_spec(grid.Grid.of(cfg), SETTING, variant, 1, "final") | {"model": str(export), "engine": "vllm", "run_dir": None}
    cpu = cfg["device"] == "cpu"  # on the CPU build gpu_memory_utilization is the share of host memory
    s["engine_options"] = {"dtype": "float32" if cpu else "bfloat16", "max_model_len": 256,
                           "gpu_memory_utilization": 0.1 if cpu else 0.5, "enforce_eager": cpu}  # fmt: skip
    path = out.parent / f"{out.name}.spec.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(s))
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "scout.cli", "evaluate", "--spec", f"@{path}", "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=world["root"],
                          env={**os.environ, **(env or {})})  # fmt: skip
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    means = {}
    for b in s["benchmarks"]:
        record = out / f"{b}.json"
        if record.exists():
            means[b] = json.loads(record.read_text())["mean"]
    return {"variant": variant, "returncode": done.returncode, "seconds": time.perf_counter() - t0, "means": means,
            "complete": done.returncode == 0 and len(means) == len(s["benchmarks"])}  # fmt: skip


# -- what a run shows --------------------------------------------------------------------------------

# both ends of a weight sync (scout.verl.gloo_sync's lines; sync_checksum's have no receivers)
SENT = re.compile(r"sent (\d+) tensors, (\d+) B (?:to \d+ receivers )?in [0-9.]+ s, checksum (-?[0-9.]+)")
RECEIVED = re.compile(r"received (\d+) tensors, (\d+) B in [0-9.]+ s, checksum (-?[0-9.]+)")
MIN_PEARSON = 0.99  # rollout against actor after a sync


@dataclass
class CellReport:
    name: str
    returncode: int | None
    seconds: float
    steps: int | None = None
    step_s: float | None = None
    peak_gb: dict[str, float] = field(default_factory=dict)  # trainer role -> GB
    engines: dict[str, float] = field(default_factory=dict)  # vLLM engine -> its share of a GPU
    selftest: tuple[float, float] | None = None  # (gap, limit), nats a token
    sent: str | None = None
    received: list[str] = field(default_factory=list)
    rollout_pearson: float | None = None
    engine_pearson: float | None = None  # the teacher's engine against its trainer, after a sync
    trains_teacher: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_cell(name: str, run: Path, done: subprocess.CompletedProcess, seconds: float) -> CellReport:
    """What a run shows, from its spec, its record, its TensorBoard scalars, its config and its log."""
    from omegaconf import OmegaConf

    from scout import tracking
    from scout.methods import METHODS
    from scout.verl import config as vc

    method = METHODS[json.loads((run.parent / f"{run.name}.spec.json").read_text())["method"]]
    log = (done.stdout or "") + (done.stderr or "")
    r = CellReport(name, done.returncode, seconds, trains_teacher=method.trains_teacher)
    if done.returncode != 0:
        tail = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        r.problems.append(f"exit {done.returncode}: {tail[0][:200]}")
    record = run / "train.json"
    r.steps = json.loads(record.read_text())["steps"] if record.exists() else None
    scalars = tracking.scalars(run)
    if "timing_s/step" in scalars:
        r.step_s = sum(scalars["timing_s/step"]) / len(scalars["timing_s/step"])
    for tag, role in (("actor/perf/max_memory_allocated_gb", "student"), ("scout/teacher_perf/max_memory_allocated_gb", "teacher")):
        if tag in scalars:
            r.peak_gb[role] = max(scalars[tag]) * 2**30 / 1e9  # verl logs GiB
    if (run / "verl_config.yaml").exists():
        c = OmegaConf.load(run / "verl_config.yaml")
        r.engines["student"] = float(c.actor_rollout_ref.rollout.gpu_memory_utilization)
        if c.distillation.nnodes:
            r.engines["teacher"] = float(OmegaConf.select(c, vc.TEACHER_INFERENCE).gpu_memory_utilization)
    if "scout/teacher_selftest_diff" in scalars:
        r.selftest = (scalars["scout/teacher_selftest_diff"][-1], scalars["scout/teacher_selftest_limit"][-1])
        if r.selftest[0] > r.selftest[1]:
            r.problems.append(f"teacher self-test {r.selftest[0]:.2e} over its limit {r.selftest[1]:.2e}")
    elif method.needs_teacher and done.returncode == 0:
        r.problems.append("no teacher self-test logged")
    if "training/rollout_actor_probs_pearson_corr" in scalars:
        r.rollout_pearson = scalars["training/rollout_actor_probs_pearson_corr"][-1]
        if r.rollout_pearson <= MIN_PEARSON:
            r.problems.append(f"rollout and actor log-probs disagree after a sync (r = {r.rollout_pearson:.4f})")
    elif vc.agent_loop(method.id) not in vc.LOOPS_WITHOUT_LOGPROBS and done.returncode == 0:
        r.problems.append("no rollout/actor agreement logged")
    if "scout/teacher_engine_trainer_pearson" in scalars:
        r.engine_pearson = scalars["scout/teacher_engine_trainer_pearson"][-1]
    sent, received = SENT.findall(log), RECEIVED.findall(log)
    if sent:
        r.sent = sent[-1][2]
        r.received = [x[2] for x in received]
    if method.trains_teacher and done.returncode == 0:
        if not sent:
            r.problems.append("no weight sync logged")
        elif r.sent not in r.received:
            r.problems.append(f"the engine did not receive what the trainer sent (checksum {r.sent})")
    if done.returncode == 0 and r.steps is None:
        r.problems.append("no train.json recorded")
    return r


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def report(cells: list[CellReport], not_run: dict[str, str] | None = None, evaluation: dict | None = None) -> str:
    """The check's printout: one row of figures per cell, then one verdict line per cell."""
    head = ["cell", "rc", "job s", "step s", "peak GB (trainers)", "engines (GPU share)", "self-test gap/limit",
            "sync checksum sent/received", "rollout-actor r"]  # fmt: skip
    rows = []
    for c in cells:
        peaks = ", ".join(f"{k} {v:.2f}" for k, v in c.peak_gb.items()) or "-"
        engines = ", ".join(f"{k} {v:.2f}" for k, v in c.engines.items()) or "-"
        test = "-" if c.selftest is None else f"{c.selftest[0]:.1e}/{c.selftest[1]:.1e}"
        # the last sync's checksum, and the same number where an engine received it
        sync = "-" if c.sent is None else f"{c.sent} / {c.sent if c.sent in c.received else ', '.join(c.received) or 'none'}"
        rows.append([c.name, str(c.returncode), f"{c.seconds:.0f}", _num(c.step_s, ".2f"), peaks, engines, test,
                     sync, _num(c.rollout_pearson, ".4f")])  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in [head, *rows]]
    lines.append("")
    for c in cells:
        lines.append(f"{c.name}: " + ("PASS" if c.ok else "FAIL: " + "; ".join(c.problems)))
    for name, why in (not_run or {}).items():
        lines.append(f"{name}: NOT CHECKED: {why}")
    if evaluation is not None:
        means = ", ".join(f"{b} {m:.3f}" for b, m in evaluation["means"].items()) or "no records"
        verdict = "PASS" if evaluation["complete"] else f"FAIL: exit {evaluation['returncode']}"
        lines.append(f"vLLM evaluation of {evaluation['variant']}'s export: {verdict} ({evaluation['seconds']:.0f} s; {means})")
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------------------


def visible_gpus(device: str) -> list[str]:
    """The GPU ids jobs may use: CUDA's (CUDA_VISIBLE_DEVICES where set); none to count on the CPU."""
    if device == "cpu":
        return []
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU here (--device cpu runs the CPU path)")
    ids = os.environ.get("CUDA_VISIBLE_DEVICES")
    return ids.split(",") if ids else [str(i) for i in range(torch.cuda.device_count())]


def schedule(needs: dict[str, int], gpus: int) -> tuple[list[list[str]], dict[str, str]]:
    """Waves of cells run side by side, each on GPUs of its own, in the order given; cells that need
    more GPUs than there are are left out, with why. ``gpus == 0``: the CPU, one cell at a time."""
    waves, left_out, wave, free = [], {}, [], gpus
    for name, n in needs.items():
        if gpus and n > gpus:
            left_out[name] = f"needs {n} GPUs (one per pool: student, teacher engine, teacher trainer), this machine has {gpus}"
            continue
        if wave and (not gpus or n > free):
            waves.append(wave)
            wave, free = [], gpus
        wave.append(name)
        free -= n
    return waves + ([wave] if wave else []), left_out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--cells", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    p.add_argument("--toy-grid", type=Path, help="a finished toy grid's folder: its toy models instead of new ones")
    p.add_argument("--work", type=Path, default=Path("gpu-check"), help="where the runs go (default ./gpu-check)")
    p.add_argument("--timeout", type=float, default=900, help="seconds a cell may take")
    p.add_argument("--plan", action="store_true", help="print the cells, the GPUs each needs and the waves; run nothing")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.cells.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error(f"unknown cells {unknown}; known: {', '.join(CHECKS)}")
    gpus = visible_gpus(args.device)
    root = args.work.resolve()
    cfg = world_config(root, args.device)
    needs = {n: gpus_needed(check_spec(cfg, n)) for n in names}
    waves, left_out = schedule(needs, len(gpus))
    where = f"{len(gpus)} GPUs ({','.join(gpus)})" if gpus else "the CPU (verl's CPU platform, vLLM's CPU build)"
    print(f"gpu_check on {where}: " + "; ".join(" + ".join(f"{n} ({needs[n]})" for n in w) for w in waves))
    if args.plan:
        for name, why in left_out.items():
            print(f"{name}: not checked: {why}")
        return 0
    if args.device == "cpu":
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SystemExit("--device cpu needs vLLM's CPU build: make install-vllm") from None
    world = build_world(root, args.device, args.toy_grid)
    cells = []
    for wave in waves:
        cells += run_wave(world, wave, needs, gpus, args.timeout)
    evaluation = None
    if (root / "runs" / EVALUATED / "model" / "final").exists():
        evaluation = evaluate(world, EVALUATED, env=_gpu_env(gpus[:1]) if gpus else None)
    print("\n" + report(cells, left_out, evaluation))
    failed = [c.name for c in cells if not c.ok] + ([] if evaluation is None or evaluation["complete"] else ["evaluation"])
    print(f"\n{len(cells) - len(failed)} of {len(cells)} cells passed" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not checked: {', '.join(left_out)}" if left_out else "") + f". Runs and logs: {root / 'runs'}")  # fmt: skip
    return 1 if failed else 0


def _gpu_env(ids: list[str]) -> dict:
    return {"CUDA_VISIBLE_DEVICES": ",".join(ids)}


def run_wave(world: dict, wave: list[str], needs: dict[str, int], gpus: list[str], timeout: float) -> list[CellReport]:
    """Start the wave's cells together, each on GPUs of its own; read each when it ends."""
    from concurrent.futures import ThreadPoolExecutor

    envs, at = {}, 0
    for name in wave:
        envs[name] = _gpu_env(gpus[at : at + needs[name]]) if gpus else None
        at += needs[name] if gpus else 0

    def one(name: str) -> CellReport:
        print(f"{name}: starts" + (f" on GPUs {envs[name]['CUDA_VISIBLE_DEVICES']}" if envs[name] else ""), flush=True)
        t0 = time.perf_counter()
        try:
            done = run_check(world, name, timeout, envs[name])
        except subprocess.TimeoutExpired as e:
            done = subprocess.CompletedProcess(e.cmd, -9, str(e.stdout or ""), f"timed out after {timeout:.0f} s")
        except RuntimeError as e:  # the served teacher's server did not start
            done = subprocess.CompletedProcess([], -1, "", str(e))
        cell = read_cell(name, world["root"] / "runs" / name, done, time.perf_counter() - t0)
        print(f"{name}: {'PASS' if cell.ok else 'FAIL'} in {cell.seconds:.0f} s", flush=True)
        return cell

    with ThreadPoolExecutor(len(wave)) as pool:
        return list(pool.map(one, wave))


if __name__ == "__main__":
    sys.exit(main())
