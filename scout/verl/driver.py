"""``scout train`` for ``backend: verl``: one cell from its spec to Hugging Face checkpoints.

prepared JSONL -> verl parquet -> checked verl config (written beside the results) -> verl's
``run_ppo`` with scout's task runner (against the Ray cluster ``scout ray-run`` started over the
Slurm allocation, or a local Ray on one GPU node) -> FSDP checkpoints under
``{out}/checkpoints`` (resumed by verl after preemption) -> ``{out}/model/{name}`` in Hugging Face
format via verl's model merger, for the evaluation rules.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from scout import runs, teacher_server
from scout.resources import job_end
from scout.verl import config as vc
from scout.verl import data
from scout.verl.export import _roles, export_saved, fold_adapter, merge  # noqa: F401  (the driver's names)

TRACKER = "latest_checkpointed_iteration.txt"


def latest_step(ckpt_dir: str | Path) -> int | None:
    """The step of the last complete checkpoint (verl writes its tracker file last)."""
    tracker = Path(ckpt_dir) / TRACKER
    if not tracker.exists():
        return None
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{tracker}: not a step number: {text!r}")
    return int(text)


def checkpoint_steps(spec: dict, final: int) -> dict[str, int]:
    """Export name -> verl global step: ``step{N}`` for evaluated intermediate checkpoints, ``final``."""
    return {name: (final if name == "final" else int(name[4:])) for name in runs.checkpoints(spec)}


def export_models(spec: dict, ckpt_dir: str | Path, out_dir: str | Path, log=print) -> list[str]:
    """Student (and, for SCOUT, teacher) of every evaluated checkpoint -> ``{out}/model/``."""
    ckpt, out = Path(ckpt_dir), Path(out_dir)
    final = latest_step(ckpt)
    if final is None:
        raise FileNotFoundError(f"{ckpt}: no finished checkpoint ({TRACKER} is missing)")
    if final != spec["total_steps"]:  # "final" is the planned last step, never an earlier save
        raise RuntimeError(
            f"{ckpt}: the last checkpoint is step {final}, the run was planned for {spec['total_steps']} steps "
            "(a step count that verl's dataloader does not run: check it with scout preflight)"
        )
    written = []
    for name, step in checkpoint_steps(spec, final).items():
        for role, suffix in _roles(spec["method"]):
            target = out / "model" / f"{name}{suffix}"
            if name != "final" and spec.get("keep_checkpoints") == "exported" and target.is_dir():
                continue  # exported when it was saved, its checkpoint deleted since
            merge(ckpt / f"global_step_{step}" / role, target)
            log(f"exported global_step_{step}/{role} -> {target}")
            written.append(str(target))
    return written


def prepare(spec: dict, out_dir: str | Path, server: dict | None = None):
    """Everything before training: the parquet twin of the data and the checked config, written
    to ``{out}/verl_config.yaml`` so a failed or refused job leaves what it would have run;
    ``server`` ({url, model}): the teacher server a served cell scores against."""
    from omegaconf import OmegaConf, open_dict

    res = spec.get("resources")
    if not res:
        raise ValueError("the verl backend needs the job's resources in the spec (the workflow adds them)")
    data.export(spec["train_data"], vc.parquet_path(spec["train_data"]))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = vc.build(spec, res, str(out))
    if server:
        with open_dict(cfg):
            cfg.scout.teacher_server = server
    (out / "verl_config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return cfg


def find_server(spec: dict, out: Path, log=print) -> dict | None:
    """The teacher server of a cell placed without a teacher pool (``resources.teacher_served``):
    waited for and held while the job runs, as the embedded backend does (``scout.teacher_server``)."""
    if not spec.get("resources", {}).get("teacher_served"):
        return None
    client = teacher_server.client_for(spec["setting"], user=str(out / "train.json"), log=log)
    if client is None:
        raise SystemExit(
            f"{spec['setting']}/{spec['variant']}/s{spec['seed']} is placed without a teacher engine (its setting's "
            f"teacher_server) but this job knows no server for it in {teacher_server.ENV}, which the workflow exports "
            "from settings.<s>.teacher_server: run the cell through snakemake, or export "
            f'{teacher_server.ENV}=\'{{"{spec["setting"]}": {{"url": ..., "model": ...}}}}\''
        )
    log(f"the teacher scores at {client.url} ({client.model})")
    return {"url": client.url, "model": client.model, "user": str((out / "train.json").resolve())}


def missing_checkpoints(spec: dict, out_dir: Path) -> list[str]:
    """Evaluated checkpoints up to the last saved step that a resume would need but are gone."""
    ckpt = Path(out_dir) / "checkpoints"
    try:
        last = latest_step(ckpt) or 0
    except ValueError:
        return [f"checkpoints/{TRACKER} (unreadable)"]
    exported = spec.get("keep_checkpoints") == "exported"  # an evaluated step's export stands in for it

    def there(s: int) -> bool:
        if (ckpt / f"global_step_{s}" / "actor").is_dir():
            return True
        return exported and s != last and (Path(out_dir) / "model" / f"step{s}").is_dir()

    wanted = dict.fromkeys([s for s in runs.checkpoint_steps(spec) if s <= last] + ([last] if last else []))
    return [f"checkpoints/global_step_{s}" for s in wanted if not there(s)]


EXPIRY_ENV = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"  # what verl's trainer reads (Unix seconds)
SAVE_MARGIN_S = 900  # a save of the largest cells' shards (student and teacher trainer) and its export, with room


def save_before(cfg, end: float | None) -> None:
    """Have verl's trainer save a checkpoint in the steps before the job's time limit (its own
    rule for an expiring allocation: once what is left is under a step, a save and the margin), so
    a training run in pieces (``resources.max_runtime``) resumes where it was cut, not up to
    ``save_every`` steps before."""
    if end is None:
        return
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.runtime_env.env_vars[EXPIRY_ENV] = str(int(end))
        cfg.trainer.esi_redundant_time = SAVE_MARGIN_S


def train(spec: dict, out_dir: str | Path, log=print, dry_run: bool = False) -> dict:
    import torch

    out = Path(out_dir)
    # before verl's resume_mode auto can see them: checkpoints of another spec are moved aside
    resumable = runs.claim(out, spec, log, dry_run=dry_run, missing=lambda o: missing_checkpoints(spec, o))
    cfg = prepare(spec, out_dir, None if dry_run else find_server(spec, out, log))
    resumed = latest_step(cfg.trainer.default_local_dir) if resumable else None
    log(f"verl config: {out / 'verl_config.yaml'}" + (f"; resuming from step {resumed}" if resumed else ""))
    if dry_run:
        return {"config": str(out / "verl_config.yaml"), "resumed_from": resumed}
    cpu = spec.get("device") == "cpu"
    if not cpu and not torch.cuda.is_available():
        raise SystemExit(
            f"the verl backend trains on GPUs and this machine has none (device: cpu trains toy cells on the CPU); "
            f"the config is {out}/verl_config.yaml"
        )
    save_before(cfg, job_end())
    os.environ.update(cfg.ray_kwargs.ray_init.runtime_env.env_vars)  # the driver process registers the plugin too
    if cpu:  # the CPU platform and its patches, before verl's workers and engines load
        from scout.verl import cpu as cpu_platform

        cpu_platform.install()
    from verl.trainer.main_ppo import run_ppo

    from scout.verl.trainer import ScoutTaskRunner  # after the CPU platform's patches, like verl's own

    t0 = time.perf_counter()
    run_ppo(cfg, task_runner_class=ScoutTaskRunner)
    models = export_models(spec, cfg.trainer.default_local_dir, out, log)
    summary = {
        "spec": spec,
        "steps": latest_step(cfg.trainer.default_local_dir),
        "resumed_from": resumed,
        "seconds": time.perf_counter() - t0,
        "backend": "verl",
        "models": models,
    }
    (out / "train.json").write_text(json.dumps(summary, indent=1))
    runs.mark_complete(out, summary)
    return summary
