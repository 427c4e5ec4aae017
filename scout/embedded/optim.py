"""AdamW for the embedded trainer, step for step ``torch.optim.AdamW``'s own update.

Why not ``torch.optim.AdamW`` itself: its first ``step()`` imports ``torch._dynamo`` (about 1.1 s
here, a third of a toy training job's start-up, over a hundred core-seconds of the toy grid), for
graph breaks that only matter under ``torch.compile``. This is its single-tensor update (the one
it runs on the CPU) with the same operations in the same order, so the weights are bit for bit
the same (``tests/train/test_optim.py``), and its ``state_dict`` has torch's layout.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class AdamW:
    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):  # fmt: skip
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            s = self.state.setdefault(i, {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                          "exp_avg_sq": torch.zeros_like(p)})  # fmt: skip
            s["step"] += 1
            step = s["step"].item()
            if self.weight_decay != 0:
                p.mul_(1 - self.lr * self.weight_decay)
            s["exp_avg"].lerp_(p.grad, 1 - beta1)
            s["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            step_size = self.lr / (1 - beta1**step)
            denom = (s["exp_avg_sq"].sqrt() / (1 - beta2**step) ** 0.5).add_(self.eps)
            p.addcdiv_(s["exp_avg"], denom, value=-step_size)

    def state_dict(self) -> dict:
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                 "params": list(range(len(self.params)))}  # fmt: skip
        return {"state": {i: dict(s) for i, s in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, state: dict) -> None:
        """Also reads what ``torch.optim.AdamW.state_dict()`` wrote (checkpoints of older runs)."""
        (group,) = state["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(f"optimizer state for {len(group['params'])} parameters, the model has {len(self.params)}")
        self.state = {
            int(i): {
                k: v.to(self.params[int(i)].device, copy=True) if k != "step" else v.float().cpu().clone()
                for k, v in s.items()
            }  # fmt: skip
            for i, s in state["state"].items()
        }
