"""The embedded backend's form of each method part, found by its kind (``scout.methods.PARTS``).

Every method's step runs in one order (``scout.embedded.trainer``): the rollout under the budget's
response length, the teacher's scores, K1 advantages, the budget's weights, the student loss's
reweighting, one update, and the teacher phase where it is due. What tells methods apart is here,
one class per kind of part; a part of a new kind is a class here, its verl form in
``scout.verl.parts`` and its kind in ``scout.methods.PARTS``.
"""

from __future__ import annotations

import torch

from scout import algorithms as alg
from scout.embedded import sampling
from scout.methods import form

# -- the student loss: what it makes of the teacher's per-token advantages ----------------------------


class Opd:
    """OPD: the K1 policy gradient toward the teacher's log-probs, as scored."""

    distils = True  # advantages from the teacher; GRPO's come from the rewards instead
    topk = 0  # how many of the teacher's most likely tokens per position it reads

    def __init__(self, spec: dict):
        self.spec = spec

    def reweigh(self, adv, t_logp, old_logp, mask, logits, t_logits, top, metrics) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, an extra loss term)."""
        return adv, torch.zeros(())


class Optr(Opd):
    """OPTR: K1 on the tokens the teacher trusts; the others masked, or pulled by a top-k forward KL."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        self.cfg = spec["method_cfg"]["optr"]
        self.topk = self.cfg["topk"] if self.cfg["outlier"] == "topk_fkl" else 0

    def reweigh(self, adv, t_logp, old_logp, mask, logits, t_logits, top, metrics):
        oc = self.cfg
        trusted = alg.optr_mask(alg.optr_trust(t_logp, old_logp), mask, oc["threshold"])
        metrics["optr_trusted_frac"] = float(trusted.sum() / mask.sum().clamp_min(1))
        extra = torch.zeros(())
        if oc["outlier"] == "topk_fkl":
            if top is None:
                fkl = alg.topk_forward_kl(logits, t_logits, oc["topk"])
            else:
                fkl = alg.topk_forward_kl_from(logits, top[0][..., : oc["topk"]], top[1][..., : oc["topk"]])
            extra = (fkl * (mask - trusted)).sum() / mask.sum().clamp_min(1)
        return adv * trusted, extra


class Grpo(Opd):
    """GRPO: group-normalised outcome rewards, no teacher."""

    distils = False


STUDENT_LOSSES = {"opd": Opd, "optr": Optr, "grpo": Grpo}


# -- the response budget: how long a rollout may be, and what each token weighs ----------------------


class Budget:
    """Every token, up to the spec's response length."""

    topk = 0

    def __init__(self, spec: dict):
        self.spec = spec

    def start(self) -> alg.BudgetState | None:
        """The state a run starts with (a checkpoint keeps it in ``Progress.budget``)."""
        return None

    def length(self, state: alg.BudgetState | None) -> int:
        return self.spec["max_response_length"]

    def weigh(self, state, adv, mask, s_logits, t_logits, top, metrics) -> tuple[torch.Tensor, alg.BudgetState | None]:
        """(the advantages weighed, the state after this step)."""
        return adv, state


class Esr(Budget):
    """ESR: the first N tokens of each rollout."""

    def length(self, state) -> int:
        return self.spec["method_cfg"]["esr"]["max_tokens"]


class Prune(Budget):
    """Prune-OPD: tokens weighed by the cumulative top-k overlap with the teacher, and a response
    budget L that moves with how many samples use it up."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        self.cfg = spec["method_cfg"]["prune_opd"]
        self.topk = self.cfg["topk"]

    def start(self) -> alg.BudgetState:
        return alg.BudgetState(self.cfg["budget"]["initial"])

    def length(self, state) -> int:
        return state.length

    def weigh(self, state, adv, mask, s_logits, t_logits, top, metrics):
        pc = self.cfg
        if top is None:
            overlap = alg.topk_overlap(s_logits, t_logits, pc["topk"])
        else:
            overlap = alg.topk_overlap_ids(s_logits, top[0])
        w = alg.prune_weights(overlap, mask, pc["tau"], pc["w_drop"])
        effective = (w > 0).sum(dim=1).tolist()
        hits = alg.budget_hits(effective, state.length, pc["budget"]["margin"])
        state = alg.update_budget(state, hits, len(effective), **alg.budget_rule(pc))
        metrics["prune_overlap"] = float(alg.masked_mean(overlap, mask))
        return adv * (w + pc["w_base"]) * mask, state


BUDGETS = {"full": Budget, "esr": Esr, "prune": Prune}


# -- the rollout: who writes the response --------------------------------------------------------------


class StudentRollout:
    """The student's own samples."""

    def __init__(self, trainer):
        self.t = trainer

    def sample(self, prompts: list[list[int]], length: int, g: torch.Generator) -> tuple[list[list[int]], dict]:
        t = self.t
        return sampling.sample(t.models.student, prompts, t.sampling(length), t.eos, t.pad, g), {}


class Relay(StudentRollout):
    """Relay-OPD: the teacher takes over at the student's reflection points."""

    def __init__(self, trainer):
        super().__init__(trainer)
        size = trainer.models.student.get_output_embeddings().weight.shape[0]
        self.reflect, self.blank = sampling.vocab_flags(trainer.tok, size)
        self.cfg = alg.RelayConfig(**trainer.spec["method_cfg"]["relay_opd"])

    def sample(self, prompts, length, g):
        t = self.t
        relay = sampling.relay_sample(
            t.models.student, t.models.teacher, prompts, t.sampling(length), self.cfg,
            self.reflect, self.blank, t.eos, t.pad, g,
        )  # fmt: skip
        owned = sum(map(sum, relay.teacher_owned))
        total = max(1, sum(map(len, relay.responses)))
        return relay.responses, {"relay_triggers": relay.triggers, "teacher_token_frac": owned / total}


ROLLOUTS = {"student": StudentRollout, "relay": Relay}


# -- the teacher phase: when the teacher trains ---------------------------------------------------------


class FrozenTeacher:
    """The teacher as given, never trained."""

    def __init__(self, spec: dict):
        self.spec = spec

    def due(self, step: int) -> bool:
        return False


class ScoutPhase(FrozenTeacher):
    """SCOUT's teacher phase every ``interval`` student steps (the prefix-0 control: the same
    phase on bare prompts, ``prefix_zero`` in its section)."""

    def due(self, step: int) -> bool:
        return alg.is_teacher_step(step, self.spec["method_cfg"]["scout"]["interval"])


TEACHER_PHASES = {"none": FrozenTeacher, "scout": ScoutPhase, "prefix0": ScoutPhase}

EMBEDDED_PARTS = {"student_loss": STUDENT_LOSSES, "rollout": ROLLOUTS, "budget": BUDGETS, "teacher_phase": TEACHER_PHASES}


def part(method, name: str):
    """The embedded form of a method's part ``name``: its class."""
    return form(EMBEDDED_PARTS, name, getattr(method, name), "embedded")
