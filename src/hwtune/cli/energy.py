"""`hwtune energy`: power meters, batch-size x clock co-optimization under a power cap, the
online tuner on a simulated device, cluster energy per step, per-stage pipeline clocks.
Parse, call `hwtune.energy`, render; no formulas here."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hwtune.cli.parsing import (
    ESTIMATE_FLAGS,
    fail,
    flag_error,
    output_path,
    plot_suffixes,
    positive_ints,
)
from hwtune.errors import HwtuneInputError

if TYPE_CHECKING:
    from hwtune.energy.profiles import Profile

MAX_TUNE_STEPS = 10_000_000
"""The most training steps `energy tune` simulates: ten million, about ten times the step count
of the longest pretraining runs (Llama 3.1 405B: 15.6T tokens at up to 16M tokens a step, about
a million steps); ~25 us a step here, so the bound is minutes, and a typo (1e20) is refused
instead of running for ever."""

app = typer.Typer(
    name="energy",
    help="Power meters, GPU clock x batch-size tuning under a power cap, energy per step.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document")]


def _emit(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _mhz(hz: float) -> str:
    return f"{hz / 1e6:.0f} MHz"


@app.command("profiles")
def profiles_cmd(as_json: JsonOpt = False) -> None:
    """List the edge (Jetson) and data-center (nvidia-smi -pl) profiles: clock tables, power
    modes or power-limit ranges, memory bandwidth."""
    from hwtune.energy.profiles import all_profiles

    table = all_profiles()
    if as_json:
        _emit({n: {"kind": p.kind, **p.model_dump(mode="json")} for n, p in table.items()})
        return
    for n, p in table.items():
        head = (
            f"{n:24s} {p.kind:11s} GPU {p.sm_count} SMs <= {p.gpu_max_mhz:g} MHz "
            f"({len(p.gpu_frequencies_mhz)} steps), {p.memory_bandwidth_gbps:g} GB/s, "
        )
        if p.kind == "data-center":
            lo, hi = p.module_power_w
            sys.stdout.write(head + f"power limit {lo:g}-{hi:g} W (nvidia-smi -pl)\n")
            continue
        modes = ", ".join(f"{m.id}:{m.name}" for m in p.power_modes)
        sys.stdout.write(
            head + f"{p.module_power_w[0]:g}-{p.module_power_w[1]:g} W; modes {modes}\n"
        )


def _load_points(path: Path) -> tuple[list, list[tuple[float, float, float | None, float | None]]]:
    """(step points, (clock, power, utilization, mem utilization) rows) from a CSV with
    batch, frequency_hz, step_time_s, power_w and optionally utilization, mem_utilization."""
    from hwtune.energy.step_model import StepPoint
    from hwtune.structured_file import repeated_columns

    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            header = list(reader.fieldnames or ())
    except OSError as e:
        raise HwtuneInputError("points", str(path), f"a readable CSV file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise HwtuneInputError("points", str(path), f"a UTF-8 CSV file ({e.reason})") from None
    need = ("batch", "frequency_hz", "step_time_s", "power_w")
    twice = repeated_columns(header)
    if twice:
        raise HwtuneInputError(f"{path.name} header", twice[0], "each column once")
    if not rows or any(c not in rows[0] for c in need):
        raise HwtuneInputError("points", str(path), "a CSV with columns " + ", ".join(need))
    known = (*need, "utilization", "mem_utilization")
    unknown = [c for c in rows[0] if c not in known and c is not None
               and (c or any(r.get(c) for r in rows))]  # fmt: skip
    if unknown:  # a misspelt utilization would be fitted without, silently
        raise HwtuneInputError(f"{path.name} header", unknown[0], "only the columns "
                               + ", ".join(known))  # fmt: skip
    sp, pp = [], []
    for n, r in enumerate(rows, start=2):
        try:
            u = float(r["utilization"]) if r.get("utilization") else None
            um = float(r["mem_utilization"]) if r.get("mem_utilization") else None
            b, f, t, w = (float(r[c]) for c in need)
        except (TypeError, ValueError):  # TypeError: a short row (a missing column is None)
            raise HwtuneInputError(f"{path.name} line {n}", r, "numbers") from None
        if not all(math.isfinite(x) for x in (b, f, t, w, u or 0.0, um or 0.0)):
            raise HwtuneInputError(f"{path.name} line {n}", r, "finite numbers")
        if b != int(b) or b < 1:
            raise HwtuneInputError(f"{path.name} line {n} batch", r["batch"], "a positive integer")
        for col, v, ok, want in (
            ("frequency_hz", f, f > 0, "a positive clock in Hz"),
            ("step_time_s", t, t > 0, "a positive step time in seconds"),
            ("power_w", w, w >= 0, "a power in W, 0 or more"),
            ("utilization", u, u is None or 0 <= u <= 1, "a fraction in [0, 1]"),
            ("mem_utilization", um, um is None or 0 <= um <= 1, "a fraction in [0, 1]"),
        ):
            if not ok:
                raise HwtuneInputError(f"{path.name} line {n} {col}", v, want)
        if any(x.strip() for x in r.get(None) or ()):  # DictReader's cells past the header's
            raise HwtuneInputError(f"{path.name} line {n}", r[None], "no cells past the header's "
                                   f"{sum(c is not None for c in rows[0])} columns")  # fmt: skip
        sp.append(StepPoint(b, f, t, u, um))
        pp.append((f, w, u, um))
    return sp, pp


def _mix_weight(objective: str, eta: float | None) -> dict[str, float]:
    """``--eta`` as the keyword the co-optimizer and the tuner take (their default, Zeus's 0.5,
    when not given); refused beside another objective, which it would not weigh."""
    if eta is not None and objective != "mix":
        raise HwtuneInputError("eta", eta, "--objective mix beside it (it weighs energy there)")
    return {} if eta is None else {"eta": eta}


def _cap(prof: Profile, cap: float | None) -> float:
    """The power cap of ``energy optimize`` / ``tune``: 20 W on an edge module unless given, the
    top of ``nvidia-smi -pl``'s range on a data-center GPU; there a cap outside that range is
    refused (the driver refuses it too), not taken as a clock budget."""
    from hwtune.energy.profiles import DatacenterProfile

    if cap is None:
        return prof.power_limit_w[1] if isinstance(prof, DatacenterProfile) else 20.0
    if not (cap > 0 and math.isfinite(cap)):
        raise HwtuneInputError("cap", cap, "a positive finite power in W")
    if isinstance(prof, DatacenterProfile):
        lo, hi = prof.power_limit_w
        if not lo <= cap <= hi:
            raise HwtuneInputError(
                "cap", cap, f"a power limit nvidia-smi -pl accepts on {prof.name}: {lo:g} to "
                f"{hi:g} W",
            )  # fmt: skip
    return cap


@app.command("optimize")
def optimize_cmd(
    profile: Annotated[
        str, typer.Option(help="profile name or YAML (hwtune energy profiles: edge or data-center)")
    ] = "jetson-agx-orin-64gb",
    cap: Annotated[
        float | None,
        typer.Option(
            help="power cap, W (default 20 on edge modules, the -pl maximum on data-center GPUs)"
        ),
    ] = None,
    batch: Annotated[
        int, typer.Option(help="the user's batch, per GPU (frequency-only baseline)")
    ] = 64,
    batches: Annotated[
        str, typer.Option(help="candidate batches (--batch is always one too)")
    ] = "1,2,4,8,16,32,64,128",
    b_noise: Annotated[float, typer.Option(help="gradient noise scale B_noise (samples)")] = 32.0,
    s_min: Annotated[float, typer.Option(help="steps to target at unbounded batch (S_min)")] = 1.0,
    model: Annotated[
        str | None,
        typer.Option(
            help="'gpt2-124m' (default), a catalog name or config.json (not with --points)"
        ),
    ] = None,
    seq: Annotated[int | None, typer.Option(help="sequence length (default 256)")] = None,
    host_ms: Annotated[
        float | None,
        typer.Option(
            help="CPU time per step the GPU waits on, ms (default 30 edge, 10 data-center)"
        ),
    ] = None,
    host_ms_per_sample: Annotated[
        float | None, typer.Option(help="... per sample, ms (default 0.5 edge, 0.1 data-center)")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            help="data-center profiles: GPUs of a ZeRO-3 data-parallel job on one node (default "
            "1); batches are per GPU, --b-noise global, energy per GPU"
        ),
    ] = None,
    points: Annotated[
        Path | None,
        typer.Option(
            help="measured points CSV: fit the models (instead of --model, --seq, --host-ms...)"
        ),
    ] = None,
    objective: Annotated[str, typer.Option(help="time|energy|mix")] = "time",
    eta: Annotated[
        float | None, typer.Option(help="energy weight of 'mix' (Zeus eta, default 0.5)")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="write the Pareto plot (PNG)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Choose batch size and GPU clock under a power cap (models of the profile, or fitted)."""
    from hwtune.energy.convergence import CriticalBatch
    from hwtune.energy.cooptimizer import co_optimize
    from hwtune.energy.power_model import PowerPoint, fit_power_model
    from hwtune.energy.profiles import get_profile
    from hwtune.energy.step_model import fit_step_model
    from hwtune.energy.workloads import GPT2_SMALL, default_host_s, edge_step_model

    try:
        if plot is not None:  # a path that cannot be written fails now, not after the search
            output_path(plot, "plot", plot_suffixes())
        weight = _mix_weight(objective, eta)
        estimator = {"model": model, "seq": seq, "host-ms": host_ms,
                     "host-ms-per-sample": host_ms_per_sample, "gpus": gpus}  # fmt: skip
        if points is not None:  # the fitted models replace the estimator's: its inputs are unused
            for name, v in estimator.items():
                if v is not None:
                    raise HwtuneInputError(name, v, "no such option with --points (the measured "
                                           "points give the step and power models)")  # fmt: skip
        for name, v in (("host-ms", host_ms), ("host-ms-per-sample", host_ms_per_sample)):
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise HwtuneInputError(name, v, "a non-negative finite time in ms")
        prof = get_profile(profile)
        cap = _cap(prof, cap)
        if gpus is not None and prof.kind != "data-center":
            raise HwtuneInputError("gpus", gpus, f"a data-center --profile beside it ({prof.name} "
                                   "is an edge module, one GPU)")  # fmt: skip
        if gpus is not None and not (1 <= gpus <= 8):
            raise HwtuneInputError("gpus", gpus, "1 to 8 GPUs (one node)")
        n_gpus = gpus or 1
        cands = positive_ints(batches, "batches")
        too_big: dict[int, str] = {}  # batches left out for memory (estimated models only)
        if points is not None:
            sp, raw = _load_points(points)
            step = fit_step_model(sp, prof.f_max_hz)
            pp = []
            for s, (f, w, u, um) in zip(sp, raw, strict=True):
                parts = step.parts(s.batch, f)
                pp.append(PowerPoint(f, w, u if u is not None else parts.utilization,
                                     um if um is not None else parts.mem_utilization))  # fmt: skip
            power = fit_power_model(pp, prof.f_max_hz)
        else:
            spec = GPT2_SMALL if model in (None, "gpt2-124m") else model
            h0, h1 = default_host_s(prof)
            host = (
                h0 * 1e3 if host_ms is None else host_ms,
                h1 * 1e3 if host_ms_per_sample is None else host_ms_per_sample,
            )
            step = edge_step_model(prof, spec, 256 if seq is None else seq,
                                   (host[0] / 1e3, host[1] / 1e3), gpus=n_gpus)  # fmt: skip
            power = prof.default_power_model()
            cands, too_big = _fitting_batches(spec, prof, 256 if seq is None else seq, cands,
                                              n_gpus)  # fmt: skip
            if batch in too_big:
                raise HwtuneInputError("batch", batch, "a batch whose training step fits the "
                                       f"{prof.name}'s memory ({too_big[batch]})")  # fmt: skip
        # B_noise counts samples of the global batch (n_gpus x the per-GPU batch): S(b) at the
        # per-GPU b is S_min (1 + B_noise / (n b)), the critical-batch model with B_noise / n
        res = co_optimize(step, power, CriticalBatch(b_noise / n_gpus, s_min), cands, prof.frequencies_hz,
                          cap, user_batch=batch, objective=objective, **weight,  # type: ignore[arg-type]
                          max_power_w=prof.module_power_w[1])  # fmt: skip
        if plot is not None:
            from hwtune.report.energy_plot import plot_frontier

            plot_frontier(
                res, plot, f"{prof.name}, cap {cap:g} W, B_noise {b_noise:g}, S_min {s_min:g}"
            )
    except HwtuneInputError as e:
        fail(flag_error(e, {"seq": "--seq", "model": "--model"}))
    if as_json:
        doc = res.to_dict()
        doc.update(left_out_for_memory=sorted(too_big), kind=prof.kind, gpus=n_gpus)
        doc.update(profile=prof.name, step_model=step.to_dict(), power_model=power.to_dict(),
                   b_noise=b_noise, s_min=s_min, source="fitted" if points else "profile + estimator (simulated)")  # fmt: skip
        _emit(doc)
        return
    b, fo = res.best, res.frequency_only
    out = sys.stdout
    out.write(
        f"{prof.name}, cap {cap:g} W, objective {objective}, B_noise {b_noise:g}, S_min {s_min:g}\n"
    )
    if n_gpus > 1:
        out.write(f"  per GPU of {n_gpus} (ZeRO-3 data parallel): batch per GPU, power and "
                  f"energy per GPU (x {n_gpus} for the job)\n")  # fmt: skip

    def line(label: str, p: object) -> str:
        return (f"  {label:16s} batch {p.batch:4d} at {_mhz(p.frequency_hz)}: {p.power_w:5.1f} W, "  # type: ignore[attr-defined]
                f"step {p.step_time_s * 1e3:7.1f} ms, {p.steps:8.3g} steps, "  # type: ignore[attr-defined]
                f"to target {p.time_to_target_s:.3g} s, {p.energy_to_target_j:.3g} J\n")  # type: ignore[attr-defined]  # fmt: skip

    out.write(line("choice:", b))
    if fo is not None:
        out.write(line("frequency-only:", fo))
        out.write(f"  speedup {res.speedup:.2f}x, energy {res.energy_ratio:.2f}x less\n")
    else:
        out.write(f"  frequency-only: batch {batch} fits the cap at no clock\n")
    out.write(f"  Pareto frontier: {len(res.frontier)} points")
    out.write(f"; plot {plot}\n" if plot else "\n")
    if too_big:
        out.write(f"  left out, their training step does not fit in memory: batch "
                  f"{', '.join(f'{b} ({need})' for b, need in sorted(too_big.items()))}\n")  # fmt: skip


def _fitting_batches(
    spec: object, prof: object, seq: int, batches: list[int], gpus: int = 1
) -> tuple[list[int], dict[int, str]]:
    """The candidate batches whose training step (one device, or ``gpus`` sharding the model
    state with ZeRO-3, the estimator's memory model) fits the profile's GPU memory, and the
    others with what they need; an error naming the model when none fits."""
    from hwtune.hardware.cluster import make_cluster
    from hwtune.train.estimator import estimate

    dev = prof.to_device()  # type: ignore[attr-defined]
    fit, too_big = [], {}
    for b in batches:
        est = estimate(spec, make_cluster(dev, gpus), micro_batch=b, seq=seq,  # type: ignore[arg-type]
                       zero=3 if gpus > 1 else 0)  # fmt: skip
        if est.fits:
            fit.append(b)
        else:
            too_big[b] = (
                f"{est.memory.total / 2**30:,.1f} of {est.memory_capacity_bytes / 2**30:,.0f} GiB"
            )
    if not fit:
        name = getattr(spec, "name", spec)
        b = min(too_big)
        more = ""
        if getattr(prof, "kind", "edge") == "data-center" and gpus < 8:
            more = "; --gpus 8 shards the model state over a node (ZeRO-3)"
        raise HwtuneInputError(
            "model", name, f"a model whose training step fits the {prof.name}'s memory "  # type: ignore[attr-defined]
            f"(batch {b} needs {too_big[b]}{more})",
        )  # fmt: skip
    return fit, too_big


@app.command("tune")
def tune_cmd(
    profile: Annotated[
        str, typer.Option(help="profile name or YAML (hwtune energy profiles: edge or data-center)")
    ] = "jetson-agx-orin-64gb",
    cap: Annotated[
        float | None,
        typer.Option(
            help="power cap, W (default 20 on edge modules, the -pl maximum on data-center GPUs)"
        ),
    ] = None,
    batch: Annotated[int, typer.Option(help="the user's batch")] = 64,
    batches: Annotated[str, typer.Option(help="candidate batches")] = "1,2,4,8,16,32,64,128",
    b_noise: Annotated[float, typer.Option(help="gradient noise scale (samples)")] = 32.0,
    steps: Annotated[int, typer.Option(help="training steps to simulate")] = 300,
    interval: Annotated[float, typer.Option(help="control interval, s")] = 2.0,
    seed: Annotated[int, typer.Option(help="noise seed")] = 0,
    objective: Annotated[str, typer.Option(help="time|energy|mix")] = "time",
    eta: Annotated[
        float | None, typer.Option(help="energy weight of 'mix' (Zeus eta, default 0.5)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the online tuner against the simulated device of a profile."""
    from hwtune.energy.convergence import CriticalBatch
    from hwtune.energy.meters.simulated import SimulatedDevice
    from hwtune.energy.profiles import get_profile
    from hwtune.energy.tuner import OnlineTuner
    from hwtune.energy.workloads import edge_step_model

    try:
        if not 0 < steps <= MAX_TUNE_STEPS:
            raise HwtuneInputError(
                "steps", steps, f"a number of steps from 1 to {MAX_TUNE_STEPS:,}"
            )
        if seed < 0:
            raise HwtuneInputError("seed", seed, "a non-negative integer")
        weight = _mix_weight(objective, eta)
        prof = get_profile(profile)
        cap = _cap(prof, cap)
        sim = SimulatedDevice(edge_step_model(prof), prof.default_power_model(),
                              prof.frequencies_hz, seed=seed, time_noise=0.02)  # fmt: skip
        try:
            tuner = OnlineTuner(sim, cap, positive_ints(batches, "batches"), base_batch=batch,
                                convergence=CriticalBatch(b_noise, 1.0), control_interval_s=interval,
                                objective=objective, **weight,  # type: ignore[arg-type]
                                max_power_w=prof.module_power_w[1])  # as `energy optimize`  # fmt: skip
        except HwtuneInputError as e:  # the tuner's candidates are the user's --batches
            if e.field != "batch sizes":
                raise
            raise HwtuneInputError("--batches", batches, e.expected) from None
        for _ in range(steps):
            plan = tuner.step_begin()
            sim.run_step(plan.batch_size)
            tuner.step_end()
    except HwtuneInputError as e:
        fail(e)
    doc = tuner.summary()
    doc["objective"] = objective
    if objective == "mix":
        doc["eta"], doc["max_power_w"] = tuner.eta, tuner.max_power_w
    doc["simulated_time_s"] = sim.now_s()
    doc["energy_j"] = sim.energy_j()
    if as_json:
        doc["intervals"] = [iv.to_dict() for iv in tuner.history]
        _emit(doc)
        return
    over = (
        f"{doc['intervals_over_cap']} of {doc['intervals']} intervals over the cap (longest run "
        f"{doc['max_consecutive_over_cap']})"
    )
    head = f"{prof.name} (simulated), cap {cap:g} W" + (
        f", objective {objective}" if objective != "time" else ""
    )
    if tuner.choice is None:  # the run ended mid-profiling: the batch and clock are a probe's
        sys.stdout.write(
            f"{head}: still profiling after {steps} step{'' if steps == 1 else 's'} "
            f"({doc['profile_points']} points measured): no choice yet; run more --steps; "
            f"{over}\n"
        )
        return
    sys.stdout.write(
        f"{head}: batch {doc['batch']} at {_mhz(tuner.frequency_hz)} "
        f"after {doc['profile_steps']} profiling steps; {over}\n"
    )


@app.command("measure")
def measure_cmd(
    backend: Annotated[str, typer.Option(help="nvml|amdsmi|jetson|rapl|replay")] = "rapl",
    seconds: Annotated[float, typer.Option(help="window length, s")] = 1.0,
    index: Annotated[int, typer.Option(help="GPU index (nvml, amdsmi)")] = 0,
    root: Annotated[
        str | None, typer.Option(help="sysfs root (jetson: /, rapl: /sys/class/powercap)")
    ] = None,
    trace: Annotated[Path | None, typer.Option(help="CSV trace (replay)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure energy and average power over a window on a real meter."""
    import time

    from hwtune.energy.meters import BACKENDS, EnergyMonitor, open_device

    try:
        if not (seconds > 0 and math.isfinite(seconds)):
            raise HwtuneInputError("seconds", seconds, "a positive finite window length")
        # each option belongs to some backends; with another it would be ignored
        used = {"index": ("nvml", "amdsmi"), "root": ("jetson", "rapl"), "trace": ("replay",)}
        for name, v in (("index", index or None), ("root", root), ("trace", trace)):
            if v is not None and backend in BACKENDS and backend not in used[name]:
                raise HwtuneInputError(
                    name, str(v), f"--backend {' or '.join(used[name])} beside it"
                )
        if index < 0:
            raise HwtuneInputError("index", index, "a non-negative GPU index")
        dev = open_device(backend, index=index, root=root, trace=trace)
        mon = EnergyMonitor(dev)
        mon.begin("window")
        if backend == "replay":
            dev.advance(seconds)  # type: ignore[attr-defined]
        else:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                dev.power_w()
                time.sleep(min(0.01, max(0.0, end - time.monotonic())))
        m = mon.end("window")
        caps = dev.capabilities()
    except HwtuneInputError as e:
        fail(e)
    if as_json:
        _emit({"device": dev.name, **m.to_dict(), "capabilities": caps.to_dict()})
        return
    sys.stdout.write(
        f"{dev.name}: {m.energy_j:.3f} J in {m.time_s:.3f} s = {m.avg_power_w:.2f} W\n"
    )


@app.command("step")
def step_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalog name or config.json")
    ] = "llama3.1-8b",
    gpu: Annotated[str, typer.Option(help="catalog GPU or device YAML")] = "h100-sxm-80gb",
    gpus: Annotated[int, typer.Option(help="number of GPUs")] = 8,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per node (default: the GPU's catalog system)")
    ] = None,
    tp: Annotated[int, typer.Option(help="tensor parallel")] = 1,
    pp: Annotated[int, typer.Option(help="pipeline parallel")] = 1,
    micro_batch: Annotated[int, typer.Option(help="sequences per micro-batch")] = 1,
    global_batch: Annotated[int | None, typer.Option(help="sequences per step")] = None,
    seq: Annotated[int, typer.Option(help="sequence length")] = 8192,
    power_cap: Annotated[float | None, typer.Option(help="per-GPU power limit, W")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Energy per training step and per token of a strategy on a cluster."""
    from hwtune.energy.cluster import step_energy
    from hwtune.hardware.cluster import make_cluster
    from hwtune.train.estimator import estimate

    try:
        cl = make_cluster(gpu, gpus, gpus_per_node=gpus_per_node, power_cap_w=power_cap)
        est = estimate(model, cl, tp=tp, pp=pp, micro_batch=micro_batch,
                       global_batch=global_batch, seq=seq)  # fmt: skip
        se = step_energy(est, cl)
    except HwtuneInputError as e:
        own = ("model", "gpu", "tp", "pp", "micro_batch", "global_batch", "seq")
        flags = {k: ESTIMATE_FLAGS[k] for k in own}
        flags |= {"cluster.n_gpus": "--gpus", "cluster.gpus_per_node": "--gpus-per-node",
                  "cluster.power_cap_w": "--power-cap"}  # fmt: skip
        fail(flag_error(e, flags))
    if as_json:
        _emit({"model": model, "gpu": cl.device.name, "fits": est.fits, **se.to_dict()})
        return
    if not est.fits:
        from hwtune.report.estimate_view import out_of_memory

        sys.stdout.write("OUT OF MEMORY: " + out_of_memory(est, "figures") + "\n")
    sys.stdout.write(
        f"{model} on {gpus} x {cl.device.name}: {se.energy_j / 1e3:.1f} kJ per step "
        f"({se.step_time_s:.2f} s, {se.avg_power_w_per_gpu:.0f} W per GPU), "
        f"{se.energy_per_token_j * 1e3:.2f} mJ per token\n"
    )


@app.command("pipeline")
def pipeline_cmd(
    stage_ms: Annotated[
        str,
        typer.Option(
            help="per stage 'fwd:bwd' ms at the top clock (data-center: the sustained "
            "full-load clock), comma-separated"
        ),
    ] = "10:20,10:20,10:20,13:26",
    microbatches: Annotated[int, typer.Option(help="micro-batches per step")] = 16,
    memory_share: Annotated[float, typer.Option(help="memory-bound share of stage time")] = 0.2,
    profile: Annotated[
        str, typer.Option(help="profile for clocks and power (edge or data-center)")
    ] = "jetson-agx-orin-64gb",
    tolerance: Annotated[float, typer.Option(help="allowed step-time growth (fraction)")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Per-stage GPU clocks that keep a 1F1B step's time and save energy (Perseus-style)."""
    from hwtune.energy.cluster import StageWork, plan_stage_frequencies
    from hwtune.energy.profiles import get_profile

    try:
        stages = []
        for part in stage_ms.split(","):
            try:
                f, b = (float(x) / 1e3 for x in part.split(":"))
            except ValueError:
                raise HwtuneInputError("stage-ms", part, "fwd:bwd in ms, e.g. 10:20") from None
            if not (f > 0 and b > 0 and math.isfinite(f) and math.isfinite(b)):
                raise HwtuneInputError("stage-ms", part, "positive finite times")
            stages.append(StageWork(f, b, memory_share))
        if not 0 <= memory_share < 1:
            raise HwtuneInputError("memory-share", memory_share, "a fraction in [0, 1)")
        if microbatches < 1:
            raise HwtuneInputError("microbatches", microbatches, "a positive integer")
        prof = get_profile(profile)
        power = prof.default_power_model()
        clocks = prof.frequencies_hz
        if prof.kind == "data-center":  # the stage times hold at the clock a fully busy GPU
            # settles at under its power limit (the power model's f_ref), the top of what it runs
            clocks = (*(f for f in clocks if f < power.f_ref_hz - 1e3), power.f_ref_hz)
        plan = plan_stage_frequencies(stages, microbatches, clocks, power, tolerance)
    except HwtuneInputError as e:
        fail(e)
    if as_json:
        _emit(plan.to_dict())
        return
    clocks = ", ".join(_mhz(f) for f in plan.frequencies_hz)
    sys.stdout.write(
        f"stage clocks: {clocks}; step {plan.step_time_s * 1e3:.1f} ms (was "
        f"{plan.baseline_step_time_s * 1e3:.1f}); energy {plan.saved_fraction:.1%} saved\n"
    )


if __name__ == "__main__":  # the root app, for its one-line errors
    from hwtune.cli.main import main

    main("energy")
