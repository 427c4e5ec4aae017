"""A run's checkpoints in the embedded backend: model and optimizer states saved atomically (the
last one kept), a resume from the last (a damaged one moves the run aside), a continuation from a
shorter run of the same weights spec, and the exports the evaluation reads. ``Trainer`` holds these
as a part of itself (``self.models``, ``self.progress``, ``self.out``, ``self.spec``)."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from scout import algorithms as alg
from scout import runs
from scout.embedded import lora
from scout.io import DamagedInput, read_jsonl

STATE_FILE = "trainer_state.pt"


class Checkpoints:
    """Saving, resuming, continuing and exporting a ``Trainer``'s run."""

    def save_checkpoint(self) -> None:
        step = self.progress.step
        ck = self.out / "checkpoints"
        tmp = ck / f"step_{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        m = self.models
        state = {
            "progress": {"step": step, "budget": asdict(self.progress.budget) if self.progress.budget else None},
            "student": m.student.state_dict(),
            "student_opt": m.student_opt.state_dict(),
        }
        if m.teacher_opt is not None:  # a LoRA teacher's base is the initial teacher: the adapters suffice
            state["teacher"] = m.teacher.state_dict() if m.teacher_lora is None else lora.adapter_state(m.teacher)
            state["teacher_opt"] = m.teacher_opt.state_dict()
        torch.save(state, tmp / STATE_FILE)
        tmp.rename(ck / f"step_{step}")
        for old in sorted(ck.glob("step_*"), key=lambda p: int(p.name.split("_")[1].split(".")[0]))[:-1]:
            shutil.rmtree(old, ignore_errors=True)

    def _checkpoints(self) -> list[Path]:
        return sorted((self.out / "checkpoints").glob("step_*[0-9]"), key=lambda p: int(p.name.split("_")[1]))

    def _missing_exports(self, out: Path) -> list[str]:
        """Exported checkpoints up to the last saved step that a resume would need but are gone."""
        done = self._checkpoints()
        last = int(done[-1].name.split("_")[1]) if done else 0
        wanted = [s for s in runs.checkpoint_steps(self.spec) if s <= last]
        return [f"model/step{s}" for s in wanted if not (out / "model" / f"step{s}" / "model.safetensors").exists()]

    def try_resume(self, log=print) -> bool:
        done = self._checkpoints()
        if not done:
            return False
        try:
            state = torch.load(done[-1] / STATE_FILE, weights_only=False, map_location="cpu")
        except Exception as exc:  # a truncated or corrupt file: train again rather than fail
            moved = runs.move_aside(self.out)
            runs.claim(self.out, self.spec, log)
            log(f"{done[-1] / STATE_FILE} is damaged ({type(exc).__name__}: {exc}); the run was moved to {moved} "
                "and trains from scratch")  # fmt: skip
            return False
        self._load(state)
        return True

    def _load(self, state: dict) -> None:
        m = self.models
        m.student.load_state_dict(state["student"])
        m.student_opt.load_state_dict(state["student_opt"])
        if "teacher" in state:
            if m.teacher_lora is None:
                m.teacher.load_state_dict(state["teacher"])
            else:
                lora.load_adapters(m.teacher, state["teacher"])
            m.teacher_opt.load_state_dict(state["teacher_opt"])
        p = state["progress"]
        self.progress.step = p["step"]
        if p["budget"]:
            self.progress.budget = alg.BudgetState(**p["budget"])

    def continue_shorter_run(self, log=print) -> dict:
        """Start from the last checkpoint of the shorter run this one extends (``continue_from``,
        ``training_runs.run_spec``): the same weights spec apart from the length, checked against its
        ``run.json``, so the steps up to there are the ones this run would take. Its metrics up
        to that step are copied in."""
        base = Path(self.spec["continue_from"]["run"])
        step = self.spec["continue_from"]["step"]
        owner = runs.owner(base)
        mine = runs.weights_spec(self.spec)
        lengths = ("epochs", "total_steps")
        if owner is None or {k: v for k, v in owner["spec"].items() if k not in lengths} != {
            k: v for k, v in mine.items() if k not in lengths
        }:
            raise runs.RunMismatch(f"{base} is not a shorter run of this spec; it cannot be continued")
        state_file = base / "checkpoints" / f"step_{step}" / STATE_FILE
        try:
            state = torch.load(state_file, weights_only=False, map_location="cpu")
        except FileNotFoundError as exc:
            raise DamagedInput(state_file, "missing (the shorter run keeps its last checkpoint)") from exc
        except Exception as exc:
            raise DamagedInput(state_file, f"unreadable ({type(exc).__name__}: {exc})") from exc
        self._load(state)
        lines = [m for m in read_jsonl(base / "metrics.jsonl") if m["step"] <= step]
        with open(self.out / "metrics.jsonl", "w") as fh:
            fh.writelines(json.dumps(m) + "\n" for m in lines)
        log(f"continuing {base} from its step {step}")
        return {"run": str(base), "step": step}

    def export(self, name: str) -> None:
        """Save the student (and a trained teacher) in Hugging Face format for evaluation."""
        for who, model in (
            ("", self.models.student),
            ("-teacher", self._trained_teacher()),
        ):
            if model is None:
                continue
            target = self.out / "model" / f"{name}{who}"
            model.save_pretrained(str(target))
            self.tok.save_pretrained(str(target))

    def _trained_teacher(self) -> torch.nn.Module | None:
        """The teacher as a plain Qwen3 (a LoRA teacher's adapters merged into a copy), if it trains."""
        if not self.method.trains_teacher:
            return None
        return self.models.teacher if self.models.teacher_lora is None else lora.merged(self.models.teacher_lora)
