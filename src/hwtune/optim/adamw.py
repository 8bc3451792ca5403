"""AdamW with 8-bit companded moments and a split master weight (7 bytes per parameter).

Update rule: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2, as
implemented by ``torch.optim.AdamW`` (bias-corrected moments, eps added to sqrt(v_hat)):

    theta <- theta (1 - lr wd)
    m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
    theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

with g <- -g first where ``maximize`` is set (as ``torch.optim.AdamW``; the decay still shrinks).
With ``amsgrad`` (Reddi et al. 2018, "On the Convergence of Adam and Beyond", Algorithm 2, as
torch applies it): v_max <- max(v_max, v), and sqrt(v_max) replaces sqrt(v) in the denominator.

Bytes per parameter (FlashOptim, Gonzalez Ortiz et al. 2026, Table 1): 2 (bf16 weight) + 1 (int8
correction) + 2 (bf16 gradient) + 1 + 1 (8-bit moments) = 7, + 2 x 2/32 for the fp16 group scales;
amsgrad keeps v_max as a third 8-bit state coded as v is: 8 + 3 x 2/32.
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
    decoupled_decay_step,
)


class AdamW(CompactOptimizer):
    """Drop-in `torch.optim.AdamW` with int8 companded momentum, uint8 companded second moment
    (groups of ``group_size``, fp16 scales) and a bf16 + int8 split master weight.

    ``maximize=True`` (per group, as torch's) climbs the objective: the gradient is negated before
    the update. ``amsgrad=True`` keeps the running max of the second moment as a third 8-bit
    state (one more byte per parameter; a group may turn it off, not on). Keyword arguments
    beyond torch's: ``master_weight_bits`` (16, 24 or 32), ``group_size``,
    ``companded`` (False: linear int8, for comparison), ``gradient_release``, ``max_grad_norm``,
    ``numerics_check_every`` and ``compile`` (see `CompactOptimizer`); torch's ``foreach`` and
    ``fused`` are taken as None or False (see `CompactOptimizer`).
    """

    moments = (("exp_avg", SIGNED), ("exp_avg_sq", SECOND))
    #: lr and the two bias corrections change from step to step (`CompactOptimizer.step_varying`)
    step_varying = (0, 5, 6)
    _ADDED_GROUP_KEYS = {"maximize": False, "amsgrad": False}

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
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
        }
        self.check_hyperparameters(defaults, None)
        # the v_max state exists in every group or in none (one state layout per optimizer)
        if amsgrad:
            self.moments = (*type(self).moments, ("max_exp_avg_sq", SECOND))
        super().__init__(params, defaults, **options)

    def check_hyperparameters(self, values: dict[str, Any], gi: int | None) -> None:
        """lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0, all finite real numbers;
        amsgrad and maximize bools; in a group, amsgrad only where the optimizer was built with
        it (else no v_max is kept)."""
        values["lr"] = _nonnegative(_group_field(gi, "lr"), values["lr"])
        values["betas"] = _betas(_group_field(gi, "betas"), values["betas"])
        values["eps"] = _positive(_group_field(gi, "eps"), values["eps"])
        values["weight_decay"] = _nonnegative(
            _group_field(gi, "weight_decay"), values["weight_decay"]
        )
        _flag(_group_field(gi, "maximize"), values["maximize"])
        _flag(_group_field(gi, "amsgrad"), values["amsgrad"])
        if gi is not None:
            self.check_state_layout(values, gi)

    def check_state_layout(self, group: dict[str, Any], gi: int) -> None:
        """An AdamW built with amsgrad=False keeps no v_max: a group's amsgrad must stay False
        (torch.optim.AdamW would keep and use a v_max, or fail, where it is turned on later)."""
        if group["amsgrad"] and len(self.moments) < 3:
            raise HwtuneInputError(
                _group_field(gi, "amsgrad"),
                group["amsgrad"],
                "False in every group of an AdamW built with amsgrad=False (no max of the second "
                "moment is kept; build it with amsgrad=True instead)",
            )

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """(lr, beta1, beta2, eps, weight decay, 1 - beta1^t, sqrt(1 - beta2^t), amsgrad)."""
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
            1.0 if group["amsgrad"] else 0.0,
        )

    def weight_decay_step(self, group: dict[str, Any]) -> tuple[float, str]:
        """AdamW's decay is decoupled (theta (1 - lr wd), applied whatever the gradient): r = lr wd
        (`CompactOptimizer.weight_decay_step`)."""
        return decoupled_decay_step(group)

    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """AdamW on fp32 values (see the module docstring)."""
        lr, beta1, beta2, eps, wd, bc1, bc2_sqrt, amsgrad = hp
        m, v, *v_max = moments  # v_max: kept by an AdamW built with amsgrad=True
        m = torch.lerp(m, g, 1.0 - beta1)
        v = v * beta2 + (1.0 - beta2) * (g * g)
        if wd:
            theta = theta * (1.0 - lr * wd)
        if v_max and amsgrad:
            v_max = [torch.maximum(v_max[0], v)]
        denom = (v_max[0] if v_max and amsgrad else v).sqrt() / bc2_sqrt + eps
        return theta - (lr / bc1) * (m / denom), [m, v, *v_max]
