"""A simulated device: the step and power models played as hardware, with a virtual clock.

The training loop (or a test) calls `SimulatedDevice.run_step` for each step; the device
advances its clock by the step time at its current clock and adds the energy the power model
gives. Readings carry seeded noise; ``dynamic_scale`` (e.g. a hotter chip leaking more, or a
different phase of training) can be changed mid-run to exercise live feedback. A power limit,
when set, behaves like firmware capping: each step runs at the highest table clock (not above
the locked one) whose predicted power fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hwtune.energy.meters.base import (
    BaseDevice,
    Capabilities,
    MeterError,
    Utilization,
    clock_table,
    nearest_frequency,
)
from hwtune.energy.power_model import PowerModel
from hwtune.energy.step_model import StepTimeModel


class SimulatedDevice(BaseDevice):
    """Ground truth for tests and benchmarks; implements the whole device protocol."""

    def __init__(
        self,
        step: StepTimeModel,
        power: PowerModel,
        frequencies_hz: Sequence[float],
        seed: int = 0,
        time_noise: float = 0.0,
        power_noise: float = 0.0,
        supports_power_limit: bool = False,
        name: str = "simulated",
    ) -> None:
        self.step_model, self.power_model = step, power
        self.table = clock_table(frequencies_hz)
        self.name = name
        self._rng = np.random.default_rng(seed)
        self.time_noise, self.power_noise = time_noise, power_noise
        self.supports_power_limit = supports_power_limit
        self._t = 0.0
        super().__init__(clock=lambda: self._t)
        self._e = 0.0
        self._f = self.table[-1]
        self._limit: float | None = None
        self.dynamic_scale = 1.0
        self._last_power = power.static_w
        self._busy = 0.0
        self._mem_busy = 0.0
        self._span = 0.0
        self.steps_run = 0
        self.trace: list[tuple[float, float, float, int, float]] = []  # t_end, dt, J, batch, f

    # -- the workload -------------------------------------------------------------------
    def true_power_w(self, batch: int, f_hz: float) -> float:
        """Noise-free power of a step at ``batch`` and ``f_hz``."""
        parts = self.step_model.parts(batch, f_hz)
        pm = self.power_model
        dyn = PowerModel(
            pm.static_w, pm.dynamic_w * self.dynamic_scale, pm.f_ref_hz, pm.v_floor, pm.memory_w
        )
        return dyn.power_w(f_hz, parts.utilization, parts.mem_utilization)

    def effective_frequency_hz(self, batch: int) -> float:
        """The clock a step runs at: the locked clock, lowered by the power limit if any."""
        if self._limit is None:
            return self._f
        for f in reversed([x for x in self.table if x <= self._f]):
            if self.true_power_w(batch, f) <= self._limit:
                return f
        return self.table[0]

    def run_step(self, batch: int) -> float:
        """Run one step; returns its (noisy) duration, s."""
        f = self.effective_frequency_hz(batch)
        parts = self.step_model.parts(batch, f)
        dt = parts.total_s
        if self.time_noise:
            dt *= max(0.5, 1.0 + self.time_noise * float(self._rng.standard_normal()))
        watts = self.true_power_w(batch, f)
        self._t += dt
        self._e += watts * dt
        self._last_power = watts
        self._busy += parts.utilization * dt
        self._mem_busy += parts.mem_utilization * dt
        self._span += dt
        self.steps_run += 1
        self.trace.append((self._t, dt, watts * dt, batch, f))
        return dt

    def idle(self, seconds: float) -> None:
        if not (seconds >= 0 and math.isfinite(seconds)):  # the virtual clock never runs back
            raise MeterError("idle", seconds, "a non-negative finite number of seconds")
        self._t += seconds
        self._e += self.power_model.static_w * seconds
        self._span += seconds
        self._last_power = self.power_model.static_w

    # -- the protocol -------------------------------------------------------------------
    def energy_j(self) -> float:
        return self._e

    def power_w(self) -> float:
        p = self._last_power
        if self.power_noise:
            p *= 1.0 + self.power_noise * float(self._rng.standard_normal())
        return max(0.0, p)

    def utilization(self) -> Utilization | None:
        if self._span <= 0:
            return None
        u = Utilization(gpu=self._busy / self._span, memory=self._mem_busy / self._span)
        self._busy = self._mem_busy = self._span = 0.0
        return u

    def frequency_hz(self) -> float | None:
        return self._f

    def set_frequency_hz(self, hz: float) -> None:
        self._f = nearest_frequency(hz, self.table, "frequency")

    def power_limit_w(self) -> float | None:
        return self._limit

    def set_power_limit_w(self, watts: float) -> None:
        if not self.supports_power_limit:
            super().set_power_limit_w(watts)
        if not watts > 0:
            raise MeterError("power limit", watts, "a positive power in W")
        self._limit = watts

    def reset(self) -> None:
        self._f = self.table[-1]
        self._limit = None

    def capabilities(self) -> Capabilities:
        return Capabilities(
            energy=True,
            power=True,
            utilization=True,
            set_frequency=True,
            set_power_limit=self.supports_power_limit,
            frequencies_hz=self.table,
        )
