"""Tier 3: serving latencies corrected by the user's own measured runs of the same deployment.

Tier 1 (spec sheets) and tier 2 (a measured kernel profile) price the GPU work of each engine
step. What an engine adds around it is in neither: the front end's per-request hops (HTTP,
tokenization, IPC), eager-mode prefill launch costs, kernels of a given engine version running
below the catalog's efficiencies (VALIDATION.md, "What is missing"). On the published Hopper
rows these leave tier-1 TTFT 0.54x of the measured values at the median, by amounts that differ
per engine and model far more than per GPU. A user who has benchmarked a few configurations of
one engine and model can correct the rest with an affine map per metric,

    measured ~= scale * simulated + offset,    offset >= 0,

fitted by least squares on the relative residuals ((scale * s_i + offset) / m_i - 1), so that
every run weighs the same whatever its size. ``offset`` is a fixed latency per request (TTFT)
or per output token (TPOT) and is never negative; ``scale`` absorbs a rate ratio (kernel
efficiency, queueing that grows with the prefill time). Nothing here is physics: it is a
statistical correction, cross-validated on the published rows (`benchmarks/serve_validation.py
--tier3`, VALIDATION.md "Tier 3"), and ``hwtune serve --correction`` prints it beside the
simulation, never in place of it. A correction records what it was fitted to (model, GPU,
precision, KV-cache precision, engine, tier, speculative decoding, the host and front-end
options, the scheduling policy: `FittedTo`) and is refused for any other deployment (`check_applies`): a scale fitted
to one engine's overheads on one model says nothing of another's, and one fitted to runs
simulated without a cost (a front-end limit, eager prefill launches) would count it twice when
applied to a simulation that has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from hwtune.errors import HwtuneInputError

if TYPE_CHECKING:
    from collections.abc import Sequence


class AffineMap(BaseModel):
    """``scale * x + offset`` for one latency metric (seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    scale: float = Field(gt=0)
    offset_s: float = Field(default=0.0, ge=0)

    def __call__(self, x: np.ndarray | float) -> np.ndarray | float:
        return self.scale * x + self.offset_s


class FittedTo(BaseModel):
    """The deployment a correction's runs were simulated as: the parts that change what the
    simulation leaves out (the engine's overheads, the kernels' efficiency on that model and
    GPU) or what it prices (tier 1 spec sheets or a tier 2 profile, the KV-cache precision,
    speculative decoding, the host's launches and the front end's token rate: the options of
    `hwtune.serve.config.ReplicaConfig` of those names), and the scheduling policy (a scale
    fitted to chunked-prefill queueing does not describe static batches). TP, lengths and
    clients vary within
    the runs and may vary when it is applied.

    The fields after ``tier`` were added later: a file written before them leaves them out, and
    a field a file leaves out is not checked (`recorded`); one it gives is, None included
    (``frontend_tokens_per_s`` None: no front-end limit)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    model: str
    gpu: str
    precision: str
    engine: str | None = None
    tier: int = Field(ge=1, le=2)
    kv_precision: str | None = None
    spec_tokens: int | None = Field(default=None, ge=0)
    spec_acceptance: float | None = Field(default=None, ge=0, le=1)
    eager_prefill: bool | None = None
    overlap_schedule: bool | None = None
    host_timeline: bool | None = None
    frontend_tokens_per_s: float | None = Field(default=None, gt=0)
    scheduler: str | None = None

    def recorded(self) -> list[str]:
        """The fields this description gives, in declaration order: all of them when built
        here, only those present in a file read back."""
        return [k for k in type(self).model_fields if k in self.model_fields_set or k in
                _ALWAYS_RECORDED]  # fmt: skip


_ALWAYS_RECORDED = ("model", "gpu", "precision", "engine", "tier")
"""The fields every file with ``fitted_to`` has had (``engine`` None meant no engine preset)."""


class ServeCorrection(BaseModel):
    """Per-metric maps fitted to ``runs`` measured runs, with their leave-one-out errors.
    ``fitted_to`` is None only in files written before it was recorded (never checked)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    ttft: AffineMap
    tpot: AffineMap
    runs: int = Field(ge=1)
    loo_ttft_error: float | None = Field(default=None, ge=0)
    loo_tpot_error: float | None = Field(default=None, ge=0)
    source: str = ""
    fitted_to: FittedTo | None = None


def check_applies(corr: ServeCorrection, target: FittedTo) -> None:
    """Raise `HwtuneInputError` naming every part of ``target`` that differs from what ``corr``
    was fitted to, with both values (nothing for a correction that does not record it, and no
    field that its file leaves out: `FittedTo.recorded`)."""
    have = corr.fitted_to
    if have is None:
        return

    def show(v: object) -> str:
        return "none" if v is None else repr(v)

    diff = [f"{k} {show(getattr(have, k))}, not {show(getattr(target, k))}"
            for k in have.recorded() if getattr(have, k) != getattr(target, k)]  # fmt: skip
    if diff:
        raise HwtuneInputError("correction", "fitted to " + "; ".join(diff),
                               "a correction fitted to runs of the deployment simulated (fit one "
                               "with `hwtune serve calibrate` on its measured runs)")  # fmt: skip


def fit_affine(simulated: Sequence[float], measured: Sequence[float]) -> AffineMap:
    """The map minimising sum(((scale * s_i + offset) / m_i - 1)^2) with offset >= 0.

    One run fixes the scale alone (offset 0). Two or more solve the 2x2 normal equations; when
    their offset comes out negative the constraint binds and the scale is refitted with offset 0
    (so too when the runs would need a scale <= 0, measured latency falling as the simulated
    one rises: no affine correction describes them, and the scale-only fit is returned). A
    scale that comes out 0, infinite or NaN (values spanning hundreds of orders of magnitude)
    is refused: such runs do not determine a correction.
    """
    s = np.asarray(simulated, dtype=float)
    m = np.asarray(measured, dtype=float)
    if s.shape != m.shape or s.size == 0:
        raise HwtuneInputError("runs", f"{s.size} simulated, {m.size} measured",
                               "one or more simulated/measured pairs")  # fmt: skip
    for name, v in (("simulated", s), ("measured", m)):
        bad = ~np.isfinite(v) | (v <= 0)
        if bad.any():
            raise HwtuneInputError(f"{name} latency", float(v[bad][0]), "a positive number")
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        x, y = s / m, 1.0 / m
        scale_only = _determined(float(x.sum() / (x * x).sum()), 0.0, s, m)
        if s.size == 1:
            return scale_only
        a = np.array([[x @ x, x @ y], [x @ y, y @ y]])
        b = np.array([x.sum(), y.sum()])
        if not np.isfinite(a).all():  # the products overflowed: only the scale can be fitted
            return scale_only
        try:
            scale, offset = np.linalg.solve(a, b)
        except np.linalg.LinAlgError:  # all runs at one measured value and ratio: scale only
            return scale_only
    if offset < 0 or scale <= 0 or not (np.isfinite(scale) and np.isfinite(offset)):
        return scale_only
    return AffineMap(scale=float(scale), offset_s=float(offset))


def _determined(scale: float, offset: float, s: np.ndarray, m: np.ndarray) -> AffineMap:
    """The map ``scale * x + offset``, refused when the runs do not determine it: a scale of 0
    or not finite (simulated and measured latencies that many orders of magnitude apart)."""
    if not (np.isfinite(scale) and scale > 0 and np.isfinite(offset)):
        raise HwtuneInputError("runs", f"simulated {float(s.min()):.3g}-{float(s.max()):.3g} s, "
                               f"measured {float(m.min()):.3g}-{float(m.max()):.3g} s",
                               "runs that determine a correction (the fitted scale is "
                               f"{scale:g}: measured and simulated latencies too many orders "
                               "of magnitude apart)")  # fmt: skip
    return AffineMap(scale=scale, offset_s=offset)


def loo_error(simulated: Sequence[float], measured: Sequence[float]) -> float | None:
    """Median relative error of each run predicted by the map fitted to the others (None for
    fewer than three runs)."""
    if len(simulated) < 3:
        return None
    return float(np.median(held_out_errors(simulated, measured)))


def held_out_errors(
    simulated: Sequence[float],
    measured: Sequence[float],
    k: int | None = None,
    draws: int = 20,
    seed: int = 0,
) -> np.ndarray:
    """Relative errors of runs predicted by maps fitted to other runs of the same group.

    ``k`` None: leave-one-out (every run predicted from all the others). Otherwise ``draws``
    seeded random choices of ``k`` fitting runs, each predicting all the runs it left out; an
    empty array when the group has no more than ``k`` runs."""
    s = np.asarray(simulated, dtype=float)
    m = np.asarray(measured, dtype=float)
    n = s.size
    out: list[float] = []
    if k is None:
        for i in range(n if n >= 2 else 0):
            keep = np.arange(n) != i
            out.append(abs(float(fit_affine(s[keep], m[keep])(s[i])) - m[i]) / m[i])
        return np.array(out)
    if k < 1:
        raise HwtuneInputError("k", k, "a positive number of fitting runs")
    if n <= k:
        return np.array([])
    rng = np.random.default_rng(seed)
    for _ in range(draws):
        pick = rng.choice(n, size=k, replace=False)
        rest = np.setdiff1d(np.arange(n), pick)
        f = fit_affine(s[pick], m[pick])
        out.extend(np.abs(f(s[rest]) - m[rest]) / m[rest])
    return np.array(out)


def fit_correction(
    sim_ttft: Sequence[float],
    meas_ttft: Sequence[float],
    sim_tpot: Sequence[float],
    meas_tpot: Sequence[float],
    source: str = "",
    fitted_to: FittedTo | None = None,
) -> ServeCorrection:
    """Both maps from paired simulated and measured mean TTFT and TPOT (seconds)."""
    return ServeCorrection(
        ttft=fit_affine(sim_ttft, meas_ttft),
        tpot=fit_affine(sim_tpot, meas_tpot),
        runs=len(sim_ttft),
        loo_ttft_error=loo_error(sim_ttft, meas_ttft),
        loo_tpot_error=loo_error(sim_tpot, meas_tpot),
        source=source,
        fitted_to=fitted_to,
    )


def corrected_stats(
    corr: ServeCorrection, ttft: np.ndarray, tpot: np.ndarray, output: np.ndarray
) -> dict[str, dict[str, float]]:
    """TTFT, TPOT and E2E statistics (mean, p50, p90, p99) of the corrected requests.

    Per request: TTFT' = map(TTFT); TPOT' = map(TPOT) where it is defined (two or more output
    tokens); E2E' = TTFT' + (output - 1) * TPOT'."""
    from hwtune.serve.metrics import stats

    t = np.asarray(corr.ttft(ttft), dtype=float)
    p = np.asarray(tpot, dtype=float)
    defined = np.isfinite(p)
    p2 = np.where(defined, corr.tpot(np.where(defined, p, 0.0)), np.nan)
    e2e = t + np.maximum(np.asarray(output) - 1, 0) * np.where(defined, p2, 0.0)
    return {"ttft_s": stats(t), "tpot_s": stats(p2[defined]), "e2e_s": stats(e2e)}


def load_correction(path: str | Path) -> ServeCorrection:
    """Read a correction written by ``hwtune serve calibrate`` (YAML)."""
    from hwtune.structured_file import read_model

    return read_model(path, "correction", ServeCorrection, "a mapping with ttft, tpot and runs")


def save_correction(corr: ServeCorrection, path: str | Path) -> None:
    """Write ``corr`` as YAML (what `load_correction` reads)."""
    Path(path).write_text(yaml.safe_dump(corr.model_dump(), sort_keys=False))


__all__ = [
    "AffineMap",
    "FittedTo",
    "ServeCorrection",
    "check_applies",
    "corrected_stats",
    "fit_affine",
    "fit_correction",
    "held_out_errors",
    "load_correction",
    "loo_error",
    "save_correction",
]
