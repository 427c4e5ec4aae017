"""SCOUT's teacher phase with a full teacher against a LoRA one, on the toy world: time and memory.

Each variant runs in a process of its own (so its peak memory is its own): a trainer of the
setting's SCOUT cell, then ``--updates`` teacher phases on the initial student's prefixes (the
trainer's own ``teacher_step``), timed one by one. Printed per variant:

- the median seconds of a teacher phase (sampling K continuations of every prefix, grading,
  log-probs of the teacher and of its reference, one update);
- the teacher trainer's state in bytes: trainable parameters with their gradients and Adam's two
  moments, the frozen weights (the reference copy of a full teacher; the base of a LoRA teacher);
- the process's peak resident memory (``ru_maxrss``), which at the toy world's size is mostly the
  interpreter, torch and the grader's workers; on CUDA (``--device cuda``) also the peak GPU memory
  torch allocated during the teacher phases (``torch.cuda.max_memory_allocated``), with the device
  synchronised around each timed phase;
- the bytes a weight sync to an inference engine would move (every tensor, or the adapters).

    python -m benchmarks.lora_teacher [--configfile config/config.yaml config/toy-lora.yaml] [--setting toy-l-s-math] [--updates 8]
                                      [--device cpu|cuda]

The toy world's models must exist, and a tuned setting's choices (``make toy-lora`` first: the LoRA
variant and the search of its LR are config/toy-lora.yaml's).
The paper grid's numbers (GPUs, GPU-hours, bytes per sync) are ``scout plan --configfile config/paper.yaml``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scout.reproducibility import pin_numerics

pin_numerics()  # before torch is imported (in this process or a child): the grid's code paths

REPO = Path(__file__).resolve().parent.parent


def measure(config_path: list[str], setting: str, variant: str, updates: int, device: str = "cpu") -> dict:
    """One variant's teacher phases, in this process."""
    import torch

    from scout import config, grid, tuning
    from scout.embedded import lora
    from scout.embedded.trainer import Trainer
    torch.set_num_threads(1)
    cfg = tuning.resolve(config.load(config_path))
    spec = (g := grid.Grid.of(cfg)).spec(g.find(setting, variant, 1))
    if spec["lr"] == tuning.TUNED or spec["method_cfg"]["scout"]["teacher_lr"] == tuning.TUNED:
        raise SystemExit(f"{setting}: its LRs are tuned and not chosen yet: run the grid's tuning stage first")
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(spec, tmp, device=device)
        m = tr.models
        cuda = tr.device.type == "cuda"
        settle = torch.cuda.synchronize if cuda else (lambda: None)  # queued kernels count in the phase
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        seconds = []
        for step in range(updates):
            rows = tr.batch_rows(step)
            prompts = [tr.prompt_ids(r) for r in rows]
            responses, _ = tr._rollout(step, prompts)
            settle()
            t0 = time.perf_counter()
            tr.teacher_step(step, rows, prompts, responses)
            settle()
            seconds.append(time.perf_counter() - t0)
        peak_gpu = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        trained = [p for p in m.teacher.parameters() if p.requires_grad]
        frozen = [p for p in m.teacher.parameters() if not p.requires_grad]
        if m.teacher_ref is not None:
            frozen += list(m.teacher_ref.parameters())
        state = sum(p.numel() * p.element_size() for p in trained) * 4  # weights, gradients, two moments
        state += sum(p.numel() * p.element_size() for p in frozen)
        sync = lora.adapter_state(m.teacher) if m.teacher_lora is not None else m.teacher.state_dict()
        tr.grader.close()
    return {
        "variant": variant,
        "teacher_lora": spec["method_cfg"]["scout"].get("teacher_lora"),
        "teacher_lr": spec["method_cfg"]["scout"]["teacher_lr"],
        "median_s": statistics.median(seconds),
        "seconds": seconds,
        "trainable_params": sum(p.numel() for p in trained),
        "state_bytes": state,
        "sync_bytes": sum(t.numel() * t.element_size() for t in sync.values()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "device": str(tr.device),
        "peak_gpu_mb": peak_gpu,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", nargs="+", default=[str(REPO / "config" / f) for f in ("config.yaml", "toy-lora.yaml")],
                   help="config files, merged in order")  # fmt: skip
    p.add_argument("--setting", default="toy-l-s-math")
    p.add_argument("--variants", default="scout,scout-lora")
    p.add_argument("--updates", type=int, default=8, help="teacher phases timed per variant")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (the trainer's choice)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one variant, print JSON
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.configfile, args.setting, args.one, args.updates, args.device)))
        return
    found = []
    for variant in args.variants.split(","):
        cmd = [sys.executable, "-m", "benchmarks.lora_teacher", "--configfile", *args.configfile, "--setting", args.setting,
               "--updates", str(args.updates), "--device", args.device, "--one", variant]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=Path.cwd())
        if done.returncode:
            raise SystemExit(f"{variant}: {done.stderr[-2000:]}")
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    on = found[0]["device"]
    print(f"teacher phase on {args.setting}, {args.updates} updates per variant, one process each, on {on}")
    gpu = any(r["peak_gpu_mb"] is not None for r in found)
    print(f"{'variant':12s} {'teacher':22s} {'median s':>9s} {'trainable':>10s} {'state B':>12s} "
          f"{'sync B':>10s} {'peak RSS MB':>12s}" + (f" {'peak GPU MB':>12s}" if gpu else ""))  # fmt: skip
    for r in found:
        lo = r["teacher_lora"]
        kind = f"LoRA r{lo['rank']} a{lo['alpha']:g}" if lo else "full"
        print(f"{r['variant']:12s} {kind + ', LR ' + format(r['teacher_lr'], 'g'):22s} {r['median_s']:9.2f} "
              f"{r['trainable_params']:10,d} {r['state_bytes']:12,d} {r['sync_bytes']:10,d} {r['peak_rss_mb']:12.0f}"
              + (f" {r['peak_gpu_mb'] or 0:12.1f}" if gpu else ""))  # fmt: skip
    if len(found) == 2:
        a, b = found
        print(f"{b['variant']} / {a['variant']}: time {b['median_s'] / a['median_s']:.2f}x, state "
              f"{b['state_bytes'] / a['state_bytes']:.2f}x, sync {b['sync_bytes'] / a['sync_bytes']:.3f}x"
              + (f", peak GPU {b['peak_gpu_mb'] / a['peak_gpu_mb']:.2f}x" if gpu else ""))  # fmt: skip


if __name__ == "__main__":
    main()
