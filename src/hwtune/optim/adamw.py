"""AdamW with 8-bit companded moments and a split master weight (7 bytes per parameter).

Update rule: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2, as
implemented by ``torch.optim.AdamW`` (bias-corrected moments, eps added to sqrt(v_hat)):

    theta <- theta (1 - lr wd)
    m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
    theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

with g <- -g first where ``maximize`` is set (as ``torch.optim.AdamW``; the decay still shrinks).

Bytes per parameter (FlashOptim, Gonzalez Ortiz et al. 2026, Table 1): 2 (bf16 weight) + 1 (int8
correction) + 2 (bf16 gradient) + 1 + 1 (8-bit moments) = 7, + 2 x 2/32 for the fp16 group scales.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from hwtune.errors import HwtuneInputError
from hwtune.optim.optimizer import (
    SECOND,
    SIGNED,
    CompactOptimizer,
    _betas,
    _flag,
    _group_field,
    _nonnegative,
    _positive,
)


def _no_amsgrad(name: str, value: Any) -> None:
    """``amsgrad``: False only (it would keep a third 8-bit state, the running max of v)."""
    if value is not False:
        raise HwtuneInputError(
            name, value, "False (AMSGrad is not implemented in the compact AdamW: use torch's)"
        )


class AdamW(CompactOptimizer):
    """Drop-in `torch.optim.AdamW` with int8 companded momentum, uint8 companded second moment
    (groups of ``group_size``, fp16 scales) and a bf16 + int8 split master weight.

    ``maximize=True`` (per group, as torch's) climbs the objective: the gradient is negated before
    the update. ``amsgrad`` is taken as False only (True is refused). Keyword arguments beyond
    torch's: ``master_weight_bits`` (16, 24 or 32), ``group_size``,
    ``companded`` (False: linear int8, for comparison), ``gradient_release``, ``max_grad_norm``,
    ``numerics_check_every`` and ``compile`` (see `CompactOptimizer`); torch's ``foreach`` and
    ``fused`` are taken as None or False (see `CompactOptimizer`).
    """

    moments = (("exp_avg", SIGNED), ("exp_avg_sq", SECOND))
    #: lr and the two bias corrections change from step to step (`CompactOptimizer.step_varying`)
    step_varying = (0, 5, 6)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        **options: Any,
    ) -> None:
        _no_amsgrad("amsgrad", amsgrad)
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "maximize": maximize,
        }
        self.check_hyperparameters(defaults, None)
        super().__init__(params, defaults, **options)

    def check_hyperparameters(self, values: dict[str, Any], gi: int | None) -> None:
        """lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0, all finite real numbers;
        maximize a bool; amsgrad, where a group gives it, False."""
        values["lr"] = _nonnegative(_group_field(gi, "lr"), values["lr"])
        values["betas"] = _betas(_group_field(gi, "betas"), values["betas"])
        values["eps"] = _positive(_group_field(gi, "eps"), values["eps"])
        values["weight_decay"] = _nonnegative(
            _group_field(gi, "weight_decay"), values["weight_decay"]
        )
        _flag(_group_field(gi, "maximize"), values["maximize"])
        if "amsgrad" in values:  # torch's key, in a group given by hand
            _no_amsgrad(_group_field(gi, "amsgrad"), values["amsgrad"])

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """(lr, beta1, beta2, eps, weight decay, 1 - beta1^t, sqrt(1 - beta2^t))."""
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        return (
            lr,
            beta1,
            beta2,
            group["eps"],
            group["weight_decay"],
            1.0 - beta1**step,
            math.sqrt(1.0 - beta2**step),
        )

    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """AdamW on fp32 values (see the module docstring)."""
        lr, beta1, beta2, eps, wd, bc1, bc2_sqrt = hp
        m, v = moments
        m = torch.lerp(m, g, 1.0 - beta1)
        v = v * beta2 + (1.0 - beta2) * (g * g)
        if wd:
            theta = theta * (1.0 - lr * wd)
        denom = v.sqrt() / bc2_sqrt + eps
        return theta - (lr / bc1) * (m / denom), [m, v]
