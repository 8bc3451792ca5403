"""Power as a function of clock and utilization, and its fit to measured points.

    P(f, u, u_mem) = P_static + u * P_dyn * (f/f_ref) * max(v_floor, f/f_ref)^2 + P_mem * u_mem

(the formula and its sources are in `hwtune.cost.power`). u is the share of time kernels run
(NVML utilization.gpu, Jetson GPU load), u_mem the share of time memory-bound work runs. For a
fixed ``v_floor`` the model is linear in (P_static, P_dyn, P_mem), so the fit is ordinary least
squares inside a one-dimensional search over ``v_floor`` — a handful of measured points suffice
and the result is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwtune.cost.power import dynamic_power_fraction, power_at_frequency
from hwtune.errors import HwtuneInputError


@dataclass(frozen=True, slots=True)
class PowerModel:
    """Module/board power at a GPU clock, SI units."""

    static_w: float
    dynamic_w: float
    f_ref_hz: float
    v_floor: float = 0.6
    memory_w: float = 0.0

    def __post_init__(self) -> None:
        for name in ("static_w", "dynamic_w", "memory_w"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise HwtuneInputError(name, v, "a non-negative finite power in W")
        if not (self.f_ref_hz > 0 and math.isfinite(self.f_ref_hz)):
            raise HwtuneInputError("f_ref_hz", self.f_ref_hz, "a positive finite clock in Hz")
        if not 0 <= self.v_floor <= 1:
            raise HwtuneInputError("v_floor", self.v_floor, "a voltage floor ratio in [0, 1]")

    def power_w(self, f_hz: float, utilization: float = 1.0, mem_utilization: float = 0.0) -> float:
        """Average power at clock ``f_hz`` with the given busy shares."""
        return power_at_frequency(
            self.static_w, self.dynamic_w, f_hz / self.f_ref_hz, utilization, self.v_floor,
            self.memory_w, mem_utilization,
        )  # fmt: skip

    def max_frequency_hz(
        self,
        cap_w: float,
        frequencies_hz: Sequence[float],
        utilization: float = 1.0,
        mem_utilization: float = 0.0,
    ) -> float | None:
        """The highest listed clock whose power is at most ``cap_w`` (None when none fits).

        Utilization is taken as fixed here; `hwtune.energy.cooptimizer` re-evaluates it per clock.
        """
        # each clock's own power, not the closed-form inverse with a rounding slack: that
        # slack let a clock a hair over the cap through
        fits = [f for f in frequencies_hz if self.power_w(f, utilization, mem_utilization) <= cap_w]
        return max(fits) if fits else None

    def to_dict(self) -> dict[str, float]:
        return {
            "static_w": self.static_w,
            "dynamic_w": self.dynamic_w,
            "f_ref_hz": self.f_ref_hz,
            "v_floor": self.v_floor,
            "memory_w": self.memory_w,
        }


@dataclass(frozen=True, slots=True)
class PowerPoint:
    """One measured point: clock, busy shares over the window, average power."""

    f_hz: float
    power_w: float
    utilization: float = 1.0
    mem_utilization: float = 0.0


V_FLOOR_GRID = tuple(np.round(np.linspace(0.0, 1.0, 101), 4))


def fit_power_model(
    points: Sequence[PowerPoint],
    f_ref_hz: float,
    v_floor: float | None = None,
    with_memory: bool | None = None,
) -> PowerModel:
    """Least-squares fit of `PowerModel` to measured points.

    ``v_floor`` None searches ``V_FLOOR_GRID``; ``with_memory`` None fits a memory term only
    when the points carry memory utilization that varies. Needs at least as many points, with
    at least two clocks, as free parameters. Coefficients are kept non-negative (a negative
    static or dynamic power is dropped and the rest refitted)."""
    pts = list(points)
    if not (isinstance(f_ref_hz, int | float) and f_ref_hz > 0 and math.isfinite(f_ref_hz)):
        raise HwtuneInputError("reference clock", f_ref_hz, "a positive finite clock in Hz")
    if v_floor is not None and not 0 <= v_floor <= 1:
        raise HwtuneInputError("v_floor", v_floor, "a voltage floor ratio in [0, 1]")
    for p in pts:  # NaN passes every comparison: a NaN reading used to fit a zero-power model
        if not all(math.isfinite(x) for x in (p.f_hz, p.power_w, p.utilization, p.mem_utilization)):
            raise HwtuneInputError("power point", p, "finite numbers")
        if p.f_hz <= 0 or p.power_w < 0 or not 0 <= p.utilization <= 1:
            raise HwtuneInputError(
                "power point", p, "f_hz > 0, power_w >= 0, 0 <= utilization <= 1"
            )
        if not 0 <= p.mem_utilization <= 1:
            raise HwtuneInputError("power point", p, "0 <= mem_utilization <= 1")
    if with_memory is None:
        mems = {round(p.mem_utilization, 6) for p in pts}
        with_memory = len(mems) > 1
    n_par = 2 + (1 if with_memory else 0) + (1 if v_floor is None else 0)
    if len(pts) < n_par:
        raise HwtuneInputError("power points", len(pts), f"at least {n_par} measured points")
    if len({round(p.f_hz) for p in pts}) < 2:
        raise HwtuneInputError("power points", "one clock", "points at two or more clocks")
    grid = V_FLOOR_GRID if v_floor is None else (v_floor,)
    best: tuple[float, PowerModel] | None = None
    for vf in grid:
        model, resid = fit_at_floor(pts, f_ref_hz, vf, with_memory)
        # ties (a flat residual over v_floor) go to the lower floor, the cube law
        if best is None or resid < best[0] * (1 - 1e-9):
            best = (resid, model)
    assert best is not None
    return best[1]


def fit_at_floor(
    pts: Sequence[PowerPoint], f_ref_hz: float, v_floor: float, with_memory: bool
) -> tuple[PowerModel, float]:
    """The non-negative least-squares `PowerModel` at a fixed ``v_floor`` (linear in static,
    dynamic and, ``with_memory``, memory power) and its sum of squared residuals, W^2. The
    points are taken as they are: `fit_power_model` checks them."""
    cols = [
        np.ones(len(pts)),
        np.array([p.utilization * dynamic_power_fraction(p.f_hz / f_ref_hz, v_floor) for p in pts]),
    ]
    if with_memory:
        cols.append(np.array([p.mem_utilization for p in pts]))
    a, y = np.column_stack(cols), np.array([p.power_w for p in pts])
    coef = nonneg_lstsq(a, y)
    model = PowerModel(
        static_w=float(coef[0]),
        dynamic_w=float(coef[1]),
        f_ref_hz=f_ref_hz,
        v_floor=float(v_floor),
        memory_w=float(coef[2]) if with_memory else 0.0,
    )
    return model, float(np.sum((a @ coef - y) ** 2))


def nonneg_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0 (Lawson & Hanson, "Solving Least Squares Problems",
    1974, ch. 23 NNLS, in its simplest active-set form: drop the most negative coefficient and
    refit until none is negative; exact for the few columns used here)."""
    n = a.shape[1]
    active = list(range(n))
    coef = np.zeros(n)
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if np.all(sol >= -1e-12):
            coef[:] = 0.0
            coef[active] = np.maximum(sol, 0.0)
            return coef
        active.pop(int(np.argmin(sol)))
    return coef
