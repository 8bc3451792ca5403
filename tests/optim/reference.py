"""Plain fp32 reference optimizers for comparison: torch's own, and Lion (torch has none)."""

from __future__ import annotations

import torch


class ReferenceLion(torch.optim.Optimizer):
    """Lion in fp32 (Chen et al. 2023, Algorithm 2), the textbook rule."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                c = m.lerp(p.grad, 1 - b1)
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(
                    torch.sign(c), alpha=-group["lr"]
                )
                m.lerp_(p.grad, 1 - b2)


def reference(name: str, params, **kw) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, foreach=True, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, foreach=True, **kw)
    return ReferenceLion(params, **kw)
