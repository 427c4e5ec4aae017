"""The embedded sampler: inverse-CDF draws over the nucleus, checked by hand and by frequency."""

from __future__ import annotations

import math

import torch

from scout.embedded import lm, sampling
from scout.embedded.qwen3 import Qwen3

# a tiny Qwen3 with wide initial weights, so that its greedy choices are clear (no near ties that
# float rounding between a batch and a single row could flip)
CFG = {"model_type": "qwen3", "vocab_size": 24, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
       "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32, "rms_norm_eps": 1e-6,
       "tie_word_embeddings": True, "initializer_range": 1.0}  # fmt: skip


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) if p > 0 else -math.inf for p in probs]])


def test_each_row_inverts_its_cumulative_distribution_at_its_own_draw():
    # probabilities 0.5, 0.3, 0.2: cumulative 0.5, 0.8, 1.0, so a draw u picks token 0 below 0.5,
    # token 1 in [0.5, 0.8) and token 2 above
    logits = _logits([0.5, 0.3, 0.2]).expand(4, 3)
    u = torch.rand(4, generator=torch.Generator().manual_seed(7))
    expected = [0 if x < 0.5 else 1 if x < 0.8 else 2 for x in u.tolist()]
    got = sampling.sample_from_logits(logits, 1.0, 1.0, torch.Generator().manual_seed(7))
    assert got.tolist() == expected


def test_nucleus_keeps_the_token_that_reaches_top_p_and_nothing_after():
    # sorted 0.5, 0.3, 0.2 with top_p 0.6: 0.5 alone does not reach 0.6, so 0.3 joins; 0.2 is cut.
    # Renormalised: 0.625 and 0.375; the vocabulary order is shuffled to check the mapping back
    logits = _logits([0.2, 0.5, 0.3]).expand(4, 3)
    u = torch.rand(4, generator=torch.Generator().manual_seed(3))
    expected = [1 if x * 0.8 < 0.5 else 2 for x in u.tolist()]
    got = sampling.sample_from_logits(logits, 1.0, 0.6, torch.Generator().manual_seed(3))
    assert got.tolist() == expected


def test_frequencies_match_the_distribution_and_skip_impossible_tokens():
    probs = [0.4, 0.0, 0.25, 0.2, 0.15, 0.0]
    n = 40_000
    got = sampling.sample_from_logits(_logits(probs).expand(n, 6), 1.0, 1.0, torch.Generator().manual_seed(0))
    counts = torch.bincount(got, minlength=6).double()
    assert counts[1] == 0 and counts[5] == 0
    expected = torch.tensor(probs, dtype=torch.float64) * n
    keep = expected > 0
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    assert chi2 < 16.3  # the 0.999 quantile of chi-square with 3 degrees of freedom


def test_temperature_sharpens_and_zero_is_greedy():
    logits = _logits([0.6, 0.4]).expand(20_000, 2)
    cold = sampling.sample_from_logits(logits, 0.5, 1.0, torch.Generator().manual_seed(1)).double().mean()
    # p(1) at temperature 0.5 is 0.4^2 / (0.6^2 + 0.4^2) = 0.16 / 0.52
    assert abs(float(cold) - 0.16 / 0.52) < 0.01
    assert sampling.sample_from_logits(logits[:3], 0.0, 1.0, torch.Generator()).tolist() == [0, 0, 0]


def test_a_rows_token_does_not_depend_on_which_rows_are_still_decoded():
    torch.manual_seed(0)
    logits = torch.randn(5, 11)
    full = sampling.sample_from_logits(logits, 0.8, 0.9, torch.Generator().manual_seed(5))
    rows = torch.tensor([1, 3, 4])
    part = sampling.sample_from_logits(logits[rows], 0.8, 0.9, torch.Generator().manual_seed(5), rows, 5)
    assert part.tolist() == full[rows].tolist()


def _reference(logits, temperature, top_p, u):
    """The nucleus from a full sort of the vocabulary, inverted at the draws ``u``."""
    probs = torch.softmax(logits / temperature, dim=-1)
    p, order = probs.sort(dim=-1, descending=True)
    p = p.masked_fill(p.cumsum(-1) - p > top_p, 0.0)
    cum = p.cumsum(-1)
    idx = torch.searchsorted(cum, (u * cum[:, -1]).unsqueeze(1), right=True)
    return order.gather(-1, idx).squeeze(1)


def test_the_nucleus_from_the_first_tokens_equals_the_nucleus_from_a_full_sort():
    g = torch.Generator().manual_seed(0)
    peaked = torch.randn(300, 165, generator=g) * 6  # the top 16 hold 95%: the short path
    flat = torch.randn(300, 165, generator=g) * 0.5  # they do not: the full sort
    mixed = torch.cat([peaked[:200], flat[200:]])[torch.randperm(300, generator=g)]  # each row its own path
    for logits in (peaked, flat, mixed):
        u = torch.rand(300, generator=torch.Generator().manual_seed(9))
        got = sampling.sample_from_logits(logits, 0.6, 0.95, torch.Generator().manual_seed(9))
        assert got.tolist() == _reference(logits, 0.6, 0.95, u).tolist()


def test_rows_are_padded_in_one_tensor_right_or_left():
    rows = [[5, 6], [7], [], [8, 9, 4]]
    ids, mask = lm.padded(rows, 3, 0)
    assert ids.tolist() == [[5, 6, 0], [7, 0, 0], [0, 0, 0], [8, 9, 4]]
    assert mask.tolist() == [[True, True, False], [True, False, False], [False] * 3, [True] * 3]
    ids, mask = lm.padded(rows, 4, 1, left=True)
    assert ids.tolist() == [[1, 1, 5, 6], [1, 1, 1, 7], [1, 1, 1, 1], [1, 8, 9, 4]]
    assert mask.sum(1).tolist() == [2, 1, 0, 3]


def test_budgets_and_eos_end_each_row_where_the_loop_did():
    """Sampling's bookkeeping is tensor ops: a row ends at EOS (kept) or at its own budget, a zero
    budget gives nothing, and the tokens are those a greedy decoder picks (checked step by step)."""
    torch.manual_seed(0)
    model = Qwen3(CFG).init_weights(3).eval()
    prompts = [[3, 4, 5], [6, 7], [8], [9, 10, 11, 12]]
    greedy = sampling.Sampling(max_new_tokens=6, temperature=0.0)
    g = torch.Generator().manual_seed(0)
    full = sampling.sample(model, prompts, greedy, eos_id=-1, pad_id=0, generator=g, max_new_tokens=[6, 6, 0, 2])
    assert [len(r) for r in full] == [6, 6, 0, 2]
    with torch.no_grad():  # each row's greedy continuation, one row at a time
        for p, r in zip(prompts, full, strict=True):
            seq = list(p)
            for t in r:
                nxt = lm.score(model, torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.long))[0, -1].argmax()
                assert int(nxt) == t
                seq.append(t)
    eos = full[0][2]  # the token row 0 emits third ends it there when it is the EOS
    cut = sampling.sample(model, prompts, greedy, eos_id=eos, pad_id=0, generator=g)
    assert cut[0] == full[0][: full[0].index(eos) + 1]
