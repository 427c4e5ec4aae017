"""The workflow run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.toy import REPO


def snakemake(workdir, *args, check=True):
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        *([] if "--configfile" in args else ["--configfile", str(workdir / "mini.yaml")]),  # given once
        "--cores",
        "2",
        *args,
    ]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and out.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out
