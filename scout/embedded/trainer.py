"""The embedded training backend: every method of ``scout.methods`` in one process.

A step is rollout -> scoring -> one clipped policy-gradient update (the paper's PPO mini-batch
equals its global batch and it runs one PPO epoch, so old log-probs equal the current ones at the
update). SCOUT adds a teacher phase every ``interval`` steps. Randomness is drawn from a generator
seeded by (seed, step), and checkpoints hold model and optimizer states, so a resumed run repeats
an uninterrupted one exactly.
"""

from __future__ import annotations

import copy
import json
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from scout import algorithms as alg
from scout import runs, teacher_server
from scout.embedded import lm, lora, parts, sampling
from scout.embedded.checkpoints import Checkpoints
from scout.embedded.optim import AdamW
from scout.grading import Grader
from scout.io import read_jsonl
from scout.methods import METHODS, Method
from scout.prepare import load_rows
from scout.schema import default
from scout.tracking import Tracker

# A step's rollouts are scored 16 at a time, sorted by length: less padding (about 5% off an OPD step)
CHUNK = 16


@dataclass
class Models:
    """The trainable student, its frozen reference, and (for distillation) the teacher."""

    student: torch.nn.Module
    student_opt: AdamW
    ref: torch.nn.Module | None = None
    teacher: torch.nn.Module | None = None
    teacher_opt: AdamW | None = None
    teacher_ref: torch.nn.Module | None = None
    # a LoRA teacher (``methods.scout.teacher_lora``): peft's wrapper around ``teacher``, whose
    # adapters train and whose base, adapters off, is the reference (so ``teacher_ref`` stays None)
    teacher_lora: torch.nn.Module | None = None


@dataclass
class Progress:
    step: int = 0
    budget: alg.BudgetState | None = None
    extra: dict = field(default_factory=dict)


def _frozen(model: torch.nn.Module) -> torch.nn.Module:
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _adamw(model: torch.nn.Module, lr: float) -> AdamW:
    return AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0)


class Trainer(Checkpoints):
    def __init__(self, spec: dict, out_dir: str | Path, device: str = "cpu"):
        self.spec, self.out = spec, Path(out_dir)
        self.method: Method = METHODS[spec["method"]]
        torch.set_num_threads(spec.get("threads", default("training.threads")))
        self.device = lm.pick_device(device)
        self.tok = lm.load_tokenizer(spec["student"])
        self.eos, self.pad = self.tok.eos_token_id, self.tok.pad_token_id
        self.rows = load_rows(spec["train_data"])
        if not self.rows:
            raise ValueError(f"{spec['train_data']}: no training rows")
        torch.manual_seed(spec["seed"])
        student = lm.load_model(spec["student"], self.device).train()
        self.models = Models(student, _adamw(student, spec["lr"]))
        if spec["kl_beta"] > 0:
            self.models.ref = _frozen(student)
        if self.method.needs_teacher:
            teacher = lm.load_model(spec["teacher"], self.device)
            if self.method.trains_teacher:
                sc = spec["method_cfg"]["scout"]
                if sc.get("teacher_lora"):
                    self.models.teacher_lora = lora.wrap(teacher, sc["teacher_lora"])
                    teacher = lora.inner(self.models.teacher_lora)
                else:
                    self.models.teacher_ref = _frozen(teacher)
                self.models.teacher = teacher.train()
                self.models.teacher_opt = _adamw(teacher, sc["teacher_lr"])
            else:
                self.models.teacher = _frozen(teacher)
        # a frozen teacher that only scores may be served (scout.teacher_server); its local copy
        # stays for the self-test's reference forward
        self.served = None
        if self.method.scores_with_frozen_teacher:
            self.served = teacher_server.client_for(spec["setting"], user=str(self.out / "train.json"))
        # the method's parts (scout.embedded.parts)
        self.loss = parts.part(self.method, "student_loss")(spec)
        self.budget = parts.part(self.method, "budget")(spec)
        self.rollout = parts.part(self.method, "rollout")(self)
        self.teacher_phase = parts.part(self.method, "teacher_phase")(spec)
        self.progress = Progress(budget=self.budget.start())
        # the teacher self-test: at the start of the job and after every update of the teacher
        self.self_test_due = self.method.needs_teacher
        self.grader = Grader()
        self._prompt_cache: dict[str, list[int]] = {}
        self._pieces: dict[int, str] = {}  # token id -> its text

    # -- data --------------------------------------------------------------------------------------

    def batch_rows(self, step: int) -> list[dict]:
        """Rows of a step: epoch-wise permutations of the data, seeded by (seed, epoch)."""
        bs, per_epoch = self.spec["batch_size"], self.spec["steps_per_epoch"]
        epoch, offset = divmod(step, per_epoch)
        order = list(range(len(self.rows)))
        random.Random(f"{self.spec['seed']}:{epoch}").shuffle(order)
        start = (offset * bs) % len(order)
        idx = [order[(start + i) % len(order)] for i in range(bs)]
        return [self.rows[i] for i in idx]

    def prompt_ids(self, row: dict) -> list[int]:
        key = row["id"]
        if key not in self._prompt_cache:
            ids = lm.prompt_ids(self.tok, row["prompt"], self.spec.get("chat"))
            self._prompt_cache[key] = ids[-self.spec["max_prompt_length"] :]
        return self._prompt_cache[key]

    def generator(self, step: int, phase: int = 0) -> torch.Generator:
        return torch.Generator().manual_seed(self.spec["seed"] * 1_000_003 + step * 7 + phase)

    def sampling(self, max_new: int | None = None) -> sampling.Sampling:
        return sampling.Sampling(max_new or self.spec["max_response_length"], self.spec["temperature"], self.spec["top_p"])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([t for t in ids if t != self.eos], skip_special_tokens=False)

    # -- one student step ----------------------------------------------------------------------------

    def student_step(self, step: int) -> dict:
        """Rollout, scoring and one update of the student; SCOUT's teacher phase every f steps."""
        spec, models = self.spec, self.models
        rows = self.batch_rows(step)
        n = spec["n"]
        prompts = [self.prompt_ids(r) for r in rows for _ in range(n)]
        responses, metrics = self._rollout(step, prompts)
        rewards = None
        # GRPO needs the reward every step; distillation methods only log it, every reward_every steps
        if not self.loss.distils or (step + 1) % spec["reward_every"] == 0 or step + 1 == spec["total_steps"]:
            rewards = self.grader.grade([self.decode(r) for r in responses], [r for r in rows for _ in range(n)])
            metrics["reward"] = sum(rewards) / len(rewards)

        logits, tokens, mask = lm.response_logits(models.student, prompts, responses, self.pad, CHUNK)
        logp = lm.token_logp(logits, tokens)
        old_logp = logp.detach()  # one update per rollout batch: the sampling policy is the current one
        metrics["entropy"] = float(alg.masked_mean(alg.token_entropy(logits.detach()), mask))
        if not self.loss.distils:
            adv = alg.grpo_advantages(torch.tensor(rewards, dtype=torch.float32), n).to(self.device)
            adv, extra_loss = adv.unsqueeze(1).expand_as(logp), torch.zeros(())
        else:
            adv, extra_loss = self._distill_advantages(prompts, responses, logits, tokens, mask, old_logp, metrics)
        loss, clipfrac = alg.clipped_pg_loss(logp, old_logp, adv, mask, spec["clip"])
        loss = loss + extra_loss
        if models.ref is not None:
            with torch.no_grad():
                r_logits, _, _ = lm.response_logits(models.ref, prompts, responses, self.pad, CHUNK)
            kl = alg.masked_mean(alg.kl_penalty(logp, lm.token_logp(r_logits, tokens)), mask)
            loss = loss + spec["kl_beta"] * kl
            metrics["kl"] = float(kl.detach())
        models.student_opt.zero_grad(set_to_none=True)
        loss.backward()
        metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(models.student.parameters(), 1.0))
        models.student_opt.step()
        metrics.update(loss=float(loss.detach()), clipfrac=float(clipfrac))
        if self.teacher_phase.due(step):
            metrics.update(self.teacher_step(step, rows, prompts[::n], responses[::n]))
            self.self_test_due = True  # the next scoring runs on the updated weights
        return metrics

    def _rollout(self, step: int, prompts: list[list[int]]) -> tuple[list[list[int]], dict]:
        """Responses under the method's response budget and rollout rule (its parts)."""
        budget = self.budget.length(self.progress.budget)
        self.models.student.eval()
        responses, found = self.rollout.sample(prompts, budget, self.generator(step))
        self.models.student.train()
        metrics = {"response_budget": budget, **found}
        metrics["response_length"] = sum(map(len, responses)) / len(responses)
        return responses, metrics

    def _distill_advantages(self, prompts, responses, logits, tokens, mask, old_logp, metrics):
        """K1 advantages from the current teacher, weighed by the method's budget and reweighted by
        its student loss (Prune-OPD's, OPTR's). Returns (advantages, extra loss term)."""
        m, spec = self.method, self.spec
        k = self.budget.topk or self.loss.topk  # the teacher's most likely tokens the parts read
        t_logits = top = None
        if self.served is None:
            with torch.no_grad():
                t_logits, _, _ = lm.response_logits(self.models.teacher, prompts, responses, self.pad, CHUNK)
            t_logp = lm.token_logp(t_logits, tokens)
        else:
            t_logp, top = self._served_scores(prompts, responses, tokens.shape, k)
        if self.self_test_due:
            metrics.update(self._self_test(prompts, responses, t_logp, old_logp, mask))
            self.self_test_due = False
        adv = alg.k1_advantage(t_logp, old_logp)
        metrics["reverse_kl_k1"] = float(alg.masked_mean(-adv, mask))
        adv, self.progress.budget = self.budget.weigh(
            self.progress.budget, adv, mask, logits.detach(), t_logits, top, metrics
        )
        adv, extra_loss = self.loss.reweigh(adv, t_logp, old_logp, mask, logits, t_logits, top, metrics)
        shape = m.advantage_fn()
        if shape is not None:
            adv = shape(adv, mask, spec["method_cfg"].get(m.id, {}))
        return adv, extra_loss

    def _self_test(self, prompts, responses, t_logp, old_logp, mask) -> dict:
        """The scoring path's teacher log-probs (batched, padded, in chunks) of the first sampled
        responses against a reference forward of each alone (``algorithms.teacher_self_test``)."""
        k = min(alg.SELF_TEST_RESPONSES, len(responses))
        ref = torch.zeros_like(t_logp[:k])
        with torch.no_grad():
            for i in range(k):
                logits, tokens, _ = lm.response_logits(self.models.teacher, prompts[i : i + 1], responses[i : i + 1], self.pad)
                ref[i, : tokens.shape[1]] = lm.token_logp(logits, tokens)[0]
        found = alg.teacher_self_test(t_logp[:k], ref, old_logp[:k], mask[:k])
        alg.check_self_test(found, f"at step {self.progress.step + 1}")
        return found

    def _served_scores(self, prompts, responses, shape, k):
        """The served teacher's log-probs of the response tokens [B, T] and, with ``k``, its top-k
        ids and log-probs [B, T, k] (positions past a response's end: 0, masked out)."""
        scored = self.served.score(prompts, responses, k)
        logp = torch.zeros(shape)
        ids, top_logp = torch.zeros((*shape, k), dtype=torch.long), torch.zeros((*shape, k))
        for i, s in enumerate(scored):
            logp[i, : len(s.logp)] = torch.tensor(s.logp)
            for j, top in enumerate(s.topk):
                ranked = sorted(top.items(), key=lambda kv: -kv[1])
                ids[i, j] = torch.tensor([t for t, _ in ranked])
                top_logp[i, j] = torch.tensor([v for _, v in ranked])
        return logp.to(self.device), ((ids.to(self.device), top_logp.to(self.device)) if k else None)

    # -- SCOUT's teacher phase -------------------------------------------------------------------------

    def teacher_step(self, step: int, rows: list[dict], prompts: list[list[int]], responses: list[list[int]]) -> dict:
        """GRPO on teacher continuations of student prefixes; loss on continuation tokens only."""
        sc, models = self.spec["method_cfg"]["scout"], self.models
        ratio = 0.0 if sc["prefix_zero"] else alg.prefix_ratio(step, self.spec["total_steps"], *sc["prefix_ratio"])
        body = [r[:-1] if r and r[-1] == self.eos else r for r in responses]
        reasoning = [self.reasoning_length(b) for b in body]
        lengths = reasoning if sc.get("split", default("methods.scout.split")) == "reasoning" else [len(b) for b in body]
        ks = alg.split_points(torch.tensor(lengths), ratio).tolist()
        k_cont = sc["k"]
        cont_prompts = [p + b[:k] for p, b, k in zip(prompts, body, ks, strict=True) for _ in range(k_cont)]
        budgets = [self.spec["max_response_length"] - k for k in ks for _ in range(k_cont)]
        models.teacher.eval()
        conts = sampling.sample(
            models.teacher, cont_prompts, self.sampling(), self.eos, self.pad, self.generator(step, 1), budgets
        )
        models.teacher.train()
        full = [body[i // k_cont][: ks[i // k_cont]] + conts[i] for i in range(len(conts))]
        grp_rows = [r for r in rows for _ in range(k_cont)]
        rewards = self.grader.grade([self.decode(f) for f in full], grp_rows)
        reward_t = torch.tensor(rewards, dtype=torch.float32)
        adv = alg.grpo_advantages(reward_t, k_cont).to(self.device)
        # the loss is on the teacher's own tokens: log-probs of each continuation given its prefix,
        # every prefix computed once for its K continuations
        prefixes = cont_prompts[::k_cont]
        logp = lm.continuation_logp(models.teacher, prefixes, conts, k_cont, self.pad)
        lengths = torch.tensor([len(c) for c in conts], device=logp.device)
        mask = (torch.arange(logp.shape[1], device=logp.device) < lengths[:, None]).to(logp.dtype)
        adv_t = adv.unsqueeze(1).expand_as(logp)
        loss, _ = alg.clipped_pg_loss(logp, logp.detach(), adv_t, mask, self.spec["clip"])
        with torch.no_grad(), self._teacher_reference() as ref:
            ref_logp = lm.continuation_logp(ref, prefixes, conts, k_cont, self.pad)
        kl = alg.masked_mean(alg.kl_penalty(logp, ref_logp), mask)
        loss = loss + sc["kl_beta"] * kl
        models.teacher_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(models.teacher.parameters(), 1.0)
        models.teacher_opt.step()
        return {
            "teacher_update": 1,
            "teacher_prefix_ratio": ratio,
            "teacher_reward": sum(rewards) / len(rewards),
            "teacher_loss": float(loss.detach()),
            "teacher_kl": float(kl.detach()) if torch.is_tensor(kl) else float(kl),
            "teacher_cont_length": sum(map(len, conts)) / max(1, len(conts)),
            "teacher_informative": float(alg.informative_groups(reward_t, k_cont).float().mean()),
            # prefixes that reach into the line stating the final answer (nothing left to reason)
            "teacher_committed": sum(k > r for k, r in zip(ks, reasoning, strict=True)) / max(1, len(ks)),
        }

    @contextmanager
    def _teacher_reference(self):
        """The teacher's initial weights: its frozen copy, or a LoRA teacher's base (adapters off)."""
        if self.models.teacher_lora is None:
            yield self.models.teacher_ref
        else:
            with lora.base_only(self.models.teacher_lora):
                yield self.models.teacher

    def reasoning_length(self, ids: list[int]) -> int:
        """Tokens before the response's final-answer line (``answer_marker`` of the domain)."""
        marker = self.spec["method_cfg"]["scout"].get("answer_marker", {}).get(self.spec["domain"])
        pieces = [self._pieces.setdefault(t, self.tok.decode([t])) for t in ids]
        return alg.reasoning_length(pieces, marker)

    # -- the loop --------------------------------------------------------------------------------------

    def run(self, log=print) -> dict:
        resumed = runs.claim(self.out, self.spec, log, missing=self._missing_exports) and self.try_resume(log)
        continued = self.continue_shorter_run(log) if not resumed and self.spec.get("continue_from") else None
        metrics_path = self.out / "metrics.jsonl"
        start = self.progress.step
        lines = read_jsonl(metrics_path) if metrics_path.exists() else []
        with open(metrics_path, "w") as fh:
            for line in lines:
                if line["step"] <= start:
                    fh.write(json.dumps(line) + "\n")
        log(f"{'resumed' if resumed else 'training'} from step {start} of {self.spec['total_steps']}")
        total = self.spec["total_steps"]
        exported = set(runs.checkpoint_steps(self.spec))
        t0 = time.perf_counter()
        tracker = Tracker(self.out, self.spec)
        try:
            for step in range(start, total):
                ts = time.perf_counter()
                metrics = {"step": step + 1, **self.student_step(step)}
                metrics["step_seconds"] = time.perf_counter() - ts
                self.progress.step = step + 1
                with open(metrics_path, "a") as fh:
                    fh.write(json.dumps(metrics) + "\n")
                tracker.log(metrics, step + 1)
                if step + 1 in exported:
                    self.export(f"step{step + 1}")
                if (step + 1) % self.spec["save_every"] == 0 or step + 1 == total:
                    self.save_checkpoint()
                reward = f" reward {metrics['reward']:.3f}" if "reward" in metrics else ""
                done = step + 1 - start
                rate = (time.perf_counter() - t0) / done
                log(
                    f"[{self.spec['setting']}/{self.spec['variant']}/s{self.spec['seed']}] step {step + 1}/{total} "
                    f"loss {metrics['loss']:+.4f}{reward} ({metrics['step_seconds']:.2f}s; {1 / rate:.2f} steps/s, "
                    f"ETA {eta(rate * (total - step - 1))})"
                )
        finally:
            self.grader.close()
            tracker.close()
        self.export("final")
        summary = {
            "spec": self.spec,
            "steps": total,
            "resumed_from": start if resumed else None,
            "continued": continued,
            "seconds": time.perf_counter() - t0,
            "device": str(self.device),
        }
        if self.device.type == "cuda":  # what the calibration pilot reports (scout.cost)
            summary["peak_gpu_gb"] = torch.cuda.max_memory_allocated(self.device) / 1e9
        (self.out / "train.json").write_text(json.dumps(summary, indent=1))
        runs.mark_complete(self.out, summary)
        return summary


def eta(seconds: float) -> str:
    """Seconds as m:ss (or h:mm:ss)."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def train(spec: dict, out_dir: str | Path, device: str, log=print) -> dict:
    """A job's training on ``device`` (the config's, or the backend's default: the CPU, where the
    toy world's recorded digits were computed)."""
    return Trainer(spec, out_dir, device).run(log=log)
