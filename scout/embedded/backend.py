"""The embedded backend's door: the toy world's trainer, in-process with torch (CPU or one GPU)."""

from __future__ import annotations

import json
from pathlib import Path

from scout.backends import Backend
from scout.io import read_jsonl


class Embedded(Backend):
    name = "embedded"
    continues_runs = True  # a longer run of the same spec resumes a shorter one's checkpoints, bit for bit

    def spec_fields(self, config: dict) -> dict:
        # the CPU by default, and then absent: the specs (and digests) made before the key stay
        device = config.get("device", self.device)
        return {} if device == self.device else {"device": device}

    def train(self, spec: dict, out_dir: str, log=print, dry_run: bool = False) -> dict:
        if dry_run:
            raise SystemExit("--dry-run applies to the verl backend (the embedded one trains in seconds)")
        from scout.embedded.trainer import train  # torch loads with the job that trains

        return train(spec, out_dir, spec.get("device", self.device), log=log)

    def peak_gpu_gb(self, run_dir: str) -> float | None:
        path = Path(run_dir) / "train.json"
        return json.loads(path.read_text()).get("peak_gpu_gb") if path.exists() else None

    def step_seconds(self, run_dir: str) -> list[float]:
        path = Path(run_dir) / "metrics.jsonl"
        return [m["step_seconds"] for m in read_jsonl(path)] if path.exists() else []


EMBEDDED = Embedded()
