"""Online tuner: a training-loop callback that chooses batch size and GPU clock under a power
cap with the device in the loop.

Phases (each step is one call of `OnlineTuner.step_begin` then `OnlineTuner.step_end`):

1. ``profile``: a few (batch, clock) points, each run for ``warmup_steps`` + ``profile_steps``
   steps, with power, time and utilization read from the device. The first points run at a
   low clock (safe under any cap the device can meet); the later ones at the highest clock the
   models fitted so far predict to fit under the cap with ``margin``.
2. ``commit``: the step and power models are fitted to the points (`step_model.fit_step_model`,
   `power_model.fit_power_model`) and `cooptimizer.co_optimize` picks the point.
3. ``run``: every control interval (``control_interval_s`` of device time, closed at the first
   step boundary after it) the measured average power is compared with the cap. Over the cap,
   the clock steps down at once to the highest clock whose prediction fits with margin, the
   prediction's dynamic part recalibrated by the interval just measured (one step more when
   the model was off by more than 10%). Below ``cap x (1 - headroom)`` it steps up one clock
   when the recalibrated prediction fits (for the ``energy`` and ``mix`` objectives never past
   the committed clock: there the choice, not the cap, is the target). A clock that overshot is not re-entered for
   ``hold_intervals`` intervals. The first ``refinements`` intervals at a committed point are
   added to the fitted points and the choice is made again (a measurement exactly where it
   matters). A new cap (`set_cap`) or a noise scale that moved by more than
   ``recommit_ratio`` triggers a new choice.

After any interval over the cap the next one is made safe, so the cap is never exceeded for
longer than one control interval while the lowest clock fits (the guarantee tested on the
simulated device). Works with any object implementing `hwtune.energy.meters.PowerDevice`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from hwtune.cost.power import dynamic_power_fraction
from hwtune.energy.convergence import (
    CriticalBatch,
    LrRule,
    NoiseScaleEstimator,
    scale_learning_rate,
)
from hwtune.energy.cooptimizer import CoOptResult, Objective, co_optimize
from hwtune.energy.cooptimizer import _is_positive_int as _positive_int
from hwtune.energy.meters.base import (
    Capabilities,
    MeterError,
    PowerDevice,
    check_energy_gaps,
    clock_table,
    energy_gaps,
)
from hwtune.energy.power_model import PowerModel, PowerPoint, fit_at_floor, fit_power_model
from hwtune.energy.step_model import StepPoint, StepTimeModel, fit_step_model
from hwtune.errors import HwtuneInputError

MAX_PROBE_RETRIES = 2  # a probe whose energy reading went down is run again at most this often
# What a failed reading or clock change may raise: MeterError, which every hwtune backend
# raises for any failure (`meters.base`), and OSError, from a user's own device reading a file
# or a socket. Anything else is a bug and propagates at once.
METER_FAILURES: tuple[type[Exception], ...] = (MeterError, OSError)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the next step should use."""

    batch_size: int
    lr: float
    frequency_hz: float
    phase: str


@dataclass(frozen=True, slots=True)
class Interval:
    """One closed control interval, as measured through the device."""

    start_s: float
    end_s: float
    energy_j: float
    steps: int
    batch: int
    frequency_hz: float
    phase: str
    cap_w: float

    @property
    def avg_power_w(self) -> float:
        dt = self.end_s - self.start_s
        return self.energy_j / dt if dt > 0 else 0.0

    @property
    def over_cap(self) -> bool:
        return self.avg_power_w > self.cap_w

    @property
    def valid(self) -> bool:
        """False for a reading no decision may rest on: a zero-length or backwards window, or
        an energy counter that went down (a driver reload, an unhandled wrap) or is not finite."""
        return self.end_s > self.start_s and math.isfinite(self.energy_j) and self.energy_j >= 0

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["avg_power_w"] = self.avg_power_w
        d["over_cap"] = self.over_cap
        return d


@dataclass(slots=True)
class _Probe:
    batch: int
    f_hz: float
    steps: int = 0
    t0: float | None = None  # after warm-up
    e0: float = 0.0
    busy: float = 0.0
    mem_busy: float = 0.0
    span: float = 0.0
    retries: int = 0
    gaps: int = 0  # the device's energy_gaps when the window opened


class OnlineTuner:
    """Batch size x clock under a power cap, hardware in the loop (see the module docstring)."""

    def __init__(
        self,
        device: PowerDevice,
        cap_w: float,
        batch_sizes: Sequence[int],
        base_batch: int,
        base_lr: float = 1.0,
        lr_rule: LrRule = "sqrt",
        convergence: CriticalBatch | NoiseScaleEstimator | None = None,
        b_noise: float | None = None,
        objective: Objective = "time",
        frequencies_hz: Sequence[float] | None = None,
        control_interval_s: float = 1.0,
        warmup_steps: int = 1,
        profile_steps: int = 3,
        profile_batches: Sequence[int] | None = None,
        prior: PowerModel | None = None,
        margin: float = 0.01,
        headroom: float = 0.08,
        hold_intervals: int = 5,
        recommit_ratio: float = 1.5,
        refinements: int = 2,
        max_meter_errors: int = 3,
        eta: float = 0.5,
        max_power_w: float | None = None,
    ) -> None:
        if not (_real(cap_w) and cap_w > 0 and math.isfinite(cap_w)):
            raise HwtuneInputError("power cap", cap_w, "a positive finite power in W")
        if not (_real(base_lr) and base_lr > 0 and math.isfinite(base_lr)):
            raise HwtuneInputError("base_lr", base_lr, "a positive finite learning rate")
        if isinstance(batch_sizes, str | bytes) or not isinstance(batch_sizes, Iterable):
            raise HwtuneInputError("batch sizes", batch_sizes, "a sequence of positive integers")
        batch_sizes = list(batch_sizes)  # once: an iterator would be spent by the check
        if not batch_sizes or not all(_positive_int(b) for b in batch_sizes):
            raise HwtuneInputError("batch sizes", batch_sizes, "positive integers")
        if profile_batches is not None:
            if isinstance(profile_batches, str | bytes) or not isinstance(
                profile_batches, Iterable
            ):
                raise HwtuneInputError(
                    "profile batches", profile_batches, "a sequence of positive integers"
                )
            profile_batches = list(profile_batches)
            if not all(_positive_int(b) for b in profile_batches):
                raise HwtuneInputError("profile batches", profile_batches, "positive integers")
        # profiling measures one point per profile batch (each at one clock first): the step and
        # power models need two points, so one distinct batch never gets past profiling
        profiled = profile_batches or batch_sizes
        if len({int(b) for b in profiled}) < 2:
            raise HwtuneInputError(
                "profile batches" if profile_batches else "batch sizes",
                profiled,
                "at least two distinct batch sizes (profiling measures one point per batch "
                "size, and the step and power models are fitted to at least two points)",
            )
        if not _positive_int(base_batch):
            raise HwtuneInputError("base batch", base_batch, "a positive integer")
        if objective not in ("time", "energy", "mix"):
            raise HwtuneInputError("objective", objective, "time, energy or mix")
        if lr_rule not in ("linear", "sqrt", "none"):
            raise HwtuneInputError("lr rule", lr_rule, "linear, sqrt or none")
        if b_noise is not None and not (_real(b_noise) and b_noise > 0 and math.isfinite(b_noise)):
            raise HwtuneInputError("b_noise", b_noise, "a positive noise scale (samples)")
        for name, v in (("margin", margin), ("headroom", headroom)):
            if not (_real(v) and 0 <= v < 1):
                raise HwtuneInputError(name, v, "a fraction of the cap in [0, 1)")
        for name, n in (
            ("hold intervals", hold_intervals), ("refinements", refinements),
            ("max meter errors", max_meter_errors),
        ):  # fmt: skip
            if not (_int(n) and n >= 0):
                raise HwtuneInputError(name, n, "a non-negative integer")
        if not (_real(eta) and 0 <= eta <= 1):
            raise HwtuneInputError("eta", eta, "an energy weight in [0, 1]")
        if max_power_w is not None and not (
            _real(max_power_w) and max_power_w > 0 and math.isfinite(max_power_w)
        ):
            raise HwtuneInputError("max power", max_power_w, "a positive finite power in W")
        if not (_real(recommit_ratio) and recommit_ratio >= 1 and math.isfinite(recommit_ratio)):
            raise HwtuneInputError("recommit ratio", recommit_ratio, "a finite ratio >= 1")
        if not (
            _real(control_interval_s)
            and control_interval_s > 0
            and math.isfinite(control_interval_s)
        ):
            raise HwtuneInputError(
                "control interval", control_interval_s, "a positive finite time in s"
            )
        if not (
            _int(profile_steps) and _int(warmup_steps)
            and profile_steps >= 1 and warmup_steps >= 0
        ):  # fmt: skip
            raise HwtuneInputError(
                "warmup steps, profile steps", (warmup_steps, profile_steps),
                "integers >= 0 and >= 1",
            )  # fmt: skip
        self.device = device
        self.cap_w = float(cap_w)
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self.base_batch, self.base_lr, self.lr_rule = int(base_batch), float(base_lr), lr_rule
        self.objective = objective
        # Zeus's eta and MAXPOWER for the mix objective (`cooptimizer.cost`); MAXPOWER defaults
        # to the device's maximum power limit when it reports one, as in Zeus
        self.eta = eta
        self.max_power_w = max_power_w
        need_max_power = objective == "mix" and max_power_w is None
        caps = device.capabilities() if need_max_power or not frequencies_hz else None
        # the device's maximum power limit, read once here: a constant of the device, and a
        # reading that failed at a commit mid-profile would leave the tuner without a probe
        self._device_max_power_w = _max_limit(caps) if need_max_power else None
        table = frequencies_hz or caps.frequencies_hz  # type: ignore[union-attr]
        if not table:
            raise HwtuneInputError("frequencies", [], f"settable clocks ({device.name} has none)")
        self.table = clock_table(table)
        self.f_ref = self.table[-1]
        self.interval_s = control_interval_s
        self.warmup_steps, self.profile_steps = warmup_steps, profile_steps
        self.prior = prior
        self.margin, self.headroom = margin, headroom
        self.hold_intervals, self.recommit_ratio = hold_intervals, recommit_ratio
        self.refinements = refinements
        self._refined = 0
        self.refits_over_cap = 0  # run-phase re-choices that found no candidate under the cap
        self._estimator = convergence if isinstance(convergence, NoiseScaleEstimator) else None
        if isinstance(convergence, CriticalBatch):
            self._b_noise_fixed: float | None = convergence.b_noise
        else:
            self._b_noise_fixed = b_noise
        if self._b_noise_fixed is None and self._estimator is None:
            raise HwtuneInputError(
                "convergence", None, "a CriticalBatch, a NoiseScaleEstimator or b_noise"
            )

        pb = list(profile_batches) if profile_batches else _spread(self.batch_sizes)
        self._todo: list[_Probe] = [_Probe(b, self._start_clock(b)) for b in pb]
        self._second: list[int] = list(reversed(pb))  # then each batch at a high clock
        self.points: list[tuple[_Probe, float, float]] = []  # probe, step time, power
        self.phase = "profile"
        self.history: list[Interval] = []
        self.profile_step_count = 0
        self.step_model: StepTimeModel | None = None
        self.power_model: PowerModel | None = None
        self.choice: CoOptResult | None = None
        self._b_noise_at_commit: float | None = None
        self._batch = pb[0]
        self._f = self._todo[0].f_hz
        self._recover = False
        self._held: dict[float, int] = {}
        self._applied_f: float | None = None
        self.max_meter_errors = max_meter_errors
        self.meter_errors = 0  # failed readings and clock changes so far
        self._meter_fail_run = 0  # failed readings in a row
        self._set_fail_run = 0  # failed clock changes in a row
        self._iv_open = False
        self._begin_interval()
        self._iv_open = True
        self._in_step = False  # between a step_begin() and its step_end()

    # -- public API -------------------------------------------------------------------------
    def step_begin(self) -> StepPlan:
        """The plan of the next step. A clock change that fails is tried again at the next
        step; the step runs at an unknown clock, so its interval and probe are dropped as for a
        failed reading, and more than ``max_meter_errors`` failures in a row re-raise. Each
        call must be followed by one `step_end` (else the steps would be miscounted)."""
        if self._in_step:
            raise HwtuneInputError(
                "step_begin()",
                "a second call without step_end()",
                "step_begin() and step_end() in turn, once each per training step",
            )
        if self._applied_f != self._f:
            try:
                self.device.set_frequency_hz(self._f)
            except METER_FAILURES as e:
                self._meter_failed(e, control=True)
            else:
                self._applied_f = self._f
                self._set_fail_run = 0
        clock_set = self._applied_f == self._f  # else the step runs at an unknown clock
        if self.phase == "profile" and self.warmup_steps == 0 and self._todo and clock_set:
            pr = self._todo[0]
            if pr.steps == 0 and pr.t0 is None:  # no warm-up: the window opens with the probe
                try:
                    self._open_probe_window(pr, self.device.now_s())
                except METER_FAILURES as e:  # t0 stays None: the probe is run again at its end
                    self._meter_failed(e)
        lr = scale_learning_rate(self.base_lr, self.base_batch, self._batch, self.lr_rule)
        self._in_step = True
        return StepPlan(self._batch, lr, self._f, self.phase)

    def step_end(self) -> None:
        """Account the step just run. A failed meter reading (`METER_FAILURES`) loses the open
        interval and the probe in flight (it is run again) and keeps the clock; more than
        ``max_meter_errors`` failures in a row re-raise the last one. Only after a
        `step_begin` (a step the tuner did not plan is not a profile or control step)."""
        if not self._in_step:
            raise HwtuneInputError(
                "step_end()",
                "a call without a preceding step_begin()",
                "step_begin() before each step_end(), once each per training step",
            )
        self._in_step = False
        try:
            if not self._iv_open:  # the last reading failed: open a new interval from here
                self._begin_interval()
                self._iv_open = True
            else:
                self._step_end()
            self._meter_fail_run = 0
        except METER_FAILURES as e:
            self._meter_failed(e)

    def _step_end(self) -> None:
        now = self.device.now_s()
        self._iv_steps += 1
        if self.phase == "profile":
            self.profile_step_count += 1
            self._profile_step(now)
        if now - self._iv_t0 >= self.interval_s or self._iv_force_close:
            self._close_interval(now)

    def _meter_failed(self, e: Exception, control: bool = False) -> None:
        """Count a failed reading (or, ``control``, a failed clock change), re-raise it past
        ``max_meter_errors`` in a row, and drop the open interval and the probe in flight."""
        self.meter_errors += 1
        if control:
            self._set_fail_run += 1
            run = self._set_fail_run
        else:
            self._meter_fail_run += 1
            run = self._meter_fail_run
        if run > self.max_meter_errors:
            raise e
        self._iv_open = False
        if self.phase == "profile" and self._todo:
            pr = self._todo[0]
            self._todo[0] = _Probe(pr.batch, pr.f_hz, retries=pr.retries)

    def observe_gradients(self, g_small_sq: float, g_big_sq: float) -> float | None:
        """Feed squared gradient norms to the noise-scale estimator (if the tuner has one)."""
        if self._estimator is None:
            raise HwtuneInputError("convergence", "fixed", "a NoiseScaleEstimator to observe into")
        return self._estimator.update(g_small_sq, g_big_sq)

    def set_cap(self, cap_w: float) -> None:
        """A new cap, effective now (re-chooses when the models are fitted)."""
        if not (_real(cap_w) and cap_w > 0 and math.isfinite(cap_w)):
            raise HwtuneInputError("power cap", cap_w, "a positive finite power in W")
        if self._iv_open and self._iv_steps:
            try:
                self._close_interval(self.device.now_s())
            except METER_FAILURES as e:  # the interval is lost, the new cap still applies
                self._meter_failed(e)
        old_cap, self.cap_w = self.cap_w, float(cap_w)
        old_held, self._held = self._held, {}
        if self.phase == "run":
            try:
                self._commit()
            except HwtuneInputError:  # no candidate fits: the call changes nothing
                self.cap_w, self._held = old_cap, old_held
                self._restart_interval()
                raise
        self._restart_interval()

    @property
    def b_noise(self) -> float:
        if self._estimator is not None and self._estimator.b_simple is not None:
            return self._estimator.b_simple
        if self._b_noise_fixed is not None:
            return self._b_noise_fixed
        return float(self.batch_sizes[len(self.batch_sizes) // 2])

    @property
    def batch_size(self) -> int:
        return self._batch

    @property
    def frequency_hz(self) -> float:
        return self._f

    # -- profiling ----------------------------------------------------------------------------
    def _start_clock(self, batch: int) -> float:
        """A first clock for a probe: the highest the prior predicts to fit at full
        utilization (conservative), else the lowest clock."""
        if self.prior is None:
            return self.table[0]
        f = self.prior.max_frequency_hz(self.cap_w * (1 - 2 * self.margin), self.table, 1.0, 1.0)
        return f if f is not None else self.table[0]

    def _profile_step(self, now: float) -> None:
        pr = self._todo[0]
        pr.steps += 1
        if pr.steps == self.warmup_steps:
            self._open_probe_window(pr, now)
        if pr.steps >= self.warmup_steps + self.profile_steps:
            self._finish_probe(now)

    def _open_probe_window(self, pr: _Probe, now: float) -> None:
        pr.t0, pr.e0 = now, self.device.energy_j()
        pr.gaps = energy_gaps(self.device)
        self.device.utilization()  # reset the busy-share window

    def _finish_probe(self, now: float) -> None:
        pr = self._todo[0]
        e1, util = 0.0, None
        if pr.t0 is not None and now > pr.t0:  # read first: a failed read keeps it in flight
            e1, util = self.device.energy_j(), self.device.utilization()
            # another reader hit a reading of unknown energy: a failed reading here too
            check_energy_gaps(self.device, pr.gaps, "probe")
        self._todo.pop(0)
        if (pr.t0 is None or now <= pr.t0) and pr.retries < MAX_PROBE_RETRIES:
            # a clock that stood still or ran back: nothing measured, run the probe again
            self._todo.insert(0, _Probe(pr.batch, pr.f_hz, retries=pr.retries + 1))
            self._iv_force_close = True
            self._plan_next_probe()
            return
        if pr.t0 is not None and now > pr.t0:
            dt = now - pr.t0
            n = pr.steps - self.warmup_steps
            watts = (e1 - pr.e0) / dt
            if not (math.isfinite(watts) and watts >= 0):  # the counter went down: a glitch
                if pr.retries < MAX_PROBE_RETRIES:
                    self._todo.insert(0, _Probe(pr.batch, pr.f_hz, retries=pr.retries + 1))
                self._iv_force_close = True
                self._plan_next_probe()
                return
            if util is not None:
                pr.busy, pr.mem_busy = util.gpu, util.memory
            else:
                pr.busy, pr.mem_busy = -1.0, -1.0
            self.points.append((pr, dt / max(1, n), watts))
        self._iv_force_close = True
        self._plan_next_probe()

    def _plan_next_probe(self) -> None:
        while not self._todo and self._second:
            b = self._second.pop(0)
            f = self._predicted_max_clock(b)
            if f is not None and all(not (p.batch == b and p.f_hz == f) for p, _, _ in self.points):
                self._todo.append(_Probe(b, f))
        if self._todo:
            self._batch, self._f = self._todo[0].batch, self._todo[0].f_hz
            if self._recover:
                self._f = min(self._f, self.table[0])
                self._todo[0].f_hz = self._f
        else:
            self._commit()

    def _fit(self) -> bool:
        pts = self.points
        if len(pts) < 2:
            return False
        has_util = all(p.busy >= 0 for p, _, _ in pts)
        sp = [
            StepPoint(p.batch, p.f_hz, t, p.busy if has_util else None,
                      p.mem_busy if has_util else None)
            for p, t, _ in pts
        ]  # fmt: skip
        clocks = {round(p.f_hz) for p, _, _ in pts}
        try:
            self.step_model = fit_step_model(sp, self.f_ref)
            pp = []
            for (p, _, w), s in zip(pts, sp, strict=True):
                parts = self.step_model.parts(p.batch, p.f_hz)
                u = s.utilization if s.utilization is not None else parts.utilization
                um = s.mem_utilization if s.mem_utilization is not None else parts.mem_utilization
                pp.append(PowerPoint(p.f_hz, w, u, um))
            floor = self.prior.v_floor if self.prior else 0.6
            if len(clocks) < 2:  # one clock: the floor comes from the prior (or a typical 0.6)
                self.power_model = _fit_one_clock(pp, self.f_ref, floor, self.prior)
            else:
                try:
                    self.power_model = fit_power_model(pp, self.f_ref)
                except HwtuneInputError:  # too few points to search the floor as well
                    self.power_model = fit_power_model(pp, self.f_ref, v_floor=floor)
        except HwtuneInputError:
            return False
        return True

    def _predicted_max_clock(self, batch: int) -> float | None:
        """The highest clock predicted to fit the cap with margin at ``batch``, for a probe.
        With every point at one clock ``f0`` the fit cannot tell static and memory power from
        dynamic power, yet a higher clock's power depends on the split: a clock above ``f0``
        is predicted at the most it can draw, all of the fitted power at ``f0`` scaled as
        dynamic power (x frac(f) / frac(f0), `dynamic_power_fraction` at the fit's floor).
        (The least-squares split put 12 W measured at 306 MHz on a Jetson AGX Orin as 11.8 W
        static, predicted 13 W at 1.3 GHz, and the probe drew 45 W for 3 s under a 20 W cap.)
        The tuner climbs a step at a time until a second clock makes the parts identifiable."""
        if not self._fit() or self.step_model is None or self.power_model is None:
            return None
        pm = self.power_model
        budget = self.cap_w * (1 - self.margin)
        clocks = self._measured_clocks()
        f0 = min(clocks) if len(clocks) == 1 else None
        best = None
        for f in self.table:
            parts = self.step_model.parts(batch, f)
            watts = pm.power_w(f, parts.utilization, parts.mem_utilization)
            if f0 is not None and f > f0:
                at_f0 = self.step_model.parts(batch, f0)
                scale = dynamic_power_fraction(f / pm.f_ref_hz, pm.v_floor) / (
                    dynamic_power_fraction(f0 / pm.f_ref_hz, pm.v_floor)
                )
                bound = pm.power_w(f0, at_f0.utilization, at_f0.mem_utilization) * scale
                watts = max(watts, bound)
            if watts <= budget:
                best = f
        return best

    # -- decision -------------------------------------------------------------------------------
    def _commit(self) -> None:
        if not self._fit() or self.step_model is None or self.power_model is None:
            raise HwtuneInputError("profiling", len(self.points), "at least two measured points")
        conv = CriticalBatch(b_noise=self.b_noise, s_min=1.0)
        clocks = self._measured_clocks()
        # points at one clock say nothing of the power above it (`_predicted_max_clock`): the
        # choice stays at or below it, and the run phase steps up one clock at a time
        table = [f for f in self.table if f <= min(clocks)] if len(clocks) == 1 else self.table
        try:
            self.choice = co_optimize(
                self.step_model, self.power_model, conv, self.batch_sizes, table,
                self.cap_w * (1 - self.margin), user_batch=self.base_batch,
                objective=self.objective, eta=self.eta, max_power_w=self._max_power(),
            )  # fmt: skip
        except HwtuneInputError as e:  # name the cap the user gave, not the cap less margin
            if e.field != "power cap":
                raise
            raise HwtuneInputError(
                "power cap", self.cap_w, f"{e.expected}, plus the margin of {self.margin:g}"
            ) from None
        self._b_noise_at_commit = self.b_noise
        self._refined = 0
        self.phase = "run"
        self._batch = self.choice.best.batch
        self._f = self.choice.best.frequency_hz
        if self._recover:
            self._f = self.table[0]

    def _max_power(self) -> float | None:
        """Zeus's MAXPOWER: the given one, else the device's maximum power limit, else None
        (the co-optimizer then takes the fitted model's power at the top clock, fully busy)."""
        if self.max_power_w is not None or self.objective != "mix":
            return self.max_power_w
        return self._device_max_power_w

    def _measured_clocks(self) -> set[float]:
        """The clocks of the fitted points."""
        return {p.f_hz for p, _, _ in self.points}

    def _second_clock(self, iv: Interval) -> bool:
        """The fitted points hold one clock and ``iv`` ran at another (the control stepped to
        it): a measurement that makes the power's parts identifiable (`_predicted_max_clock`),
        taken like a refinement whatever their count."""
        clocks = self._measured_clocks()
        return len(clocks) == 1 and iv.frequency_hz not in clocks

    def _refine(self, iv: Interval, util: object) -> None:
        """Learn from the committed point itself: add it to the fitted points and choose again
        (``refinements`` times after each commit). A choice near the cap is where the models
        matter most, and this is a measurement exactly there."""
        self._refined += 1
        pr = _Probe(iv.batch, iv.frequency_hz, steps=iv.steps)
        u = getattr(util, "gpu", None)
        um = getattr(util, "memory", None)
        pr.busy = u if u is not None else -1.0
        pr.mem_busy = um if um is not None else (-1.0 if u is None else 0.0)
        self.points.append((pr, (iv.end_s - iv.start_s) / iv.steps, iv.avg_power_w))
        refined = self._refined
        self._recommit()
        self._refined = refined

    def _recommit(self) -> None:
        """Choose again while running (a refinement, a changed noise scale). Unlike the first
        commit and `set_cap`, which refuse a cap that no candidate fits, this runs inside the
        user's training loop: when the refitted models put every candidate over the cap, the
        previous choice and clock stay (the noise scale is taken as seen, so the same change
        does not ask again every interval), and the measured-power feedback of `_control`
        keeps the cap: it steps the clock down when an interval crosses it."""
        try:
            self._commit()
        except HwtuneInputError as e:
            if e.field != "power cap":
                raise
            self._b_noise_at_commit = self.b_noise
            self.refits_over_cap += 1

    def _predict(self, f: float, k: float = 1.0) -> float:
        """Predicted power at clock ``f`` and the current batch, with the dynamic part scaled
        by ``k`` (the live calibration)."""
        assert self.step_model is not None and self.power_model is not None
        pm = self.power_model
        parts = self.step_model.parts(self._batch, f)
        static_mem = pm.static_w + pm.memory_w * parts.mem_utilization
        return static_mem + k * (
            pm.power_w(f, parts.utilization, parts.mem_utilization) - static_mem
        )

    def _calibration(self, iv: Interval) -> float:
        """k with measured = static + memory + k x predicted dynamic at the interval's clock:
        a misprediction is laid on the dynamic part, the part a hotter chip or another phase
        of training changes (static and DRAM power do not move with the GPU clock)."""
        base = self._predict(iv.frequency_hz, 0.0)
        dyn = self._predict(iv.frequency_hz) - base
        return max(0.0, (iv.avg_power_w - base) / dyn) if dyn > 0 else 1.0

    def _control(self, iv: Interval) -> None:
        """Feedback after a run-phase interval (see the module docstring)."""
        for f in list(self._held):
            self._held[f] -= 1
            if self._held[f] <= 0:
                del self._held[f]
        measured = iv.avg_power_w
        k = self._calibration(iv)
        budget = self.cap_w * (1 - self.margin)
        i = self.table.index(self._f)
        if measured > self.cap_w:
            self._held[self._f] = self.hold_intervals
            fits = [j for j in range(i) if self._predict(self.table[j], k) <= budget]
            j = max(fits) if fits else 0
            if abs(k - 1.0) > 0.1 and j > 0:
                j -= 1  # the model was far off: one clock more of safety
            self._f = self.table[j]
        elif measured < self.cap_w * (1 - self.headroom) and i + 1 < len(self.table):
            up = self.table[i + 1]
            # for time the cap is the only limit on the clock; for energy and mix the committed
            # clock is the optimum itself, and headroom under the cap is no reason to pass it
            ceiling = self.table[-1]
            if self.objective != "time" and self.choice is not None:
                ceiling = self.choice.best.frequency_hz
            if up <= ceiling and up not in self._held and self._predict(up, k) <= budget:
                self._f = up
        if (
            self._estimator is not None
            and self._b_noise_at_commit is not None
            and max(self.b_noise, self._b_noise_at_commit)
            > self.recommit_ratio * min(self.b_noise, self._b_noise_at_commit)
        ):
            f_now = self._f
            self._recommit()
            self._f = min(self._f, f_now) if measured > self.cap_w else self._f

    # -- intervals ------------------------------------------------------------------------------
    def _restart_interval(self) -> None:
        """Open a new interval now; a failed reading leaves it to the next `step_end`."""
        try:
            self._begin_interval()
            self._iv_open = True
        except METER_FAILURES as e:
            self._meter_failed(e)

    def _begin_interval(self) -> None:
        self._iv_t0 = self.device.now_s()
        self._iv_e0 = self.device.energy_j()
        self._iv_gaps = energy_gaps(self.device)
        self._iv_steps = 0
        self._iv_batch, self._iv_f, self._iv_phase = self._batch, self._f, self.phase
        self._iv_cap = self.cap_w
        self._iv_force_close = False

    def _close_interval(self, now: float) -> None:
        e1 = self.device.energy_j()
        check_energy_gaps(self.device, self._iv_gaps, "interval")
        iv = Interval(
            start_s=self._iv_t0, end_s=now, energy_j=e1 - self._iv_e0,
            steps=self._iv_steps, batch=self._iv_batch, frequency_hz=self._iv_f,
            phase=self._iv_phase, cap_w=self._iv_cap,
        )  # fmt: skip
        self.history.append(iv)
        was_recovering = self._recover
        # a glitched reading (`Interval.valid`) says nothing about the cap: keep the last verdict
        self._recover = iv.over_cap if iv.valid else was_recovering
        if iv.phase == "profile" and iv.over_cap:
            if self._todo and self._todo[0].steps and not self._iv_force_close:
                self._finish_probe(now)  # cut the probe: it measured enough to learn from
            self._make_safe()
        elif iv.phase == "run" and self.phase == "run":
            util = self.device.utilization()
            if not iv.valid:
                pass  # a meter glitch: keep the clock, learn nothing from this interval
            elif (
                not iv.over_cap
                and iv.steps
                and (self._refined < self.refinements or self._second_clock(iv))
            ):
                self._refine(iv, util)
            else:
                self._control(iv)
        if was_recovering and not self._recover and self.phase == "profile" and self._todo:
            pr = self._todo[0]
            if pr.steps == 0:
                f = self._predicted_max_clock(pr.batch)
                pr.f_hz = f if f is not None else self.table[0]
                self._f = pr.f_hz
        self._begin_interval()

    def _make_safe(self) -> None:
        """After an interval over the cap during profiling: the next runs at the lowest clock."""
        self._f = self.table[0]
        if self._todo and self._todo[0].steps == 0:
            self._todo[0].f_hz = self._f

    def summary(self) -> dict[str, object]:
        over = [iv for iv in self.history if iv.over_cap]
        return {
            "phase": self.phase,
            "cap_w": self.cap_w,
            "batch": self._batch,
            "frequency_hz": self._f,
            "profile_steps": self.profile_step_count,
            "profile_points": len(self.points),
            "intervals": len(self.history),
            "intervals_over_cap": len(over),
            "max_consecutive_over_cap": _max_run(iv.over_cap for iv in self.history),
            "refits_over_cap": self.refits_over_cap,
            "choice": self.choice.best.to_dict() if self.choice else None,
            "b_noise": self.b_noise,
        }


def _real(v: object) -> bool:
    """A real number (int, float, numpy's scalars), not a bool (True would pass as 1)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _int(v: object) -> bool:
    """An int, not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def _max_limit(caps: Capabilities | None) -> float | None:
    """The device's maximum power limit (Zeus's MAXPOWER), or None when it reports none."""
    rng = caps.power_limit_range_w if caps is not None else None
    return rng[1] if rng and rng[1] > 0 and math.isfinite(rng[1]) else None


def _spread(batches: list[int]) -> list[int]:
    """Three profile batches: the smallest, the geometric middle, the largest."""
    if len(batches) <= 3:
        return list(batches)
    lo, hi = batches[0], batches[-1]
    mid = min(batches, key=lambda b: abs(math.log(b) - 0.5 * (math.log(lo) + math.log(hi))))
    return sorted({lo, mid, hi})


def _fit_one_clock(
    pts: list[PowerPoint], f_ref: float, v_floor: float, prior: PowerModel | None
) -> PowerModel:
    """With points at a single clock only static + dynamic (+ memory) are identifiable up to
    the clock shape: fit them with the floor fixed; with fewer points than parameters, keep
    the prior's memory power."""
    with_mem = len(pts) >= 3 and len({round(p.mem_utilization, 6) for p in pts}) > 1
    if not with_mem and prior is not None and prior.memory_w:
        adj = [
            PowerPoint(p.f_hz, max(0.0, p.power_w - prior.memory_w * p.mem_utilization),
                       p.utilization, 0.0)
            for p in pts
        ]  # fmt: skip
        m = fit_at_floor(adj, f_ref, v_floor, False)[0]
        return PowerModel(m.static_w, m.dynamic_w, f_ref, v_floor, prior.memory_w)
    return fit_at_floor(pts, f_ref, v_floor, with_mem)[0]


def _max_run(flags: object) -> int:
    best = run = 0
    for f in flags:  # type: ignore[attr-defined]
        run = run + 1 if f else 0
        best = max(best, run)
    return best
