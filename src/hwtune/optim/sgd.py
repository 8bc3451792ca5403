"""SGD with momentum (heavy ball or Nesterov) on an 8-bit companded buffer and a split master.

Update rule as ``torch.optim.SGD``: the algorithm in its documentation (Sutskever et al. 2013,
"On the importance of initialization and momentum in deep learning", eq. 1-4), with the buffer's
start as its implementation has it (torch/optim/sgd.py, ``_single_tensor_sgd``: the buffer is
None until the first step with momentum != 0, which sets it to a copy of the gradient):

    g <- -g                                (only with maximize, as torch.optim.SGD)
    g <- g + wd theta                      (L2, torch's default; or decoupled: theta <- theta(1 - lr wd))
    if mu != 0:
        b <- g                             (the buffer's first step: no dampening)
        b <- mu b + (1 - dampening) g      (its later steps)
        g <- g + mu b if nesterov else b
    theta <- theta - lr g

A step with mu = 0 (a group's momentum set to 0 for a while by a scheduler or by hand) neither
reads nor writes b, so a later step with mu != 0 goes on from the value b had; and the buffer's
first step is the parameter's first step with mu != 0, not its step 1. The 0-dim state entry
``momentum_started`` (1 once the buffer holds a value, torch's ``momentum_buffer is not None``)
records it.

Bytes per parameter (FlashOptim, Table 1): 2 (bf16) + 1 (int8 correction) + 2 (bf16 gradient)
+ 1 (8-bit momentum) = 6, + 2/32 for the fp16 group scales; 5 without momentum (and, per
parameter tensor, the 4-byte step count and, with momentum, the 4-byte ``momentum_started``).
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
    decoupled_decay_step,
)


class SGD(CompactOptimizer):
    """Drop-in `torch.optim.SGD` (momentum, dampening, Nesterov, weight decay) with an int8
    companded momentum buffer and a bf16 + int8 split master weight. ``decoupled_weight_decay``
    gives SGDW (Loshchilov & Hutter 2019); ``maximize=True`` negates the gradient (as torch's,
    per group). Other options: see `CompactOptimizer`."""

    _ADDED_GROUP_KEYS = {"maximize": False}
    #: lr, momentum and the buffer's two weights change between steps (schedulers cycling
    #: momentum, the buffer's first step, a group's momentum set to 0 and back): the compiled
    #: update takes them as tensors and compiles nothing new for new values
    step_varying = (0, 1, 2, 3)
    #: the per-parameter entry that says whether the momentum buffer has started
    _STARTED = "momentum_started"

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

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The base state, and with a momentum buffer the 0-dim flag `_STARTED` (0: the buffer
        holds no value yet, torch's ``None``), on the CPU as ``step`` is."""
        state = super()._init_state(p, group)
        if self.moments:
            state[self._STARTED] = torch.tensor(0.0)
        return state

    def _fill_added_state(self, state: dict[str, Any], group: dict[str, Any]) -> None:
        """A state saved before `_STARTED` existed gets it: started if the parameter has taken
        a step (``step`` > 0) and ``group``, as saved, has momentum > 0. Those versions wrote
        the buffer at every step and started it from the gradient at step 1, so with momentum
        in use this assumes it was in use since step 1 (a schedule that kept it at 0 for the
        first steps was not followed as torch's by them anyway). With the group's momentum at
        0 the buffer held the last gradient, which torch's would not hold: it counts as not
        started, and the next step with momentum != 0 sets it to the gradient."""
        step = state.get("step")
        if not self.moments or self._STARTED in state or not isinstance(step, torch.Tensor):
            return  # nothing added, or a state the loader refuses for its missing keys
        started = float(step) > 0 and group["momentum"] != 0
        state[self._STARTED] = torch.tensor(float(started))

    def _active_moments(self, group: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        """No buffer in a step with momentum 0: ``torch.optim.SGD`` neither reads nor writes
        it, so its codes and scales stay as stored (see `CompactOptimizer._active_moments`)."""
        return self.moments if group["momentum"] != 0 else ()

    def _step_hyperparameters(
        self, group: dict[str, Any], state: dict[str, torch.Tensor], step: int
    ) -> tuple[float, ...]:
        """The scalars of this parameter's step: its buffer's first step is the first with
        momentum != 0 (torch's buffer is None until then), whatever ``step`` is; that step
        marks the buffer started."""
        if not self.moments or group["momentum"] == 0:
            return self._scalars(group, first=False)
        started = state[self._STARTED]
        first = not started.item()  # a CPU tensor: no device sync
        started.fill_(1.0)
        return self._scalars(group, first=first)

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """The scalars at ``step`` of a parameter whose buffer, if the group has momentum, was
        started at step 1 (momentum != 0 since then); `step` reads the parameter's own record
        instead (`_step_hyperparameters`)."""
        return self._scalars(group, first=step == 1)

    def _scalars(self, group: dict[str, Any], first: bool) -> tuple[float, ...]:
        """(lr, momentum, weight on the old buffer, weight on g, L2 decay, decoupled decay,
        nesterov). The buffer's first step (``first``) weighs the old buffer 0 and g 1 (torch
        clones g, undampened); with momentum 0 the buffer is not passed to `rule` at all
        (`_active_moments`), and its two weights are 0, unused."""
        mu = group["momentum"]
        decoupled = group["decoupled_weight_decay"]
        wd = group["weight_decay"]
        if mu == 0:
            keep, c_g = 0.0, 0.0
        elif first:
            keep, c_g = 0.0, 1.0
        else:
            keep, c_g = mu, 1.0 - group["dampening"]
        return (
            float(group["lr"]),
            mu,
            keep,
            c_g,
            0.0 if decoupled else wd,
            wd if decoupled else 0.0,
            1.0 if group["nesterov"] else 0.0,
        )

    def weight_decay_step(self, group: dict[str, Any]) -> tuple[float, str]:
        """The relative step weight decay alone makes on a weight whose gradient is zero
        (`CompactOptimizer.weight_decay_step`): lr wd when decoupled (SGDW) or without momentum
        (L2: theta - lr wd theta); with momentum mu and dampening d, L2 decay goes through the
        buffer and reaches lr wd max(1, (1 - d) / (1 - mu)) on a weight that does not move (the
        buffer's first step is undampened, its fixed point (1 - d) wd theta / (1 - mu); Nesterov,
        with d = 0, tends to the same). Where the gradient is non-zero, L2 decay is part of the
        update `UpdateTooSmallWarning`'s check compares."""
        if group["decoupled_weight_decay"]:
            return decoupled_decay_step(group)
        lr, wd, mu = float(group["lr"]), float(group["weight_decay"]), group["momentum"]
        keep = (1.0 - group["dampening"]) / (1.0 - mu) if mu else 1.0
        if keep <= 1.0:
            return lr * wd, f"lr {lr:g} x weight_decay {wd:g} (L2)"
        return lr * wd * keep, (
            f"lr {lr:g} x weight_decay {wd:g} x (1 - dampening {group['dampening']:g}) / "
            f"(1 - momentum {mu:g}) (L2, through the momentum buffer)"
        )

    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """SGD on fp32 values (see the module docstring). ``moments`` is empty in a step with
        momentum 0. At the buffer's first step ``keep`` is 0: the stored buffer (zeros, or a
        finite value an older version left there: its codes decode finite) contributes exactly
        0, so b = 1 * g, torch's copy. ``mu``, ``keep`` and ``c_g`` may be 0-d tensors
        (`step_varying`), so they take part in arithmetic only."""
        lr, mu, keep, c_g, l2, decoupled, nesterov = hp
        if l2:
            g = g + l2 * theta
        if moments:
            buf = moments[0] * keep + c_g * g
            g = g + mu * buf if nesterov else buf
            moments = [buf]
        if decoupled:
            theta = theta * (1.0 - lr * decoupled)
        return theta - lr * g, moments
