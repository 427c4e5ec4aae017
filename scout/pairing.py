"""Does a teacher read the student's tokens as the student meant them? The check of a teacher-student
pair that runs before any GPU hour is spent (``scout preflight``).

Distillation scores the student's token ids with the teacher: the teacher's engine gets ids, not
text (verl's teacher engine starts without a tokenizer; the embedded backend passes ids), in the
student's chat rendering. So a pair is refused when an id the student can emit is another token to
the teacher (the loss would compare log-probs of different tokens), or when the same ids decode to
different text. Where the two chat templates render a prompt differently, the pair passes, and the
check says what differs: the teacher scores every prompt in a context its own template never
produces, which has made OPD reproductions fail before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

WINDOW = 8  # tokens shown on each side of a difference
ROLES = ("eos_token", "pad_token", "bos_token")


@dataclass
class Checklist:
    """Named checks, a line each, and what refuses the thing checked: a teacher-student pair here,
    a training cell in verl's preflight (``scout.verl.preflight.Row``)."""

    name: str
    checks: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def ok(self, name: str, text: str) -> None:
        self.checks[name] = text

    def fail(self, name: str, text: str) -> None:
        self.checks[name] = f"FAIL: {text}"
        self.problems.append(f"{name}: {text}")

    @property
    def verdict(self) -> str:
        return "refused" if self.problems else "passes"


def first_unmapped(student_vocab: Mapping[str, int], teacher_vocab: Mapping[str, int]) -> tuple[int, str, str | None] | None:
    """The lowest id the student can emit that the teacher reads as another token, or lacks:
    (id, the student's token, the teacher's token or None). None when every id maps."""
    teacher_by_id = {i: t for t, i in teacher_vocab.items()}
    for token, i in sorted(student_vocab.items(), key=lambda kv: kv[1]):
        if teacher_by_id.get(i) != token:
            return i, token, teacher_by_id.get(i)
    return None


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (the shorter one's length where one is
    the other's start); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def rendered(tokenizer, messages: list[dict], chat: dict) -> list[int]:
    """A prompt's ids as a model's own chat template renders it, ready for the answer."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **chat)
    return list(tokenizer.encode(text, add_special_tokens=False))


def _window(tokenizer, ids: Sequence[int], at: int) -> str:
    return repr(tokenizer.decode(list(ids[max(0, at - WINDOW) : at + WINDOW])))


def check_pair(
    name: str, student, teacher, conversations: list[list[dict]], student_chat: dict | None = None,
    teacher_chat: dict | None = None,
) -> Checklist:  # fmt: skip
    """Check a pair on ``conversations`` (a few of the training prompts, as chat messages):
    vocabulary and special tokens, the same ids decoding to the same text, and the chat templates."""
    out = Checklist(name)
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    miss = first_unmapped(s_vocab, t_vocab)
    if miss:
        i, s_tok, t_tok = miss
        other = "has no such id" if t_tok is None else f"reads it as {t_tok!r}"
        out.fail("vocabulary", f"token id {i} is {s_tok!r} to the student; the teacher {other}")
    else:
        extra = len(t_vocab) - len(s_vocab)
        out.ok("vocabulary", f"all {len(s_vocab)} student ids are the same tokens to the teacher"
               + (f" ({extra} more of its own)" if extra else ""))  # fmt: skip
    roles = [f"{r.removesuffix('_token')} {getattr(student, r)!r} vs {getattr(teacher, r)!r}"
             for r in ROLES if getattr(student, r, None) != getattr(teacher, r, None)]  # fmt: skip
    out.ok("special tokens", "same roles" if not roles else "roles differ (student vs teacher): " + "; ".join(roles))
    if miss:
        out.ok("template", "not compared: the ids do not map")
        return out
    prompts = [rendered(student, c, student_chat or {}) for c in conversations]
    bad = next((p for p in prompts if teacher.decode(p) != student.decode(p)), None)
    if bad is not None:
        text, other = student.decode(bad), teacher.decode(bad)
        at = first_difference(list(text), list(other)) or 0
        out.fail("decoding", f"the student's rendered prompt decodes differently from character {at}: "
                 f"{text[at:at + 40]!r} vs {other[at:at + 40]!r}")  # fmt: skip
    else:
        out.ok("decoding", f"{len(prompts)} rendered prompts decode to the same text")
    for j, (conv, ids) in enumerate(zip(conversations, prompts, strict=True)):
        own = rendered(teacher, conv, teacher_chat or {})
        at = first_difference(ids, own)
        if at is not None:
            out.ok("template", f"the teacher scores the student's rendering; its own template differs at token {at} "
                   f"of prompt {j + 1}: the student's {_window(student, ids, at)}, the teacher's "
                   f"{_window(teacher, own, at)}")  # fmt: skip
            break
    else:
        out.ok("template", f"the same rendering of {len(conversations)} prompts")
    return out
