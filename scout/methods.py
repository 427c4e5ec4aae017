"""Every training method as a composition of four parts; backends read this table.

Adding a method: add a row here (and, if it needs a new part, implement that part as a pure
function in ``scout.algorithms`` and wire it into the backends' step).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    id: str
    student_loss: str  # "opd" (K1 policy gradient), "optr" (trust-region K1), "grpo" (outcome reward)
    rollout: str = "student"  # "student" | "relay" (teacher takes over at reflection points)
    budget: str = "full"  # "full" | "esr" (first N tokens) | "prune" (adaptive budget, weights)
    teacher_phase: str = "none"  # "none" | "scout" | "prefix0" (SCOUT with k = 0)
    label: str = ""

    @property
    def needs_teacher(self) -> bool:
        return self.student_loss != "grpo"

    @property
    def trains_teacher(self) -> bool:
        return self.teacher_phase != "none"

    @property
    def opd_based(self) -> bool:
        """Competes for best/second-best in the tables (GRPO is the non-distillation reference)."""
        return self.student_loss != "grpo"


METHODS: dict[str, Method] = {
    m.id: m
    for m in [
        Method("grpo", "grpo", label="GRPO"),
        Method("opd", "opd", label="OPD"),
        Method("esr", "opd", budget="esr", label="ESR"),
        Method("prune_opd", "opd", budget="prune", label="Prune-OPD"),
        Method("relay_opd", "opd", rollout="relay", label="Relay-OPD"),
        Method("scout", "opd", teacher_phase="scout", label="SCOUT"),
        Method("opd_teacher_grpo", "opd", teacher_phase="prefix0", label="OPD + Teacher GRPO"),
        Method("optr", "optr", label="OPTR"),
        Method("optr_scout", "optr", teacher_phase="scout", label="OPTR + SCOUT"),
    ]
}
