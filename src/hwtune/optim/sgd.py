"""SGD with momentum (heavy ball or Nesterov) on an 8-bit companded buffer and a split master.

Update rule as ``torch.optim.SGD`` (Sutskever et al. 2013, "On the importance of initialization
and momentum in deep learning", eq. 1-4; the first step sets the buffer to the gradient):

    g <- -g                                (only with maximize, as torch.optim.SGD)
    g <- g + wd theta                      (L2, torch's default; or decoupled: theta <- theta(1 - lr wd))
    b <- mu b + (1 - dampening) g          (b <- g at the first step)
    theta <- theta - lr (g + mu b if nesterov else b)

Bytes per parameter (FlashOptim, Table 1): 2 (bf16) + 1 (int8 correction) + 2 (bf16 gradient)
+ 1 (8-bit momentum) = 6, + 2/32 for the fp16 group scales; 5 without momentum.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from hwtune.errors import HwtuneInputError
from hwtune.optim.optimizer import (
    SIGNED,
    CompactOptimizer,
    _flag,
    _group_field,
    _nonnegative,
    _unit,
)


class SGD(CompactOptimizer):
    """Drop-in `torch.optim.SGD` (momentum, dampening, Nesterov, weight decay) with an int8
    companded momentum buffer and a bf16 + int8 split master weight. ``decoupled_weight_decay``
    gives SGDW (Loshchilov & Hutter 2019); ``maximize=True`` negates the gradient (as torch's,
    per group). Other options: see `CompactOptimizer`."""

    _ADDED_GROUP_KEYS = {"maximize": False}

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
        **options: Any,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "decoupled_weight_decay": decoupled_weight_decay,
            "maximize": maximize,
        }
        self.moments = ()
        self.check_hyperparameters(defaults, None)
        # the momentum buffer exists in every group or in none (one state layout per optimizer)
        self.moments = (("momentum_buffer", SIGNED),) if defaults["momentum"] > 0 else ()
        super().__init__(params, defaults, **options)

    def check_hyperparameters(self, values: dict[str, Any], gi: int | None) -> None:
        """lr >= 0, momentum and dampening in [0, 1), weight_decay >= 0 (finite real numbers);
        nesterov, decoupled_weight_decay and maximize booleans, nesterov only with momentum > 0 and no
        dampening (as ``torch.optim.SGD``); in a group, momentum > 0 only where the optimizer was
        built with momentum > 0 (else no buffer is kept: `check_state_layout`)."""
        values["lr"] = _nonnegative(_group_field(gi, "lr"), values["lr"])
        values["momentum"] = _unit(_group_field(gi, "momentum"), values["momentum"])
        values["dampening"] = _unit(_group_field(gi, "dampening"), values["dampening"])
        values["weight_decay"] = _nonnegative(
            _group_field(gi, "weight_decay"), values["weight_decay"]
        )
        _flag(_group_field(gi, "nesterov"), values["nesterov"])
        _flag(_group_field(gi, "decoupled_weight_decay"), values["decoupled_weight_decay"])
        _flag(_group_field(gi, "maximize"), values["maximize"])
        if values["nesterov"] and (values["momentum"] <= 0 or values["dampening"] != 0):
            raise HwtuneInputError(
                _group_field(gi, "nesterov"),
                values["nesterov"],
                "False unless momentum > 0 and dampening == 0 (got momentum "
                f"{values['momentum']}, dampening {values['dampening']})",
            )
        if gi is not None:
            self.check_state_layout(values, gi)

    def check_state_layout(self, group: dict[str, Any], gi: int) -> None:
        """An SGD built with momentum=0 keeps no momentum buffer: a group's momentum must stay 0
        (torch.optim.SGD would start a buffer for any momentum != 0, e.g. one set by OneCycleLR
        or CyclicLR with cycle_momentum=True)."""
        if group["momentum"] != 0 and not self.moments:
            raise HwtuneInputError(
                _group_field(gi, "momentum"),
                group["momentum"],
                "0 in every group of an SGD built with momentum=0 (it keeps no momentum buffer: "
                "pass cycle_momentum=False to an LR scheduler such as OneCycleLR or CyclicLR, or "
                "build the SGD with momentum > 0)",
            )

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """(lr, momentum, weight on g in the buffer, L2 decay, decoupled decay, nesterov)."""
        mu = group["momentum"]
        first = step == 1
        decoupled = group["decoupled_weight_decay"]
        wd = group["weight_decay"]
        return (
            float(group["lr"]),
            mu,
            # torch.optim.SGD ignores dampening where momentum is 0 (no buffer)
            1.0 if first or mu == 0 else 1.0 - group["dampening"],
            0.0 if decoupled else wd,
            wd if decoupled else 0.0,
            1.0 if group["nesterov"] else 0.0,
        )

    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """SGD on fp32 values (see the module docstring)."""
        lr, mu, c_g, l2, decoupled, nesterov = hp
        if l2:
            g = g + l2 * theta
        if moments:
            buf = moments[0] * mu + c_g * g
            g = g + mu * buf if nesterov else buf
            moments = [buf]
        if decoupled:
            theta = theta * (1.0 - lr * decoupled)
        return theta - lr * g, moments
