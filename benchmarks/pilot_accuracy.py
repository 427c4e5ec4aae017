"""How well the calibration pilot predicts a finished grid's training: every training job's
expected seconds (``scout plan``'s, from ``snakemake pilot``'s measurements) against the seconds
Snakemake measured for it (``results/benchmarks/train/...tsv``), per shape and in all. Figures,
not a timed test (docs/real-models.md quotes them).

    snakemake pilot --cores 2 && python -m benchmarks.pilot_accuracy [--configfile F ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from scout import config as scout_config
from scout import cost, plan
from scout.grid import Grid


def compare(cfg: dict) -> pd.DataFrame:
    """One row per training job: its shape, the predicted and the measured seconds."""
    g = Grid.of(cfg)
    pilots = cost.read_pilots(g)
    jobs = plan.grid_jobs(g, exists=lambda _: False, gpu=cost.gpu(cost.DEFAULT_GPU), pilots=pilots)
    train = jobs[(jobs["rule"] == "train") & (jobs["basis"] == "pilot")]
    res = Path(cfg.get("results", "results"))
    rows = []
    for target, hours in zip(train["target"], train["expected_hours"], strict=True):
        setting, variant, seed = Path(target).parts[-4:-1]
        bench = res / "benchmarks" / "train" / setting / variant / f"{seed}.tsv"
        if bench.exists():
            measured = float(pd.read_csv(bench, sep="\t")["s"].iloc[0])
            rows.append({"shape": f"{setting}/{variant}", "predicted_s": hours * 3600, "measured_s": measured})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", nargs="+", default=["config/config.yaml"])
    args = ap.parse_args(argv)
    d = compare(scout_config.load(args.configfile))
    if not len(d):
        raise SystemExit("no training job with both a pilot and a measurement: run snakemake pilot on a finished grid")
    shapes = d.groupby("shape").agg(jobs=("shape", "size"), predicted_s=("predicted_s", "sum"),
                                    measured_s=("measured_s", "sum"))  # fmt: skip
    shapes["ratio"] = shapes["predicted_s"] / shapes["measured_s"]
    print(shapes.to_string(float_format=lambda x: f"{x:,.2f}"))
    total_p, total_m = d["predicted_s"].sum(), d["measured_s"].sum()
    print(f"\nall {len(d)} training jobs: predicted {total_p:,.0f} job-seconds, measured {total_m:,.0f} "
          f"(ratio {total_p / total_m:.3f}); shapes within 25%: {((shapes.ratio - 1).abs() <= 0.25).sum()} "
          f"of {len(shapes)}; their ratios {shapes.ratio.min():.2f}-{shapes.ratio.max():.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
