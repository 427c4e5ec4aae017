"""Every algorithm function against values worked out by hand."""

import math

import pytest
import torch

from scout import algorithms as alg


def t(x):
    return torch.tensor(x, dtype=torch.float32)


def test_masked_mean_is_token_mean_over_batch():
    # (1 + 2 + 4) / 3 tokens; the padded 100 is ignored
    assert alg.masked_mean(t([[1, 2], [4, 100]]), t([[1, 1], [1, 0]])).item() == pytest.approx(7 / 3)


def test_k1_advantage_is_detached_log_ratio():
    s = t([-1.0, -2.0]).requires_grad_()
    adv = alg.k1_advantage(t([-0.5, -3.0]), s)
    assert adv.tolist() == pytest.approx([0.5, -1.0])
    assert not adv.requires_grad


def test_clipped_pg_loss_by_hand():
    # token 1: r = e^0.5 = 1.6487, A = +1 -> min(1.6487, 1.2) = 1.2
    # token 2: r = e^-0.5 = 0.6065, A = -1 -> min(-0.6065, -0.8) = -0.8
    # token 3: r = 1, A = 2 -> 2 ; loss = -(1.2 - 0.8 + 2) / 3 = -0.8
    logp = t([[0.5, -0.5, 0.0]])
    old = t([[0.0, 0.0, 0.0]])
    loss, clipfrac = alg.clipped_pg_loss(logp, old, t([[1.0, -1.0, 2.0]]), t([[1, 1, 1]]), clip=0.2)
    assert loss.item() == pytest.approx(-0.8, abs=1e-5)
    assert clipfrac.item() == pytest.approx(2 / 3)


def test_clipped_pg_loss_gradient_at_ratio_one_is_minus_advantage():
    logp = t([[0.0, 0.0]]).requires_grad_()
    loss, _ = alg.clipped_pg_loss(logp, logp.detach(), t([[3.0, -1.0]]), t([[1, 1]]))
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.5, 0.5])


def test_grpo_advantages_by_hand():
    # group [1, 0, 1, 0]: mean .5, unbiased std sqrt(1/3)=0.57735 -> +-0.866
    # group [1, 1, 1, 1]: std 0 -> all zero
    adv = alg.grpo_advantages(t([1, 0, 1, 0, 1, 1, 1, 1]), group_size=4)
    assert adv[:4].tolist() == pytest.approx([0.8660, -0.8660, 0.8660, -0.8660], abs=1e-3)
    assert adv[4:].tolist() == pytest.approx([0, 0, 0, 0])


def test_grpo_advantages_by_id_by_hand():
    # a: samples 0, 2, 3 = (1, 1, 0): mean 2/3, sd sqrt(1/3) -> 0.57735, 0.57735, -1.15470
    # b: samples 1, 5 = (0, 1): mean 1/2, sd sqrt(1/2) -> -0.70711, 0.70711; c: one sample -> 0
    adv = alg.grpo_advantages_by_id(t([1, 0, 1, 0, 0, 1]), ["a", "b", "a", "a", "c", "b"])
    assert adv.tolist() == pytest.approx([0.57735, -0.70711, 0.57735, -1.15470, 0.0, 0.70711], abs=1e-4)
    # consecutive equal groups: the same as grpo_advantages
    rewards = t([1, 0, 1, 0, 1, 1, 1, 1])
    same = alg.grpo_advantages_by_id(rewards, [0, 0, 0, 0, 1, 1, 1, 1])
    assert torch.allclose(same, alg.grpo_advantages(rewards, 4))


def test_grpo_advantages_rejects_ragged_groups():
    with pytest.raises(ValueError):
        alg.grpo_advantages(t([1, 0, 1]), group_size=2)


def test_kl_penalty_k3_by_hand():
    # log(ref/pi) = -1: e^-1 - (-1) - 1 = 0.36788 ; equal policies give 0
    kl = alg.kl_penalty(t([0.0, -0.3]), t([-1.0, -0.3]))
    assert kl.tolist() == pytest.approx([math.exp(-1), 0.0], abs=1e-6)


def test_prefix_ratio_linear_schedule():
    assert alg.prefix_ratio(0, 11, 0.1, 0.9) == pytest.approx(0.1)
    assert alg.prefix_ratio(5, 11, 0.1, 0.9) == pytest.approx(0.5)
    assert alg.prefix_ratio(10, 11, 0.1, 0.9) == pytest.approx(0.9)
    assert alg.prefix_ratio(0, 1, 0.2, 0.9) == pytest.approx(0.2)


def test_reasoning_length_stops_before_the_answer_line():
    pieces = ["3", "+", "4", "=", "7", "\n\n", "The", " answer", " is", " ", "\\boxed", "{", "7", "}", "."]
    assert alg.reasoning_length(pieces, "\\boxed") == 6  # "3+4=7\n\n"
    assert alg.reasoning_length(pieces, None) == 15
    assert alg.reasoning_length(pieces[:6], "\\boxed") == 6  # no answer yet: all of it
    code = ["```python\n", "def", " f(x):\n", "    x += 3\n", "    ", "return", " x\n", "```"]
    assert alg.reasoning_length(code, "return") == 4  # the line of "return" starts at the indent
    assert alg.reasoning_length(["\\boxed", "{", "1", "}"], "\\boxed") == 0


def test_informative_groups_by_hand():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    assert alg.informative_groups(rewards, 3).tolist() == [True, True, False]


def test_split_points_floor():
    # floor(0.5 * [10, 7, 1, 0]) = [5, 3, 0, 0]; ratio 0 is the prefix-0 control
    assert alg.split_points(torch.tensor([10, 7, 1, 0]), 0.5).tolist() == [5, 3, 0, 0]
    assert alg.split_points(torch.tensor([10, 7]), 0.0).tolist() == [0, 0]
    assert alg.split_points(torch.tensor([10]), 0.3).tolist() == [3]


def test_continuation_mask_covers_only_teacher_tokens():
    m = alg.continuation_mask(torch.tensor([2, 0]), torch.tensor([4, 3]), width=5)
    assert m.tolist() == [[0, 0, 1, 1, 0], [1, 1, 1, 0, 0]]


def test_topk_overlap_by_hand():
    s = t([[[5, 4, 3, 0, 0]]])  # top-3 = {0, 1, 2}
    te = t([[[0, 9, 8, 7, 0]]])  # top-3 = {1, 2, 3}
    assert alg.topk_overlap(s, te, 3).item() == pytest.approx(2 / 3)


def test_prune_weights_by_hand():
    # bad where overlap < 0.7: positions 1 and 3 -> cumulative [0,1,1,2,2]
    overlap = t([[0.9, 0.5, 0.8, 0.1, 1.0]])
    w = alg.prune_weights(overlap, t([[1, 1, 1, 1, 1]]), tau=0.7, w_drop=0.4)
    assert w.tolist()[0] == pytest.approx([1.0, 0.6, 0.6, 0.2, 0.2])
    # clamps at 0 and zeroes padding
    w = alg.prune_weights(t([[0.0, 0.0, 0.0]]), t([[1, 1, 0]]), tau=0.7, w_drop=0.6)
    assert w.tolist()[0] == pytest.approx([0.4, 0.0, 0.0])


def test_budget_hits_count_samples_within_the_margin():
    # L = 1024, margin 100: 924 and above use the budget up
    assert alg.budget_hits([924, 923, 1024, 10], length=1024, margin=100) == 2
    assert alg.budget_hits([], length=1024, margin=100) == 0


def test_budget_grows_when_enough_samples_reach_it():
    s = alg.BudgetState(1024)
    kw = dict(hit_fraction=0.1, step=100, min_length=1024, max_length=1200, patience=3)
    # 1 of 10 samples reaches 1024 - 100 = 924 -> fraction 0.1 >= h -> grow
    s = alg.update_budget(s, alg.budget_hits([924] + [10] * 9, s.length, 100), 10, **kw)
    assert s == alg.BudgetState(1124, 0)
    s = alg.update_budget(s, 1, 1, **kw)  # grows, capped at max
    assert s == alg.BudgetState(1200, 0)
    # hits and samples on a common scale (verl averages both over data-parallel ranks): 0.25 / 2.5 = 0.1
    assert alg.update_budget(alg.BudgetState(1024), 0.25, 2.5, **kw) == alg.BudgetState(1124, 0)
    assert alg.update_budget(alg.BudgetState(1024), 0.24, 2.5, **kw) == alg.BudgetState(1024, 1)


def test_budget_shrinks_after_patience_misses():
    kw = dict(hit_fraction=0.5, step=10, min_length=30, max_length=100, patience=3)
    s = alg.BudgetState(50)
    s = alg.update_budget(s, 0, 2, **kw)
    assert s == alg.BudgetState(50, 1)
    s = alg.update_budget(s, 0, 2, **kw)
    assert s == alg.BudgetState(50, 2)
    s = alg.update_budget(s, 0, 2, **kw)
    assert s == alg.BudgetState(40, 0)
    for _ in range(6):
        s = alg.update_budget(s, 0, 1, **kw)
    assert s.length == 30  # floor at min
    assert alg.update_budget(s, 0, 0, **kw).misses == 1  # no samples is a miss


def test_budget_rule_reads_the_method_section():
    pc = {
        "hit_fraction": 0.1,
        "budget": {"initial": 1024, "min": 1024, "max": 12288, "step": 100, "margin": 100, "patience": 3},
    }
    assert alg.budget_rule(pc) == dict(hit_fraction=0.1, step=100, min_length=1024, max_length=12288, patience=3)


def test_relay_trigger_rule():
    reflect = torch.tensor([False, True, False, True, False, False, False, False])
    # sample 0: teacher argmax 1 (reflection), student sampled 2, top-2 {2, 4} -> fires
    # sample 1: teacher argmax 1 but student sampled 1 -> no
    # sample 2: teacher argmax 3 in student top-2 -> no
    # sample 3: teacher argmax 5 not a reflection word -> no
    fire = alg.relay_trigger(
        torch.tensor([1, 1, 3, 5]),
        torch.tensor([2, 1, 0, 0]),
        torch.tensor([[2, 4], [1, 0], [3, 0], [0, 2]]),
        reflect,
    )
    assert fire.tolist() == [True, False, False, False]


def test_relay_leg_done():
    assert not alg.relay_leg_done(2, 100)
    assert alg.relay_leg_done(3, 10)
    assert alg.relay_leg_done(0, 256)
    # per row, as the rollout asks it: paragraphs and leg tokens of four rows
    rows = alg.relay_leg_done(torch.tensor([2, 3, 0, 1]), torch.tensor([100, 10, 256, 5]), 3, 256)
    assert rows.tolist() == [False, True, True, False]


def test_reflection_variants_include_case_and_space():
    v = alg.reflection_variants(("Wait",))
    assert {"Wait", " Wait", "wait", " wait", "WAIT", " WAIT"} <= v


def test_optr_trust_and_mask():
    p = alg.optr_trust(t([math.log(0.1), math.log(0.5), math.log(0.9)]), t([math.log(0.5)] * 3))
    assert p.tolist() == pytest.approx([0.2, 1.0, 1.0], abs=1e-6)
    assert alg.optr_mask(p, t([1, 1, 0]), threshold=0.25).tolist() == [0, 1, 0]


def test_topk_forward_kl_by_hand():
    te = torch.log(t([[0.7, 0.2, 0.1]]))
    st = torch.log(t([[0.5, 0.25, 0.25]]))
    # top-2 of teacher: 0.7*ln(0.7/0.5) + 0.2*ln(0.2/0.25)
    want = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.25)
    assert alg.topk_forward_kl(st, te, 2).item() == pytest.approx(want, abs=1e-5)


def test_teacher_lr_scales_below_interval_ten():
    assert alg.scaled_teacher_lr(5e-6, 5) == pytest.approx(2.5e-6)
    assert alg.scaled_teacher_lr(5e-6, 1) == pytest.approx(5e-7)
    assert alg.scaled_teacher_lr(5e-6, 10) == pytest.approx(5e-6)
    assert alg.scaled_teacher_lr(5e-6, 20) == pytest.approx(5e-6)


def test_teacher_step_every_f_student_steps():
    assert [s for s in range(30) if alg.is_teacher_step(s, 10)] == [9, 19, 29]
    assert [s for s in range(3) if alg.is_teacher_step(s, 1)] == [0, 1, 2]


def test_sem_over_repeats():
    # values 0.5, 0.7: sd = 0.141421, sem = 0.1
    assert alg.sem([0.5, 0.7]) == pytest.approx(0.1)
    assert alg.sem([0.4]) == 0.0


def test_token_entropy_uniform():
    assert alg.token_entropy(torch.zeros(1, 4)).item() == pytest.approx(math.log(4))


def test_teacher_self_test_by_hand():
    """Two response tokens and a padded third: |engine - reference| = 0.1 and 0 (mean 0.05); the
    signal |reference - student| = 0.9 and 1.0 (mean 0.95); the limit max(0.1 x 0.95, 0.001)."""
    engine = torch.tensor([[-1.0, -2.0, 9.0]])
    reference = torch.tensor([[-1.1, -2.0, 0.0]])
    student = torch.tensor([[-2.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    got = alg.teacher_self_test(engine, reference, student, mask)
    assert got["teacher_selftest_diff"] == pytest.approx(0.05)
    assert got["teacher_selftest_max_diff"] == pytest.approx(0.1)
    assert got["teacher_selftest_signal"] == pytest.approx(0.95)
    assert got["teacher_selftest_limit"] == pytest.approx(0.095)
    alg.check_self_test(got, "at step 1")  # 0.05 <= 0.095: passes
    strict = alg.teacher_self_test(engine, reference, student, mask, ratio=0.05)
    assert strict["teacher_selftest_limit"] == pytest.approx(0.0475)
    with pytest.raises(alg.TeacherSelfTestError, match=r"by 0\.05 nats a token \(largest 0\.1\), above the limit 0\.0475"):
        alg.check_self_test(strict, "at step 1")
    agree = alg.teacher_self_test(reference, reference, reference, mask)  # no signal: the floor holds
    assert agree["teacher_selftest_limit"] == alg.SELF_TEST_FLOOR and agree["teacher_selftest_diff"] == 0.0
    # the engine's top 2 per token against the reference's log-probs of the same ids: gaps 0.1, 0.3
    # (token 1) and 0, 0.2 (token 2): mean 0.15, largest 0.3; the signal from the sampled tokens
    top_engine = torch.tensor([[[-1.0, -3.0], [-0.5, -2.0], [5.0, 5.0]]])
    top_reference = torch.tensor([[[-1.1, -2.7], [-0.5, -2.2], [0.0, 0.0]]])
    top = alg.teacher_self_test(top_engine, top_reference, student, mask, reference_sampled=reference)
    assert top["teacher_selftest_diff"] == pytest.approx(0.15) and top["teacher_selftest_max_diff"] == pytest.approx(0.3)
    assert top["teacher_selftest_signal"] == pytest.approx(0.95)
