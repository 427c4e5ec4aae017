"""Every training method as a composition of parts; each backend has a registry of its forms of
each part's kinds (``scout.embedded.parts``, ``scout.verl.parts``).

Adding a method (docs/extending.md): a row here; if it reshapes OPD's per-token advantage,
the pure function that does it in ``scout.algorithms`` (named by ``advantage``), which both
backends apply; and its hyperparameters, if any, under ``methods.<id>`` in the config and schema.
A cell's spec carries the config sections of its method's parts and its own section.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scout.schema import default

# A LoRA teacher's adapters by default (the schema's): every linear map of a Qwen3 layer
LORA_TARGETS = tuple(default("methods.scout.teacher_lora.target_modules"))

# The parts a method is built from, and the kinds of each that the backends implement: a method
# naming another kind is refused when the table loads, with the known ones
PARTS = {
    "student_loss": ("opd", "optr", "grpo"),  # K1 policy gradient, trust-region K1, outcome reward
    "rollout": ("student", "relay"),  # the student's own, or the teacher taking over at reflection points
    "budget": ("full", "esr", "prune"),  # every token, the first N, an adaptive budget with weights
    "teacher_phase": ("none", "scout", "prefix0"),  # frozen teacher, SCOUT's, SCOUT with k = 0
}

def form(registry: dict[str, dict], part: str, kind: str, backend: str):
    """A backend's form of one kind of part, from its registry (part -> kind -> form); a kind the
    backend lacks is named with the ones it has."""
    forms = registry[part]
    if kind not in forms:
        raise ValueError(f"the {backend} backend has no {part} {kind!r}; it has: {', '.join(forms)}")
    return forms[kind]


# The config section (``methods.<name>``) each part reads
PART_SECTIONS = {
    ("budget", "esr"): "esr",
    ("budget", "prune"): "prune_opd",
    ("rollout", "relay"): "relay_opd",
    ("student_loss", "optr"): "optr",
}


@dataclass(frozen=True)
class Method:
    id: str
    student_loss: str  # "opd" (K1 policy gradient), "optr" (trust-region K1), "grpo" (outcome reward)
    rollout: str = "student"  # "student" | "relay" (teacher takes over at reflection points)
    budget: str = "full"  # "full" | "esr" (first N tokens) | "prune" (adaptive budget, weights)
    teacher_phase: str = "none"  # "none" | "scout" | "prefix0" (SCOUT with k = 0)
    label: str = ""
    # a function of scout.algorithms, f(advantages, mask, cfg) -> advantages, applied to the
    # distillation advantage per token (after Prune-OPD's or OPTR's weights); cfg is methods.<id>
    advantage: str = ""

    def __post_init__(self):
        for part, kinds in PARTS.items():
            if getattr(self, part) not in kinds:
                raise ValueError(f"method {self.id!r}: unknown {part} {getattr(self, part)!r}; the known ones: "
                                 f"{', '.join(kinds)} (scout.methods.PARTS)")  # fmt: skip

    @property
    def needs_teacher(self) -> bool:
        return self.student_loss != "grpo"

    @property
    def trains_teacher(self) -> bool:
        return self.teacher_phase != "none"

    @property
    def scores_with_frozen_teacher(self) -> bool:
        """Its teacher only scores the student's tokens, so a teacher server can stand in for it
        (SCOUT's teacher trains; Relay-OPD's writes)."""
        return self.needs_teacher and not self.trains_teacher and self.rollout != "relay"

    def sections(self, configured: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """Config sections of this method's parts, and its own (``methods.<id>``) where configured."""
        out = [sec for (part, value), sec in PART_SECTIONS.items() if getattr(self, part) == value]
        out += ["scout"] if self.trains_teacher else []
        return out + ([self.id] if self.id in configured else [])

    def advantage_fn(self) -> Callable | None:
        if not self.advantage:
            return None
        from scout import algorithms  # torch: config reads the method table without it

        fn = getattr(algorithms, self.advantage, None)
        if not callable(fn):
            raise ValueError(f"method {self.id!r}: scout.algorithms has no function {self.advantage!r}")
        return fn

    @property
    def length_free(self) -> bool:
        """Its steps do not depend on the run's length, so a longer run may continue a shorter one
        (SCOUT's prefix curriculum spans the run; the prefix-0 control has none)."""
        return self.teacher_phase != "scout"

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
