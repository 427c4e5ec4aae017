"""The toy world's science and speed, printed (figures, not timed tests).

1. the full toy grid with ``snakemake --cores 2`` in a fresh directory: wall time, and where the
   core-seconds go (per rule, from the rules' benchmark files);
2. every criterion the toy world must meet, each with its measured value, from the finished grid:
   teachers well above the student, OPD and GRPO above it, the off-policy teacher, SCOUT's teacher
   phase, and the claims page's verdicts;
3. an embedded training step against the time its arithmetic needs on this machine, and the
   start-up time of a job (launch to its first useful work).

    python -m benchmarks.toy_grid [--workdir DIR] [--skip-grid] [--skip-speed]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_grid(workdir: Path) -> float:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "2", "--quiet", "progress"]  # fmt: skip
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def where_the_time_goes(workdir: Path) -> None:
    """Core-seconds per rule from Snakemake's benchmark files (results/benchmarks/...)."""
    import pandas as pd

    rows = []
    for path in (workdir / "results" / "benchmarks").rglob("*.tsv"):
        rule = path.relative_to(workdir / "results" / "benchmarks").parts[0]
        d = pd.read_csv(path, sep="\t")
        rows.append((rule, float(d["s"].iloc[0])))
    if not rows:
        print("  (no benchmark files)")
        return
    df = pd.DataFrame(rows, columns=["rule", "s"])
    g = df.groupby("rule")["s"].agg(["count", "sum", "mean", "max"]).sort_values("sum", ascending=False)
    total = g["sum"].sum()
    for rule, r in g.iterrows():
        print(f"  {rule:<18} {int(r['count']):>4} jobs {r['sum']:8.0f} s ({100 * r['sum'] / total:4.1f}%)  "
              f"mean {r['mean']:6.1f} s  max {r['max']:6.1f} s")  # fmt: skip
    print(f"  {'total':<18} {len(df):>4} jobs {total:8.0f} core-s")


def criteria(workdir: Path) -> None:
    """Each criterion of the toy world with its measured value (Avg, % points, means over seeds)."""
    import pandas as pd

    from scout import claims, config, results, tuning
    from scout.grid import Grid

    cfg = config.load(REPO / "config" / "config.yaml")
    cfg["results"] = str(workdir / "results")
    cfg = tuning.resolve(cfg)  # the tuned settings' cells are the chosen search runs'
    for setting in tuning.tuned_settings(cfg):
        for param in tuning.tuned_params(cfg["settings"][setting]):
            chosen = json.loads(tuning.choice_path(cfg, setting, param).read_text())
            points = ", ".join(f"{p['lr']:g}: {100 * p['score']:.1f}" for p in chosen["points"])
            print(f"  tuning {setting} {param} (validation %): {points}; chosen {chosen['chosen']:g}")
    runs = pd.read_csv(workdir / "results" / "summary" / "runs.csv")
    runs = runs[(runs.checkpoint == "final") & (runs.benchmark == "avg")]

    def avg(setting, variant):
        d = runs[(runs.setting == setting) & (runs.variant == variant)]
        return d["mean"].mean() * 100, list(d["mean"] * 100)

    cols = ["base-student", "base-teacher", "opd", "scout", "grpo", "esr", "prune_opd", "relay_opd"]
    print(f"  {'setting':<15}" + "".join(f"{c:>13}" for c in cols))
    for s in cfg["settings"]:
        print(f"  {s:<15}" + "".join(f"{avg(s, c)[0]:13.1f}" for c in cols))
    ok = lambda b: "PASS" if b else "FAIL"  # noqa: E731
    for s in cfg["settings"]:
        student, _ = avg(s, "base-student")
        teacher, _ = avg(s, "base-teacher")
        opd, opd_runs = avg(s, "opd")
        grpo, _ = avg(s, "grpo")
        print(f"  {s}: teacher - student {teacher - student:+.1f} (>= 25: {ok(teacher - student >= 25)}); "
              f"OPD - student {opd - student:+.1f} (>= 10: {ok(opd - student >= 10)}), seeds "
              f"{', '.join(f'{x:.1f}' for x in opd_runs)} all above {student:.1f}: "
              f"{ok(all(x > student for x in opd_runs))}; GRPO - student {grpo - student:+.1f} "
              f"(>= 5: {ok(grpo - student >= 5)})")  # fmt: skip
    for s in cfg.get("analysis", {}).get("settings", []):
        path = workdir / "results" / "analysis" / s / "continuation.csv"
        if not path.exists():
            continue
        c = pd.read_csv(path)

        def curve(t, p, c=c):
            return c[(c.teacher == t) & (c.prefixes == p)].groupby("prefix_ratio").accuracy.mean() * 100

        for label, t, p in (("initial teacher, student prefixes", "initial", "initial-student"),
                            ("initial teacher, own prefixes", "initial", "own"),
                            ("SCOUT teacher, same student prefixes", "scout", "initial-student"),
                            ("initial teacher, final SCOUT students", "initial", "final-student"),
                            ("SCOUT teacher, final SCOUT students", "scout", "final-student")):  # fmt: skip
            v = curve(t, p)
            print(f"  {s} {label:<38} " + " ".join(f"{r:.0%}:{a:5.1f}" for r, a in v.items()))
    for s in cfg["settings"]:
        for run in sorted((workdir / "results" / "train" / s / "scout").glob("s*/metrics.jsonl")):
            lines = [json.loads(x) for x in run.read_text().splitlines()]
            ups = [f"{m['teacher_reward'] * 100:.0f}" for m in lines if "teacher_reward" in m]
            print(f"  {s} scout {run.parent.name}: teacher continuation reward per update (%): {' '.join(ups)}")
    g = Grid.of(cfg)
    cache = results.Cache(g, results.load(g))
    from scout.claims_page import effect_text

    for c in claims.all_claims(cache, workdir / "results" / "analysis", 0.1):
        paper = "--" if c.paper is None else f"{c.paper:+.1f}"
        print(
            f"  [{c.verdict:>13}] {c.claim} ({c.setting}): {c.statistic or c.why}; effect {effect_text(c)}, "
            f"paper {paper}"
        )


def matmul_gflops(seconds: float = 1.0) -> float:
    """This core's float32 matmul rate on shapes like a toy model's (batch x 64..192)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(4096, 96), torch.randn(96, 192)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    return 2 * 4096 * 96 * 192 * n / (time.perf_counter() - t0) / 1e9


def step_flops(workdir: Path, steps: int = 12) -> None:
    """OPD, GRPO and SCOUT steps on the toy-l-s-math cell: measured time against the time the
    arithmetic needs at this core's matmul rate (2 N FLOPs per token forward, 6 N forward and
    backward; sampling, scoring, the reference and the teacher phase's continuations all count)."""
    import os

    import torch

    from scout import grid
    from scout.embedded.trainer import Trainer

    os.chdir(workdir)
    cfg = chosen_config(workdir)
    rate = matmul_gflops()
    print(f"  float32 matmul rate, one core: {rate:.1f} GFLOP/s")
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("opd", "grpo", "scout"):
            spec = (g := grid.Grid.of(cfg)).spec(g.find("toy-l-s-math", method, 1))
            spec.update(total_steps=steps, steps_per_epoch=steps, save_every=10_000, reward_every=10_000)
            tr = Trainer(spec, Path(tmp) / method, device="cpu")
            n_s = sum(p.numel() for p in tr.models.student.parameters())
            n_t = sum(p.numel() for p in tr.models.teacher.parameters()) if tr.models.teacher else 0
            tr.run(log=lambda _: None)
            lines = [json.loads(x) for x in (tr.out / "metrics.jsonl").read_text().splitlines()][2:]
            secs = statistics.mean(m["step_seconds"] for m in lines)
            rows, lp = spec["batch_size"] * spec["n"], 16  # prompt tokens per row (chat template included)
            lr = statistics.mean(m["response_length"] for m in lines)
            tokens = rows * (lp + lr)
            flops = 2 * n_s * rows * lr + 6 * n_s * tokens  # sampling, student forward and backward
            flops += 2 * n_t * tokens + (2 * n_s * tokens if spec["kl_beta"] > 0 else 0)  # teacher, reference
            if method == "scout":  # teacher phase every f steps: K continuations, teacher fwd+bwd and ref fwd
                sc = spec["method_cfg"]["scout"]
                cont = statistics.mean(m["teacher_cont_length"] for m in lines if "teacher_cont_length" in m)
                k_tokens = rows * sc["k"] * (lp + lr)
                flops += (2 * n_t * rows * sc["k"] * cont + 8 * n_t * k_tokens) / sc["interval"]
            print(f"  {method}: {secs * 1000:6.0f} ms per step; arithmetic {flops / 1e9:5.2f} GFLOP = "
                  f"{flops / rate / 1e6:6.0f} ms at {rate:.0f} GFLOP/s ({secs / (flops / rate / 1e9):.1f}x); "
                  f"student {n_s} / teacher {n_t} parameters, {rows} rows, {lr:.0f} response tokens")  # fmt: skip
    torch.set_num_threads(1)


def chosen_config(workdir: Path) -> dict:
    """The toy config with the grid's tuning choices (its results folder kept relative, as the jobs
    see it); a search that has not chosen yet stands at 1.5e-4, the level the grids centre on."""
    from scout import config, tuning

    cfg = config.load(REPO / "config" / "config.yaml")
    resolved = tuning.resolve({**cfg, "results": str(workdir / cfg.get("results", "results"))})
    cfg = {**resolved, "results": cfg.get("results", "results")}
    chosen = cfg["tuning"].setdefault("chosen", {})
    for setting, params in tuning.tuned_settings(cfg).items():
        for param in params:
            chosen.setdefault(setting, {}).setdefault(param, 1.5e-4)
    return cfg


def startup(workdir: Path) -> None:
    """Launch to first useful work: a training job's first step, an evaluation's first generation."""
    from scout import grid

    cfg = chosen_config(workdir)
    spec = (g := grid.Grid.of(cfg)).spec(g.find("toy-l-s-math", "opd", 1))
    spec.update({k: str(workdir / v) for k, v in (("student", spec["student"]), ("teacher", spec["teacher"]),
                                                 ("train_data", spec["train_data"]))})  # fmt: skip
    for label, cmd, marker in (
        ("python -c 'import torch'", [sys.executable, "-c", "import torch"], None),
        ("scout train (models and data loaded)", [str(Path(sys.executable).parent / "scout"), "train", "--spec", json.dumps(spec), "--out",
                                             str(workdir / "startup-probe")], "training from step"),
    ):  # fmt: skip
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout or []:
                if marker and marker in line:
                    break
            times.append(time.perf_counter() - t0)
            proc.kill()
            proc.wait()
        print(f"  {label:<36} {statistics.median(times):5.2f} s (median of 3)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--skip-grid", action="store_true", help="reuse a finished grid in --workdir")
    p.add_argument("--skip-speed", action="store_true", help="no step and start-up timings")
    args = p.parse_args()
    from scout.reproducibility import pin_numerics

    pin_numerics()  # the step timings on the code paths the grid's jobs use
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="scout-toy-grid-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if not args.skip_grid:
        print(f"full toy grid, --cores 2: {run_grid(workdir):.0f} s wall ({workdir})", flush=True)
    print("where the time goes (core-seconds per rule):")
    where_the_time_goes(workdir)
    print("criteria (Avg, %):")
    criteria(workdir)
    if not args.skip_speed:
        print("embedded step against its arithmetic:")
        step_flops(workdir)
        print("start-up per job:")
        startup(workdir)


if __name__ == "__main__":
    main()
