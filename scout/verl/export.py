"""A verl checkpoint in Hugging Face format, as the evaluation reads it: verl's own model merger,
a LoRA adapter folded into its weights, and, with ``training.keep_checkpoints: exported``, each
evaluated checkpoint exported as soon as it is saved. Apart from the driver, so that the trainer
(which the driver runs) can export without importing it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from scout.methods import METHODS
from scout.verl.env import TEACHER_DIR


def merge(src: Path, dst: Path) -> None:
    """verl's FSDP -> Hugging Face merger, as its users run it; atomic, so an interrupted export
    never looks like a model."""
    if not (src / "fsdp_config.json").exists():
        raise FileNotFoundError(f"{src}: no FSDP checkpoint here (fsdp_config.json is missing)")
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp"]
    cmd += ["--local_dir", str(src), "--target_dir", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"model merger failed for {src} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    fold_adapter(tmp)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


def fold_adapter(folder: Path) -> None:
    """A LoRA-trained model as the evaluation reads it: verl's merger saves the frozen base as the
    model and the trained adapter beside it (``lora_adapter/``), which would evaluate the untrained
    teacher; peft folds the adapter into the weights and the folder becomes a plain checkpoint."""
    adapter = folder / "lora_adapter"
    if not adapter.is_dir():
        return
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = json.loads((adapter / "adapter_config.json").read_text())
    if not config.get("lora_alpha"):  # verl's merger falls back to 0 without its metadata: no update at all
        raise RuntimeError(f"{adapter}: lora_alpha is {config.get('lora_alpha')!r}; folding it would drop the update")
    base = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    shutil.rmtree(adapter)
    for old in [*folder.glob("*.safetensors"), *folder.glob("*.safetensors.index.json")]:
        old.unlink()  # the base's weights (one file or shards): the merged model replaces them
    merged.save_pretrained(str(folder))


def _roles(method: str) -> list[tuple[str, str]]:
    """(checkpoint folder, export suffix) of each model a run exports: the student, and SCOUT's teacher."""
    if not METHODS[method].trains_teacher:
        return [("actor", "")]
    return [("actor", ""), (TEACHER_DIR, "-teacher")]


def export_saved(method: str, ckpt_dir: str | Path, steps: set[int], log=print) -> list[str]:
    """Export every evaluated checkpoint on disk that has no export yet (``training.keep_checkpoints:
    exported``), so that it can be deleted: run after each save, it also catches a step whose
    export a kill interrupted (the merge is atomic)."""
    ckpt = Path(ckpt_dir)
    written = []
    for step in sorted(steps):
        for role, suffix in _roles(method):
            src, target = ckpt / f"global_step_{step}" / role, ckpt.parent / "model" / f"step{step}{suffix}"
            if src.is_dir() and not target.is_dir():
                merge(src, target)
                log(f"exported global_step_{step}/{role} -> {target} (when saved)")
                written.append(str(target))
    return written
