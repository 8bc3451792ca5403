"""Power and clocks: the sustained clock a device reaches under a power limit.

CMOS dynamic power is P_dyn = a C V^2 f and, inside the DVFS range, voltage scales with
frequency, so P_dyn grows as f^3 (e.g. Weste & Harris, "CMOS VLSI Design", 4th ed., §5.1;
the cube law used by GPU DVFS studies such as You et al. NSDI'23 "Zeus", §2.2). With a static
part P_static that does not scale, a device whose peak figures hold at power P_ref sustains

    f / f_ref = ((P_cap - P_static) / (P_ref - P_static)) ** (1/3)

under a cap P_cap < P_ref. Tensor throughput scales with the SM clock; HBM bandwidth does not
(its clock is separate). P_static defaults to ``STATIC_FRACTION`` of P_ref when the catalog has
no measured idle power.
"""

from __future__ import annotations

import functools

from hwtune.errors import HwtuneInputError
from hwtune.hardware.device import (  # noqa: F401 - STATIC_FRACTION re-exported
    STATIC_FRACTION,
    Device,
    PeakTflops,
    device_power_figures,
)


def clock_fraction(device: Device, power_cap_w: float) -> float:
    """Sustained clock under ``power_cap_w`` relative to the clock of the catalog peaks."""
    static, dynamic = device_power_figures(device)
    if power_cap_w >= static + dynamic:
        return 1.0
    if power_cap_w <= static:
        raise HwtuneInputError("power cap", power_cap_w,
                               f"a power above the static power of {device.name} ({static:g} W)")  # fmt: skip
    frac = frequency_ratio_for_power(static, dynamic, power_cap_w)  # v_floor 0: the cube law
    floor = (device.min_clock_mhz or 0.0) / device.boost_clock_mhz
    return max(frac, floor)


@functools.lru_cache(maxsize=256)
def power_limited(
    device: Device, power_cap_w: float | None = None, sustained: bool = True
) -> Device:
    """``device`` with its peaks scaled to the clock it sustains at ``power_cap_w`` (default: its
    own board power, which matters for parts whose peaks are quoted at a higher power).

    With ``sustained`` (training steps: GEMMs back to back for seconds), the device's
    ``sustained_gemm_fraction`` applies as well: a power-limited chip under continuous dense
    GEMMs settles below the clock of the short bursts its efficiencies were measured at (one
    H200 SXM at its 700 W limit: 1440 MHz and 657 TFLOP/s against 800 in bursts, i.e. 0.82;
    BENCHMARKS.md "The NVML meter on a real GPU"), and the cube law above scales from that
    sustained point. ``sustained=False`` keeps the burst rates (the spec-sheet view).

    A measured profile (tier 2) prices GEMMs and attention at its own rates, not at the peaks,
    so the same clock fraction is handed to it (`DeviceProfile.clock_fraction`: its hot GEMMs
    and its training and prefill attention slow by it; memory-bound points do not, as HBM
    bandwidth does not here). Its rates are bursts unless it says otherwise (``gemm_clocks``:
    `hwtune bench` times each shape for about 0.2 s, which the H200 ran at its boost clock), so
    the sustained fraction applies to them as to the spec sheet's efficiencies, and
    ``sustained=False`` (``--burst-clocks``) keeps them as measured. A profile whose rates were
    taken at the sustained clock (``gemm_clocks: sustained``) already holds that fraction: only
    the power cap's cube law applies to it."""
    cap = power_cap_w if power_cap_w is not None else device.tdp_w
    f = clock_fraction(device, cap)
    if sustained_fraction_applies(device, sustained):
        f *= device.sustained_gemm_fraction  # type: ignore[operator]
    if f >= 1.0:
        return device
    peaks = {
        k: (v * f if v is not None else None) for k, v in device.peak_tflops.model_dump().items()
    }
    update: dict = {"peak_tflops": PeakTflops(**peaks)}
    if device.profile is not None:
        update["profile"] = device.profile.model_copy(update={"clock_fraction": f})
    return device.model_copy(update=update)


def sustained_fraction_applies(device: Device, sustained: bool = True) -> bool:
    """Whether `power_limited` scales ``device``'s GEMM rates by its ``sustained_gemm_fraction``:
    under sustained clocks, on a device that has one below 1, whose rates are bursts (the spec
    sheet's efficiencies, or a profile's ``gemm_clocks: burst``)."""
    sus = device.sustained_gemm_fraction
    if not sustained or sus is None or sus >= 1.0:
        return False
    return device.profile is None or device.profile.gemm_clocks == "burst"


# --- power at a frequency (DVFS with a voltage floor) -----------------------------------------
#
# Dynamic CMOS power is P_dyn = a C V^2 f (Weste & Harris, "CMOS VLSI Design", 4th ed., §5.1).
# Inside the DVFS range the regulator raises V with f, roughly in proportion, which gives the
# cube law above; below some frequency the voltage cannot drop further (the V_min of the
# V/f table), and from there down power falls only linearly with f (Mei, Wang & Chu, "A
# survey and measurement study of GPU DVFS on energy conservation", Digital Communications
# and Networks 2017: measured V/f tables hold the voltage at its minimum on the low clocks). With f and V as fractions of their maxima,
#
#     V/V_max = max(v_floor, f/f_max),   P_dyn(f) / P_dyn(f_max) = (f/f_max) (V/V_max)^2,
#
# so ``v_floor`` = 0 is the pure cube law of `clock_fraction` and ``v_floor`` = 1 a
# constant voltage (power linear in f). Utilization u (the share of time kernels run, as
# NVML's utilization.gpu reports it) scales the dynamic part; a memory term adds DRAM power
# in proportion to the share of time memory-bound work runs.


def voltage_ratio(f_ratio: float, v_floor: float) -> float:
    """V / V_max at clock ``f_ratio`` = f / f_max, with the voltage floor ``v_floor``."""
    if not 0.0 <= v_floor <= 1.0:
        raise ValueError(f"v_floor {v_floor} outside [0, 1]")
    return max(v_floor, f_ratio)


def dynamic_power_fraction(f_ratio: float, v_floor: float) -> float:
    """P_dyn(f) / P_dyn(f_max) = (f/f_max) (V(f)/V_max)^2 (see the comment above)."""
    if f_ratio < 0:
        raise ValueError(f"frequency ratio {f_ratio} is negative")
    v = voltage_ratio(f_ratio, v_floor)
    return f_ratio * v * v


def power_at_frequency(
    static_w: float,
    dynamic_max_w: float,
    f_ratio: float,
    utilization: float = 1.0,
    v_floor: float = 0.0,
    memory_w: float = 0.0,
    memory_utilization: float = 0.0,
) -> float:
    """Average power, W: static + u * P_dyn,max * f V^2 share + memory power * memory share.

    ``dynamic_max_w`` is the dynamic power at f_max and full utilization; ``memory_w`` the DRAM
    power while memory-bound work runs (0 when the meter does not see DRAM)."""
    return (
        static_w
        + utilization * dynamic_max_w * dynamic_power_fraction(f_ratio, v_floor)
        + memory_w * memory_utilization
    )


def frequency_ratio_for_power(
    static_w: float,
    dynamic_max_w: float,
    power_w: float,
    utilization: float = 1.0,
    v_floor: float = 0.0,
    memory_w: float = 0.0,
    memory_utilization: float = 0.0,
) -> float:
    """The largest f / f_max in [0, 1] whose `power_at_frequency` is at most ``power_w``
    (the closed-form inverse: cube root above the floor, linear below it); 0 when even an idle
    clock does not fit, 1 when f_max fits."""
    budget = power_w - static_w - memory_w * memory_utilization
    if budget <= 0:
        return 0.0
    dyn = utilization * dynamic_max_w
    if dyn <= 0 or budget >= dyn:
        return 1.0
    share = budget / dyn  # = f V^2 share, in (0, 1)
    if share <= v_floor**3:
        return share / (v_floor * v_floor)
    return share ** (1.0 / 3.0)


def step_energy_j(
    step_time_s: float,
    busy_s: float,
    static_w: float,
    dynamic_max_w: float,
    f_ratio: float,
    v_floor: float = 0.0,
    memory_busy_s: float = 0.0,
    memory_w: float = 0.0,
) -> float:
    """Energy of one step on one device, J: static power over the whole step, dynamic power
    at clock ``f_ratio`` over the ``busy_s`` seconds kernels run, DRAM power over
    ``memory_busy_s`` (the integral of `power_at_frequency` over the step)."""
    if busy_s > step_time_s * (1 + 1e-9) or busy_s < 0:
        raise ValueError(f"busy time {busy_s} s outside [0, step time {step_time_s} s]")
    return (
        static_w * step_time_s
        + dynamic_max_w * dynamic_power_fraction(f_ratio, v_floor) * busy_s
        + memory_w * memory_busy_s
    )
