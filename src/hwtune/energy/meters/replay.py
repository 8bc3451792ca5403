"""Replay a recorded power trace as a device: tests and offline analysis without hardware.

A trace is a CSV with a header and the columns ``time_s`` and ``power_w`` (required) and
optionally ``energy_j`` (a cumulative counter; else energy is the trapezoid integral of power),
``frequency_hz``, ``utilization`` and ``mem_utilization``. The replay has its own clock: the
caller moves it with `ReplayDevice.advance` or `ReplayDevice.seek`, or passes ``clock`` (e.g.
``time.monotonic``) to replay in real time from the moment the device is opened.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from hwtune.energy.meters.base import BaseDevice, Capabilities, MeterError, Utilization
from hwtune.structured_file import repeated_columns

REQUIRED = ("time_s", "power_w")
COLUMNS = (*REQUIRED, "energy_j", "frequency_hz", "utilization", "mem_utilization")
"""Every column a trace may have (the module docstring says what each means); another is refused,
not ignored: a misspelt ``enrgy_j`` left energy to the trapezoid of power without a word."""
MAX_POWER_W = 100_000.0
"""The most one metered device may draw in a trace: a whole 8-GPU server is ~10 kW, so this
leaves an order of magnitude and refuses only readings no meter gives (a 1e308 W reading made
the energy infinite and the average power NaN)."""


class ReplayDevice(BaseDevice):
    """A recorded trace played back (read-only: no clock or limit control)."""

    def __init__(
        self,
        trace: str | Path | Sequence[dict[str, float]],
        clock: Callable[[], float] | None = None,
    ) -> None:
        rows = _load(trace)
        self.name = f"replay:{trace}" if isinstance(trace, str | Path) else "replay"
        self._t = [r["time_s"] for r in rows]
        self._p = [r["power_w"] for r in rows]
        self._cols = {k: [r.get(k) for r in rows] for k in rows[0]}
        self._has_counter = "energy_j" in rows[0]
        if self._has_counter:
            self._e = [r["energy_j"] for r in rows]
        else:
            self._e = [0.0]
            for i in range(1, len(rows)):
                dt = self._t[i] - self._t[i - 1]
                self._e.append(self._e[-1] + 0.5 * (self._p[i] + self._p[i - 1]) * dt)
        self._virtual = self._t[0]
        self._wall = clock
        self._wall0 = clock() if clock else 0.0
        super().__init__(clock=self._now)
        self._util_prev: float | None = None

    def _now(self) -> float:
        if self._wall is not None:
            return self._t[0] + (self._wall() - self._wall0)
        return self._virtual

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise MeterError("advance", seconds, "a non-negative number of seconds")
        self.seek(self._virtual + seconds)

    def seek(self, t_s: float) -> None:
        self._check(t_s)
        self._virtual = t_s

    @property
    def duration_s(self) -> float:
        return self._t[-1] - self._t[0]

    def _check(self, t: float) -> None:
        if not self._t[0] - 1e-12 <= t <= self._t[-1] + 1e-9:
            raise MeterError(
                "replay time", t, f"a time within the trace [{self._t[0]:g}, {self._t[-1]:g}] s"
            )

    def _interp(self, ys: Sequence[float], t: float) -> float:
        self._check(t)
        i = bisect.bisect_right(self._t, t)
        if i >= len(self._t):
            return float(ys[-1])
        if i == 0:
            return float(ys[0])
        t0, t1 = self._t[i - 1], self._t[i]
        w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return float(ys[i - 1]) + w * (float(ys[i]) - float(ys[i - 1]))

    def energy_j(self) -> float:
        """The recorded counter (interpolated), or the exact integral of the piecewise-linear
        power trace up to now."""
        t = self.now_s()
        if self._has_counter:
            return self._interp(self._e, t)
        self._check(t)
        i = max(1, bisect.bisect_right(self._t, t))
        if i >= len(self._t):
            return self._e[-1]
        t0 = self._t[i - 1]
        return self._e[i - 1] + 0.5 * (self._p[i - 1] + self._interp(self._p, t)) * (t - t0)

    def power_w(self) -> float:
        return self._interp(self._p, self.now_s())

    def frequency_hz(self) -> float | None:
        col = self._cols.get("frequency_hz")
        if col is None:
            return None
        t = self.now_s()
        i = max(0, bisect.bisect_right(self._t, t) - 1)
        return float(col[i])  # type: ignore[arg-type]

    def utilization(self) -> Utilization | None:
        col = self._cols.get("utilization")
        if col is None:
            return None
        u = self._interp(col, self.now_s())  # type: ignore[arg-type]
        m = self._cols.get("mem_utilization")
        um = self._interp(m, self.now_s()) if m is not None else 0.0  # type: ignore[arg-type]
        return Utilization(gpu=u, memory=um)

    def capabilities(self) -> Capabilities:
        return Capabilities(energy=True, power=True, utilization="utilization" in self._cols)


def _load(trace: str | Path | Sequence[dict[str, float]]) -> list[dict[str, float]]:
    where = str(trace) if isinstance(trace, str | Path) else "trace"
    header: list[str] = []
    if isinstance(trace, str | Path):
        try:
            with open(trace, newline="") as fh:
                reader = csv.DictReader(fh)
                raw = list(reader)
                header = list(reader.fieldnames or ())
        except OSError as e:
            raise MeterError("trace", str(trace), f"a readable CSV file ({e.strerror})") from None
        except UnicodeDecodeError as e:
            raise MeterError("trace", str(trace), f"a UTF-8 CSV file ({e.reason})") from None
    else:
        raw = [dict(r) for r in trace]  # type: ignore[arg-type]
    twice = repeated_columns(header)
    if twice:
        raise MeterError(f"{where} header", twice[0], "each column once")
    if len(raw) < 2:
        raise MeterError(where, f"{len(raw)} rows", "at least two samples")
    missing = [c for c in REQUIRED if c not in raw[0]]
    if missing:
        raise MeterError(where, f"no column {missing[0]}", "columns time_s and power_w")
    # a header cell left empty (a trailing comma) names no column: refused only above a value
    blank = any(r.get("") not in (None, "") for r in raw)
    unknown = [c for c in raw[0] if c not in COLUMNS and (c != "" or blank)]
    if unknown:
        raise MeterError(f"{where} header", unknown[0], f"only the columns {', '.join(COLUMNS)}")
    rows: list[dict[str, float]] = []
    for n, r in enumerate(raw, start=2):
        try:
            row = {k: float(v) for k, v in r.items() if v not in (None, "")}
        except (TypeError, ValueError):
            raise MeterError(f"{where} line {n}", r, "numbers in every column") from None
        # the first row's filled cells name the trace's columns; every row fills them all
        cols = REQUIRED if not rows else tuple(rows[0])
        empty = next((k for k in cols if k not in row), None)
        if empty is not None:
            raise MeterError(f"{where} line {n}", "", f"a number in {empty} (the cell is empty)")
        extra = next((k for k in row if rows and k not in rows[0]), None)
        if extra is not None:  # the columns are the first row's: this one would be ignored
            raise MeterError(
                f"{where} line {n}", row[extra], f"an empty {extra}, as on the first row"
            )
        bad = next((k for k, v in row.items() if not math.isfinite(v)), None)
        if bad is not None:
            raise MeterError(f"{where} line {n}", row[bad], f"a finite number in {bad}")
        if rows and row["time_s"] <= rows[-1]["time_s"]:
            raise MeterError(f"{where} line {n}", row["time_s"], "strictly increasing time_s")
        if not 0 <= row["power_w"] <= MAX_POWER_W:
            raise MeterError(
                f"{where} line {n}", row["power_w"],
                f"power_w in [0, {MAX_POWER_W:,.0f}] W (what one device can draw)",
            )  # fmt: skip
        if rows and "energy_j" in row and row["energy_j"] < rows[-1]["energy_j"]:
            raise MeterError(
                f"{where} line {n}", row["energy_j"], "a cumulative energy_j that never decreases"
            )
        rows.append(row)
    return rows
