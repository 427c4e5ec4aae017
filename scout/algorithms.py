"""The paper's algorithms as small pure functions over tensors.

Every training backend (the embedded one here, verl on a cluster) calls these, so the numerics
of a method live in exactly one place and are tested against hand-worked values.

Shapes: ``[B, T]`` tensors hold one value per response token; ``mask`` is 1 on real response
tokens and 0 on padding (or on tokens a method excludes from the loss).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from scout.io import JobStopped

# --------------------------------------------------------------------------------------------
# Shared policy-gradient pieces
# --------------------------------------------------------------------------------------------


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean over the whole batch: the spec's loss aggregation and verl's default (the paper
    writes GRPO's as a mean of per-sample means; docs/cluster.md)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def clipped_pg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate, -mean_t min(r A, clip(r) A); returns (loss, clip fraction)."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask)
    clipfrac = masked_mean((clipped < unclipped).to(logp.dtype), mask)
    return loss, clipfrac


def k1_advantage(teacher_logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """OPD's per-token advantage sg[log pi_T - log pi_old] (single-sample reverse-KL estimator)."""
    return (teacher_logp - old_logp).detach()


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """Group-normalised outcome advantages; consecutive ``group_size`` samples form a group.

    The std is the unbiased one (as verl's GRPO estimator uses); a group of one gets advantage 0.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    groups = rewards.to(torch.float32).view(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    if group_size == 1:
        return torch.zeros_like(groups).view(-1)
    std = groups.std(dim=1, keepdim=True)
    return ((groups - mean) / (std + eps)).view(-1)


def grpo_advantages_by_id(rewards: torch.Tensor, ids: Sequence, eps: float = 1e-6) -> torch.Tensor:
    """``grpo_advantages`` for groups given by an id per sample, in any order and of any size
    (verl pads a batch with samples that share one id); a group of one gets advantage 0."""
    rewards = rewards.to(torch.float32)
    out = torch.zeros_like(rewards)
    members: dict = {}
    for i, g in enumerate(ids):
        members.setdefault(g, []).append(i)
    for idx in members.values():
        if len(idx) > 1:
            r = rewards[idx]
            out[idx] = (r - r.mean()) / (r.std() + eps)
    return out


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) with the low-variance k3 estimator (verl's ``low_var_kl``)."""
    log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at every position."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


# --------------------------------------------------------------------------------------------
# SCOUT: prefix curriculum and teacher-phase masks
# --------------------------------------------------------------------------------------------


def prefix_ratio(step: int, total_steps: int, start: float, end: float) -> float:
    """Linear curriculum over training: ``start`` at step 0, ``end`` at the last step."""
    if total_steps <= 1:
        return start
    frac = min(max(step / (total_steps - 1), 0.0), 1.0)
    return start + (end - start) * frac


def split_points(lengths: torch.Tensor, ratio: float) -> torch.Tensor:
    """k = floor(ratio * |y|) per trajectory; ratio 0 gives the bare prompt (the control)."""
    return torch.floor(lengths.to(torch.float64) * ratio + 1e-9).to(torch.long)


def reasoning_length(pieces: Sequence[str], marker: str | None) -> int:
    """Tokens of a response before the line that states its final answer: the line in which
    ``marker`` (say ``\\boxed``) first appears. All of them when there is no marker or no answer.

    ``pieces`` are the response's tokens as text. Prefixes cut within this length end inside the
    reasoning, as they do in long traces, where the answer is a sliver at the end."""
    text = "".join(pieces)
    at = text.find(marker) if marker else -1
    if at < 0:
        return len(pieces)
    line = text.rfind("\n", 0, at) + 1
    start = 0
    for i, piece in enumerate(pieces):
        if start >= line:
            return i
        start += len(piece)
    return len(pieces)


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per GRPO group (consecutive ``group_size`` rewards): whether its rewards differ, i.e. whether
    it gives the policy gradient any signal."""
    groups = rewards.view(-1, group_size)
    return groups.max(dim=1).values > groups.min(dim=1).values


def continuation_mask(prefix_lengths: torch.Tensor, total_lengths: torch.Tensor, width: int) -> torch.Tensor:
    """1 on teacher-generated positions [k, |y|) of each response, 0 on the student prefix."""
    pos = torch.arange(width).unsqueeze(0)
    return ((pos >= prefix_lengths.unsqueeze(1)) & (pos < total_lengths.unsqueeze(1))).to(torch.float32)


# --------------------------------------------------------------------------------------------
# Prune-OPD
# --------------------------------------------------------------------------------------------


def topk_overlap(student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int) -> torch.Tensor:
    """|topk_S ∩ topk_T| / k at every position."""
    k = min(k, student_logits.shape[-1])
    return topk_overlap_ids(student_logits, teacher_logits.topk(k, dim=-1).indices)


def topk_overlap_ids(student_logits: torch.Tensor, teacher_top: torch.Tensor) -> torch.Tensor:
    """``topk_overlap`` from the teacher's top-k token ids [B, T, k] (what a teacher server returns)."""
    k = teacher_top.shape[-1]
    s_top = student_logits.topk(k, dim=-1).indices
    hits = (s_top.unsqueeze(-1) == teacher_top.unsqueeze(-2)).any(dim=-1).sum(dim=-1)
    return hits.to(torch.float32) / k


def prune_weights(overlap: torch.Tensor, mask: torch.Tensor, tau: float, w_drop: float) -> torch.Tensor:
    """w_t = clamp(1 - w_drop * #(bad positions up to t), 0, 1), bad meaning overlap < tau."""
    bad = ((overlap < tau) & (mask > 0)).to(torch.float32)
    return torch.clamp(1.0 - w_drop * torch.cumsum(bad, dim=1), 0.0, 1.0) * mask


@dataclass(frozen=True)
class BudgetState:
    """Prune-OPD's adaptive response budget L and its count of consecutive misses."""

    length: int
    misses: int = 0


def budget_hits(effective_lengths: Iterable[int], length: int, margin: int) -> int:
    """How many samples use the budget up: effective length (tokens with w_t > 0) >= L - margin."""
    return sum(1 for n in effective_lengths if n >= length - margin)


def update_budget(
    state: BudgetState,
    hits: float,
    samples: float,
    *,
    hit_fraction: float,
    step: int,
    min_length: int,
    max_length: int,
    patience: int,
) -> BudgetState:
    """Grow L when at least ``hit_fraction`` of the samples use it up; shrink it after ``patience``
    misses in a row. ``hits`` and ``samples`` may share any scale (verl reports both averaged over
    data-parallel ranks)."""
    if samples > 0 and hits / samples >= hit_fraction:
        return BudgetState(min(state.length + step, max_length), 0)
    misses = state.misses + 1
    if misses >= patience:
        return BudgetState(max(state.length - step, min_length), 0)
    return BudgetState(state.length, misses)


def budget_rule(prune_cfg: dict) -> dict:
    """``update_budget``'s keyword arguments from a ``method_cfg['prune_opd']`` section."""
    b = prune_cfg["budget"]
    return dict(
        hit_fraction=prune_cfg["hit_fraction"],
        step=b["step"],
        min_length=b["min"],
        max_length=b["max"],
        patience=b["patience"],
    )


# --------------------------------------------------------------------------------------------
# Relay-OPD
# --------------------------------------------------------------------------------------------

REFLECTION_WORDS = ("Wait", "But", "Hmm", "Actually", "However", "Alternatively", "Hold")


def reflection_variants(words: tuple[str, ...] = REFLECTION_WORDS) -> set[str]:
    """The trigger vocabulary with case and leading-space variants."""
    out: set[str] = set()
    for w in words:
        for v in (w, w.lower(), w.upper(), w.capitalize()):
            out.update({v, " " + v})
    return out


@dataclass(frozen=True)
class RelayConfig:
    """Relay-OPD's limits (SPEC defaults): teacher legs per rollout, paragraphs and tokens per
    leg, and the student's top-k a trigger must miss."""

    max_legs: int = 2
    max_paragraphs: int = 3
    max_leg_tokens: int = 256
    student_topk: int = 5


def relay_trigger(
    teacher_argmax: torch.Tensor,
    student_token: torch.Tensor,
    student_topk: torch.Tensor,
    is_reflection: torch.Tensor,
) -> torch.Tensor:
    """Teacher takes over where its argmax is a reflection token the student neither sampled
    nor ranks in its top-k (the paper: top-5). ``is_reflection`` is a bool table over the vocab."""
    in_topk = (student_topk == teacher_argmax.unsqueeze(-1)).any(dim=-1)
    return is_reflection[teacher_argmax] & (teacher_argmax != student_token) & ~in_topk


def relay_leg_done(paragraphs, leg_tokens, max_paragraphs: int = 3, max_tokens: int = 256):
    """A teacher leg ends after ``max_paragraphs`` blank-line breaks or ``max_tokens`` tokens (ints,
    or tensors of them: one flag per row)."""
    return (paragraphs >= max_paragraphs) | (leg_tokens >= max_tokens)


# --------------------------------------------------------------------------------------------
# OPTR (trust-region OPD)
# --------------------------------------------------------------------------------------------


def optr_trust(teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """P_trust = min(pi_T(y_t) / pi_S(y_t), 1)."""
    return torch.exp(torch.clamp(teacher_logp - student_logp, max=0.0))


def optr_mask(p_trust: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Tokens inside the trust region (P_trust >= threshold) keep the K1 OPD term."""
    return mask * (p_trust >= threshold).to(mask.dtype)


def topk_forward_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int) -> torch.Tensor:
    """sum over the teacher's top-k tokens of p_T (log p_T - log p_S), per position."""
    t_logp = torch.log_softmax(teacher_logits.float(), dim=-1)
    top = t_logp.topk(min(k, t_logp.shape[-1]), dim=-1)
    return topk_forward_kl_from(student_logits, top.indices, top.values)


def topk_forward_kl_from(student_logits: torch.Tensor, teacher_top: torch.Tensor, teacher_top_logp: torch.Tensor) -> torch.Tensor:
    """``topk_forward_kl`` from the teacher's top-k token ids and their log-probs [B, T, k]."""
    s_logp = torch.log_softmax(student_logits.float(), dim=-1)
    s_at = s_logp.gather(-1, teacher_top)
    return (teacher_top_logp.exp() * (teacher_top_logp - s_at)).sum(dim=-1)


# --------------------------------------------------------------------------------------------
# Update-interval sweep
# --------------------------------------------------------------------------------------------


def scaled_teacher_lr(base_lr: float, interval: int, reference_interval: int = 10) -> float:
    """The paper scales the teacher LR by f/10 for f below its f = 10 and keeps it above (the toy
    world's reference is its own main f)."""
    return base_lr * min(1.0, interval / reference_interval)


def is_teacher_step(step: int, interval: int) -> bool:
    """The teacher updates after every ``interval``-th student step (1-based count)."""
    return interval > 0 and (step + 1) % interval == 0


def sem(values: list[float]) -> float:
    """Standard error of the mean over repeats: sd (ddof=1) / sqrt(k); 0 for one repeat."""
    k = len(values)
    if k < 2:
        return 0.0
    mean = sum(values) / k
    var = sum((v - mean) ** 2 for v in values) / (k - 1)
    return math.sqrt(var / k)


# The teacher self-test: the engine's log-probs of a few sampled responses against a reference
# forward of the same weights, measured against the per-token signal the loss is made of.
SELF_TEST_RESPONSES = 4  # sampled responses a self-test scores twice
SELF_TEST_RATIO = 0.1  # the engine may disagree by at most 10% of the per-token signal...
SELF_TEST_FLOOR = 1e-3  # ...or 0.001 nats, where teacher and student already agree


class TeacherSelfTestError(JobStopped):
    """The teacher's engine disagrees with a reference forward of its own weights by more than the limit."""


def teacher_self_test(
    engine_logp: torch.Tensor, reference_logp: torch.Tensor, student_logp: torch.Tensor, mask: torch.Tensor,
    ratio: float = SELF_TEST_RATIO, floor: float = SELF_TEST_FLOOR, reference_sampled: torch.Tensor | None = None,
) -> dict[str, float]:  # fmt: skip
    """Mean and largest |engine - reference| log-prob over the response tokens, beside the signal
    (the mean |reference - student|: the per-token gap K1 distils) and the limit, max(ratio x
    signal, floor). A disagreement above the limit means the loss would carry engine error of the
    size of its own signal. Engine and reference may be [B, T, K] (the engine's top-k, and the
    reference's log-probs of the same tokens); the signal then needs ``reference_sampled`` [B, T],
    the reference's log-probs of the sampled tokens."""
    m = mask.bool()
    gap = (engine_logp - reference_logp).abs()[m]
    sampled = reference_logp if reference_sampled is None else reference_sampled
    signal = float((sampled - student_logp).abs()[m].mean()) if m.any() else 0.0
    return {
        "teacher_selftest_diff": float(gap.mean()) if m.any() else 0.0,
        "teacher_selftest_max_diff": float(gap.max()) if m.any() else 0.0,
        "teacher_selftest_signal": signal,
        "teacher_selftest_limit": max(ratio * signal, floor),
    }


def check_self_test(metrics: dict[str, float], where: str) -> None:
    """Stop on a failed self-test, naming the disagreement and the limit it broke."""
    diff, limit = metrics["teacher_selftest_diff"], metrics["teacher_selftest_limit"]
    if diff > limit:
        raise TeacherSelfTestError(
            f"teacher self-test failed {where}: the engine's log-probs differ from a reference forward of the same "
            f"weights by {diff:.4g} nats a token (largest {metrics['teacher_selftest_max_diff']:.4g}), above the limit "
            f"{limit:.4g} ({SELF_TEST_RATIO:g} of the per-token signal {metrics['teacher_selftest_signal']:.4g}, or "
            f"{SELF_TEST_FLOOR:g}): the distillation loss would be made of engine error"
        )
