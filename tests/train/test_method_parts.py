"""Methods from their parts: each backend keeps a form of every kind of every part in a registry,
a kind it lacks is refused with the ones it has, and a method's behaviour follows from its parts'
forms (worked out by hand below for the embedded budgets and losses and verl's choices)."""

from __future__ import annotations

import json

import pytest
import torch

from scout import algorithms as alg
from scout.embedded import parts as ep
from scout.methods import METHODS, PARTS, form
from scout.verl import parts as vp
from tests.support import guide


@pytest.mark.parametrize("registry", [ep.EMBEDDED_PARTS, vp.VERL_PARTS], ids=["embedded", "verl"])
def test_each_backend_has_a_form_of_every_kind_of_every_part(registry):
    assert {part: tuple(forms) for part, forms in registry.items()} == PARTS


def test_a_kind_a_backend_lacks_is_named_with_the_ones_it_has():
    with pytest.raises(ValueError, match=r"the verl backend has no budget 'half'; it has: full, esr, prune$"):
        form(vp.VERL_PARTS, "budget", "half", "verl")
    with pytest.raises(ValueError, match=r"the embedded backend has no rollout 'beam'; it has: student, relay$"):
        form(ep.EMBEDDED_PARTS, "rollout", "beam", "embedded")


SPEC = {
    "max_response_length": 64,
    "method_cfg": {
        "esr": {"max_tokens": 16},
        "optr": {"threshold": 0.5, "outlier": "mask", "topk": 4},
        "prune_opd": {
            "topk": 1, "tau": 0.5, "w_drop": 0.0, "w_base": 0.0, "hit_fraction": 0.5,
            "budget": {"initial": 48, "min": 8, "max": 64, "step": 8, "margin": 0, "patience": 1},
        },
    },
}  # fmt: skip


def test_the_budgets_response_lengths():
    assert ep.Budget(SPEC).start() is None and ep.Budget(SPEC).length(None) == 64
    assert ep.Esr(SPEC).length(None) == 16  # ESR: its first N tokens
    prune = ep.Prune(SPEC)
    assert prune.start() == alg.BudgetState(48) and prune.length(alg.BudgetState(40)) == 40
    assert (ep.Budget.topk, prune.topk) == (0, 1)  # Prune-OPD reads the teacher's top 1


def test_the_full_budget_and_opd_leave_the_advantages_as_scored():
    adv, mask = torch.tensor([[0.5, -1.0]]), torch.ones(1, 2)
    out, state = ep.Budget(SPEC).weigh(None, adv, mask, None, None, None, {})
    assert torch.equal(out, adv) and state is None
    out, extra = ep.Opd(SPEC).reweigh(adv, None, None, mask, None, None, None, {})
    assert torch.equal(out, adv) and float(extra) == 0.0


def test_optr_keeps_the_tokens_the_teacher_trusts():
    """Trust of a token is exp(teacher - student log-prob) capped at 1 (``optr_trust``); with a
    threshold of 0.5, a token the teacher finds e^-1 = 0.37 as likely is masked, one as likely kept."""
    t_logp, old_logp = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -1.0]])
    metrics = {}
    out, extra = ep.Optr(SPEC).reweigh(torch.tensor([[0.3, 0.7]]), t_logp, old_logp, torch.ones(1, 2), None, None, None, metrics)
    assert out.tolist() == [[pytest.approx(0.3), 0.0]] and metrics["optr_trusted_frac"] == 0.5 and float(extra) == 0.0


def test_grpo_learns_from_rewards_and_the_others_from_the_teacher():
    assert [ep.part(METHODS[m], "student_loss").distils for m in ("grpo", "opd", "optr")] == [False, True, True]


@pytest.mark.parametrize(
    "method, loss, loop, trainer",
    [
        ("grpo", "", "", ""),
        ("opd", "", "", ""),
        ("esr", "", "", ""),
        ("prune_opd", "scout_prune", "scout_budget", "prune"),
        ("relay_opd", "", "scout_relay", ""),
        ("scout", "", "", "scout"),
        ("opd_teacher_grpo", "", "", "scout"),
        ("optr", "scout_optr", "", ""),
        ("optr_scout", "scout_optr", "", "scout"),
    ],
)
def test_what_each_method_asks_of_verl_follows_from_its_parts(method, loss, loop, trainer):
    m = METHODS[method]
    assert (vp.first(m, "loss_mode"), vp.first(m, "agent_loop"), vp.first(m, "trainer")) == (loss, loop, trainer)


CHECK = """
import json, sys
from scout.embedded.trainer import train
from scout.verl import config as vc
spec = json.load(open(sys.argv[1]))
train(spec, "runs/half", "cpu", log=lambda *a: None)
res = {"nodes": 1, "gpus_per_node": 2}
print(next(o for o in vc.overrides(spec, res, "runs/verl") if o.startswith("data.max_response_length=")))
"""


def test_the_guides_part_of_a_new_kind_touches_three_files(tmp_path, spec_for):
    """docs/extending.md's steps for a budget that halves the response length, followed on a copy of
    the repository: three files change, and a cell of its method trains on the embedded backend
    under that budget and gets it as verl's response length."""
    copy = guide.repo_copy(tmp_path / "repo", "tests", "docs")
    steps = guide.steps("part", "Add a method", "Add a backend")
    assert sorted({s["file"] for s in steps}) == ["scout/embedded/parts.py", "scout/methods.py", "scout/verl/parts.py"]
    for step in steps:
        guide.apply(copy, step)
    spec = spec_for("opd", total_steps=2, max_response_length=16)
    (copy / "half.json").write_text(json.dumps({**spec, "method": "opd_half", "variant": "opd_half"}))
    done = guide.run(copy, "-c", CHECK, "half.json")
    assert done.stdout.strip() == "data.max_response_length=8"
    metrics = [json.loads(line) for line in (copy / "runs" / "half" / "metrics.jsonl").read_text().splitlines()]
    assert [m["response_budget"] for m in metrics] == [8, 8] and max(m["response_length"] for m in metrics) <= 8
