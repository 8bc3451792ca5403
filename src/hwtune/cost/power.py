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

from hwtune.hardware.device import Device, PeakTflops

STATIC_FRACTION = 0.12
"""Idle/static power as a fraction of board power (H100 SXM idles near 70-90 W of 700 W in
nvidia-smi readings; an assumption where the catalog has no ``idle_w``)."""


def clock_fraction(device: Device, power_cap_w: float) -> float:
    """Sustained clock under ``power_cap_w`` relative to the clock of the catalog peaks."""
    ref = device.reference_power_w or device.tdp_w
    if power_cap_w >= ref:
        return 1.0
    static = device.idle_w if device.idle_w is not None else STATIC_FRACTION * ref
    if power_cap_w <= static:
        raise ValueError(f"power cap {power_cap_w} W is below the static power {static:.0f} W")
    frac = ((power_cap_w - static) / (ref - static)) ** (1.0 / 3.0)
    floor = (device.min_clock_mhz or 0.0) / device.boost_clock_mhz
    return max(frac, floor)


def power_limited(device: Device, power_cap_w: float | None = None) -> Device:
    """``device`` with its peaks scaled to the clock it sustains at ``power_cap_w`` (default: its
    own board power, which matters for parts whose peaks are quoted at a higher power)."""
    cap = power_cap_w if power_cap_w is not None else device.tdp_w
    f = clock_fraction(device, cap)
    if f >= 1.0:
        return device
    peaks = {
        k: (v * f if v is not None else None) for k, v in device.peak_tflops.model_dump().items()
    }
    return device.model_copy(update={"peak_tflops": PeakTflops(**peaks)})
