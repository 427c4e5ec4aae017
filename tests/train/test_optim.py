"""The embedded trainer's AdamW against torch.optim.AdamW: the same weights, bit for bit."""

from __future__ import annotations

import pytest
import torch

from scout.embedded.optim import AdamW


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _train(model, opt, steps: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 6, generator=g)
        opt.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_same_weights_as_torchs_adamw(weight_decay):
    ours, theirs = _model(0), _model(0)
    _train(ours, AdamW(ours.parameters(), lr=3e-2, weight_decay=weight_decay), 7)
    _train(theirs, torch.optim.AdamW(theirs.parameters(), lr=3e-2, weight_decay=weight_decay, foreach=False), 7)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_first_step_by_hand():
    """One step from zero moments: m = 0.1 g, v = 0.001 g^2, bias-corrected to g and g^2, so the
    parameter moves by lr * g / (|g| + eps): lr against the gradient's sign."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamW([p], lr=0.5)
    p.grad = torch.tensor([3.0, -0.25])
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([0.5, -1.5]), atol=1e-6)


def test_state_round_trips_and_reads_torchs_own():
    """A resumed run goes on exactly; a checkpoint written by torch.optim.AdamW is read too."""
    a, b = _model(1), _model(1)
    opt_a = AdamW(a.parameters(), lr=1e-2)
    _train(a, opt_a, 3)
    theirs = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.0, foreach=False)
    _train(b, theirs, 3)
    for source in (opt_a.state_dict(), theirs.state_dict()):
        c = _model(9)
        c.load_state_dict(a.state_dict())
        opt_c = AdamW(c.parameters(), lr=1e-2)
        opt_c.load_state_dict(source)
        _train(c, opt_c, 2, seed=5)
        ref = _model(9)
        ref.load_state_dict(a.state_dict())
        opt_ref = AdamW(ref.parameters(), lr=1e-2)
        opt_ref.load_state_dict(opt_a.state_dict())
        _train(ref, opt_ref, 2, seed=5)
        assert all(torch.equal(x, y) for x, y in zip(c.parameters(), ref.parameters(), strict=True))
    with pytest.raises(ValueError, match="parameters"):
        AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0).load_state_dict(opt_a.state_dict())
