"""Lion with an 8-bit companded momentum and a split master weight (6 bytes per parameter).

Update rule: Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2:

    c <- beta1 m + (1 - beta1) g
    theta <- theta (1 - lr wd) - lr sign(c)
    m <- beta2 m + (1 - beta2) g

with g <- -g first where ``maximize`` is set (Lion on the negated loss, as torch.optim's option).

Bytes per parameter (FlashOptim, Table 1): 2 + 1 + 2 + 1 = 6, + 2/32 for the fp16 group scales.
torch has no Lion; the tests and benchmarks compare against the same rule in plain fp32.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from hwtune.optim.optimizer import (
    SIGNED,
    CompactOptimizer,
    _betas,
    _flag,
    _group_field,
    _nonnegative,
    decoupled_decay_step,
)


class Lion(CompactOptimizer):
    """Lion (sign of an interpolated momentum) with an int8 companded momentum and a bf16 + int8
    split master weight. ``maximize=True`` (per group) negates the gradient, as torch.optim's
    optimizers do. Options: see `CompactOptimizer`."""

    moments = (("exp_avg", SIGNED),)
    _ADDED_GROUP_KEYS = {"maximize": False}

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
        **options: Any,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "weight_decay": weight_decay, "maximize": maximize}
        self.check_hyperparameters(defaults, None)
        super().__init__(params, defaults, **options)

    def check_hyperparameters(self, values: dict[str, Any], gi: int | None) -> None:
        """lr >= 0, betas in [0, 1), weight_decay >= 0, all finite real numbers; maximize a
        bool."""
        values["lr"] = _nonnegative(_group_field(gi, "lr"), values["lr"])
        values["betas"] = _betas(_group_field(gi, "betas"), values["betas"])
        values["weight_decay"] = _nonnegative(
            _group_field(gi, "weight_decay"), values["weight_decay"]
        )
        _flag(_group_field(gi, "maximize"), values["maximize"])

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """(lr, beta1, beta2, weight decay)."""
        beta1, beta2 = group["betas"]
        return (float(group["lr"]), beta1, beta2, group["weight_decay"])

    def weight_decay_step(self, group: dict[str, Any]) -> tuple[float, str]:
        """Lion's decay is decoupled (theta (1 - lr wd), applied whatever the gradient): r = lr wd
        (`CompactOptimizer.weight_decay_step`)."""
        return decoupled_decay_step(group)

    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Lion on fp32 values (see the module docstring)."""
        lr, beta1, beta2, wd = hp
        (m,) = moments
        c = torch.lerp(m, g, 1.0 - beta1)
        if wd:
            theta = theta * (1.0 - lr * wd)
        return theta - lr * torch.sign(c), [torch.lerp(m, g, 1.0 - beta2)]
