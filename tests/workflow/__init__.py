"""Tests of the workflow as users run it: Snakemake end to end, Slurm, status, failures, the recorded digits, tracking, the extension guides."""
