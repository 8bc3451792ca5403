"""`hwtune bench`: run the microbenchmarks on the device at hand and build its profile.

One model-agnostic run per device (tier 2 of the cost models): GEMMs, STREAM bandwidth,
memory-bound ops, attention and collectives, each section within a share of the mode's time
budget (quick: about 2 minutes on a 2-core CPU; thorough: up to 30 minutes), each failure
recorded as a skip with its reason. The result is a profile document (`hardware/profile.py`,
format version 1) that every command accepts as ``--gpu PROFILE``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hwtune.calibrate.attention import bench_attention
from hwtune.calibrate.collectives import bench_collectives
from hwtune.calibrate.device_info import device_fields, software_versions
from hwtune.calibrate.gemm import bench_gemm, best_rates
from hwtune.calibrate.harness import Budget, Skip, cpu_count, detect_backend
from hwtune.calibrate.memory import bench_elementwise, bench_stream
from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.hardware.profile import PROFILE_VERSION, implausible_points

SECTIONS: tuple[str, ...] = ("gemm", "memory", "elementwise", "attention", "collectives")
MODES: dict[str, float] = {"quick": 110.0, "thorough": 1800.0}
"""Wall-clock budget of each mode, seconds, for the whole run (`run_bench`)."""
WEIGHTS: dict[str, float] = {
    "gemm": 0.35,
    "memory": 0.05,
    "elementwise": 0.15,
    "attention": 0.2,
    "collectives": 0.25,
}
"""Share of the budget each section may use (of what is left when it starts)."""


@dataclass(frozen=True)
class BenchConfig:
    mode: str = "quick"
    dtypes: tuple[str, ...] | None = None  # None: what the backend supports
    ranks: int | None = None  # None: 2 on a CPU, every visible GPU
    threads: int | None = None  # torch intra-op threads (CPU); None: all usable CPUs
    device: str = "auto"
    sections: tuple[str, ...] = SECTIONS
    collectives_from: str | None = None
    budget_s: float | None = None
    clock: str = "auto"

    def validate(self) -> None:
        if self.mode not in MODES:
            raise HwtuneInputError("mode", self.mode, "quick or thorough")
        for s in self.sections:
            if s not in SECTIONS:
                raise HwtuneInputError("sections", s, "one of " + ", ".join(SECTIONS))
        if "gemm" not in self.sections or "memory" not in self.sections:
            # the profile is a device: it needs its peak FLOP/s and its memory bandwidth
            raise HwtuneInputError(
                "sections", ",".join(self.sections), "a list that includes gemm and memory"
            )
        for name, items in (("sections", self.sections), ("dtypes", self.dtypes or ())):
            if len(set(items)) != len(items):  # fp32,fp32 measured the grid twice
                raise HwtuneInputError(name, ",".join(items), "a list without repeated items")
        if self.ranks is not None and self.ranks < 2:
            # one process runs no collective: the section was skipped, not measured
            raise HwtuneInputError("ranks", self.ranks, "a number of processes >= 2 (a collective "
                                   "needs two; leave collectives out of --sections)")  # fmt: skip
        if self.ranks is not None and "collectives" not in self.sections:
            raise HwtuneInputError("ranks", self.ranks, "collectives among the sections (--ranks "
                                   "is the collectives' process count: ignored)")  # fmt: skip
        if self.threads is not None and not 1 <= self.threads <= cpu_count():
            # more threads than CPUs time-slices the GEMMs: a slower device, written as measured
            raise HwtuneInputError("threads", self.threads,
                                   f"a number of threads in [1, {cpu_count()}] (usable CPUs)")  # fmt: skip
        if self.clock not in ("auto", "wall", "cpu"):
            raise HwtuneInputError("clock", self.clock, "auto, wall or cpu")
        if self.device not in ("auto", "cpu", "cuda", "rocm", "gpu"):
            raise HwtuneInputError("device", self.device, "auto, cpu, cuda or rocm")
        known = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
        for d in self.dtypes or ():
            if d not in known:
                raise HwtuneInputError("dtypes", d, "a list of " + ", ".join(known))
        if self.budget_s is not None and not (self.budget_s > 0 and math.isfinite(self.budget_s)):
            raise HwtuneInputError("budget", self.budget_s, "a positive finite time in seconds")
        if self.collectives_from is not None:
            # the file replaces the collectives section: without it, or with --ranks, it is unused
            if "collectives" not in self.sections:
                raise HwtuneInputError("collectives-from", self.collectives_from,
                                       "collectives among the sections")  # fmt: skip
            if self.ranks is not None:
                raise HwtuneInputError("ranks", self.ranks, "no --ranks with --collectives-from "
                                       "(the file's points give their ranks)")  # fmt: skip


@dataclass
class BenchResult:
    document: dict
    skipped: list[Skip] = field(default_factory=list)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # measured points left out, by name

    def summary(self) -> dict:
        """What `hwtune bench --json` prints: the profile, the skips and the bandwidths."""
        from hwtune.calibrate.collectives import bandwidths

        coll = []
        for p in self.document.get("collectives", []):
            alg, bus = bandwidths(p)
            coll.append({**p, "algbw_bytes_per_s": alg, "busbw_bytes_per_s": bus})
        return {
            "profile": self.document,
            "skipped": [s.to_dict() for s in self.skipped],
            "collectives_bandwidth": coll,
            "seconds": self.seconds,
            "warnings": self.warnings,
        }


def default_dtypes(kind: str, skips: list[Skip] | None = None) -> tuple[str, ...]:
    """What a device of ``kind`` may support natively; a GPU without fp8 tensor cores records
    fp8 as skipped with its reason (`hwtune.calibrate.gemm.check_dtype`). A CPU runs bf16
    natively only with the avx512_bf16 or amx_bf16 instructions; without them torch converts
    to fp32 and the rate says nothing about a bf16 run, so it is skipped unless asked for."""
    if kind != "cpu":
        return ("fp32", "tf32", "bf16", "fp16", "fp8")
    from hwtune.calibrate.device_info import cpu_flags

    if cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        return ("fp32", "bf16")
    if skips is not None:
        skips.append(Skip("gemm", "bf16", "no native bf16 on this CPU (no avx512_bf16/amx_bf16 "
                          "flag); --dtypes fp32,bf16 measures the emulated rate"))  # fmt: skip
    return ("fp32",)


BUSY_LOAD_PER_CPU = 0.5
"""The 1-minute load average per usable CPU above which a CPU run timed by the wall clock is said
to share its CPUs: with other work runnable, a multi-threaded op waits for its slowest thread's
next time slice (calls of 12-34 ms for ops of 0.5 ms were seen on 2 loaded cores), and those
waits become the measurement."""


def _load_average() -> float | None:
    """The 1-minute load average, None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _busy_cpu_note(backend: object, load: float | None) -> str:
    """A warning for a CPU run timed by the wall clock while other work loads the CPUs (the
    load average before this process started measuring, per usable CPU, above
    `BUSY_LOAD_PER_CPU`), or '' (a GPU, the CPU clock, a quiet or unknown load)."""
    if load is None or getattr(backend, "is_gpu", False) or backend.clock != "wall":  # type: ignore[attr-defined]
        return ""
    n = cpu_count()
    if load <= BUSY_LOAD_PER_CPU * n:
        return ""
    return (f"warning: load average {load:.1f} on {n} usable CPUs: other work shares them, and "
            "wall-clock timings of multi-threaded ops catch its time slices; measure on a quiet "
            "machine, or with --threads 1 (timed by this process's CPU clock)")  # fmt: skip


def run_bench(
    cfg: BenchConfig,
    progress: Callable[[str], None] | None = None,
    started: float | None = None,
) -> BenchResult:
    """Measure the device and build its profile document (device + software + curves).

    The budget covers the whole run from ``started`` (a `time.perf_counter` reading; default:
    now; the CLI passes its own start, so importing torch counts): the backend's detection,
    every section (the collectives' process start-up included) and building the profile. Each
    section gets a share of what is left when it starts; the smallest shape of each GEMM,
    elementwise and attention curve runs even past it (no empty curve), and collectives the
    budget leaves no time for are skipped. A CPU timed by the wall clock while other work loads
    it is warned about (`_busy_cpu_note`), and the load average is recorded."""
    cfg.validate()
    say = progress or (lambda _: None)
    t_start = time.perf_counter() if started is None else started
    skips: list[Skip] = []
    load_before = _load_average()
    try:
        backend = detect_backend(cfg.device, cfg.threads, cfg.clock)
    except RuntimeError as e:
        raise HwtuneInputError("device", cfg.device, str(e)) from None
    except ValueError as e:
        raise HwtuneInputError("clock", cfg.clock, str(e)) from None
    busy = _busy_cpu_note(backend, load_before)
    if busy:
        say(busy)
    # read before the minutes of measuring: a bad file fails at once
    collectives = _read_collectives(cfg.collectives_from, skips) if cfg.collectives_from else None
    total = Budget(cfg.budget_s or MODES[cfg.mode], start=t_start)
    dtypes = list(cfg.dtypes or default_dtypes(backend.kind, skips))
    ranks = cfg.ranks or (max(2, _gpu_count()) if backend.is_gpu else 2)
    if cfg.ranks is not None and "collectives" in cfg.sections:
        # one process per GPU (NCCL/RCCL), at most one per usable CPU for gloo: more could
        # not run (GPU) or would time-slice the ranks and measure the scheduler, not the link
        most = _gpu_count() if backend.is_gpu else cpu_count()
        if ranks > most:
            what = "visible GPUs" if backend.is_gpu else "usable CPUs"
            raise HwtuneInputError("ranks", ranks, f"at most {most} ({what})")
    doc: dict = {"profile_version": PROFILE_VERSION}
    weights = {s: WEIGHTS[s] for s in cfg.sections}
    remaining = dict(weights)

    def share(section: str) -> Budget:
        w = remaining.pop(section)
        return Budget(max(0.0, total.left) * w / (w + sum(remaining.values())))

    gemm: list[dict] = []
    memory = None
    timings: dict[str, float] = {"before_sections": round(time.perf_counter() - t_start, 2)}
    coll_timings: dict[str, float] = {}
    for section in SECTIONS:
        if section not in cfg.sections:
            continue
        b = share(section)
        say(f"{section}: starting")
        t0 = time.perf_counter()
        if section == "gemm":
            gemm = bench_gemm(backend, dtypes, cfg.mode, b, skips, say)
        elif section == "memory":
            memory = bench_stream(backend, cfg.mode, skips)
        elif section == "elementwise":
            doc["elementwise"], ew_dtype = bench_elementwise(backend, cfg.mode, b, skips, say)
        elif section == "attention":
            doc["attention"] = bench_attention(backend, dtypes, cfg.mode, b, skips, say)
        elif section == "collectives":
            if collectives is not None:
                doc["collectives"] = collectives
            elif not backend.is_gpu and cfg.ranks is None and cpu_count() < ranks:
                # the default 2 gloo ranks on one usable CPU would time-slice, as --ranks 2
                # is refused for (the scheduler measured, not the link)
                skips.append(Skip("collectives", f"{ranks} gloo ranks", f"{cpu_count()} usable "
                                  "CPU: the ranks would time-slice (run on 2 CPUs or more)"))  # fmt: skip
            else:
                doc["collectives"] = bench_collectives(
                    backend, ranks, cfg.mode, b, skips, say, timings=coll_timings
                )
        timings[section] = round(time.perf_counter() - t0, 2)
    software = software_versions(backend)
    software["mode"] = cfg.mode
    software["clock"] = backend.clock
    if load_before is not None:  # other work on the CPU: how loaded it was, before and after
        software["load_average_1min_before"] = round(load_before, 2)
        software["load_average_1min_after"] = round(_load_average() or 0.0, 2)
    if busy:
        software["load_warning"] = busy
    for k, v in timings.items():
        software[f"seconds_{k}"] = v
    if "startup" in coll_timings:  # of the collectives' seconds, the ranks' start-up
        software["seconds_collectives_startup"] = coll_timings["startup"]
    software["budget_s"] = total.seconds
    software["collective_ranks"] = ranks
    software["collective_threads_per_rank"] = 1 if backend.is_gpu else max(1, cpu_count() // ranks)
    if "elementwise" in doc:
        software["elementwise_dtype"] = ew_dtype
    doc["gemm"] = gemm
    warnings = _drop_untimed(doc, skips)
    doc["device"] = device_fields(backend, best_rates(doc["gemm"]), memory)
    doc["software"] = software
    # each shape timed for at most ~0.2 s: a power-limited GPU's boost clock, not the clock it
    # holds under seconds of GEMMs (hardware/profile.py, ``gemm_clocks``)
    doc["gemm_clocks"] = "burst"
    if memory is not None:
        keys = ("copy_bytes_per_s", "triad_bytes_per_s", "launch_s", "memcpy_bytes_per_s")
        doc["memory"] = {k: memory[k] for k in keys if k in memory}
    doc["skipped"] = [s.to_dict() for s in skips]
    # the document must load as a device (what `--gpu PROFILE` does) before it is handed out
    from hwtune.hardware.device import Device
    from hwtune.hardware.profile import DeviceProfile

    body = {k: v for k, v in doc.items() if k != "device"}
    bad = implausible_points(Device(**doc["device"], profile=DeviceProfile(**body)))
    if bad:  # left out, named, and the device's figures taken again without them
        warnings += _drop_implausible(doc, bad, skips)
        if "memory" not in doc:  # the catalog's bandwidth stands (`with_catalog_links`)
            memory = None
        doc["device"] = device_fields(backend, best_rates(doc["gemm"]), memory)
        doc["skipped"] = [s.to_dict() for s in skips]
        body = {k: v for k, v in doc.items() if k != "device"}
        Device(**doc["device"], profile=DeviceProfile(**body))
    for w in warnings:
        say(w)
    return BenchResult(doc, skips, time.perf_counter() - t_start, warnings)


TIMED_SECTIONS: tuple[str, ...] = ("gemm", "elementwise", "attention", "collectives")


def _drop_untimed(doc: dict, skips: list[Skip]) -> list[str]:
    """Leave out, in place, the points of ``doc`` whose time is not a positive finite number
    (a timer that read 0, a NaN from a failed kernel), each recorded as skipped and returned as
    a warning naming it: the profile refuses such a point, so one of them failed the whole
    run after its minutes of measuring."""
    warnings = []
    for section in TIMED_SECTIONS:
        kept = []
        for i, p in enumerate(doc.get(section) or []):
            t = p.get("seconds")
            if isinstance(t, int | float) and math.isfinite(t) and t > 0:
                kept.append(p)
                continue
            what = f"{section}[{i}] {_point_name(p)}"
            skips.append(Skip(section, what, f"measured time {t!r} s: not a positive finite time"))
            warnings.append(f"warning: {what}: measured {t!r} s, not a positive finite time; "
                            "left out of the profile")  # fmt: skip
        if section in doc:
            doc[section] = kept
    return warnings


def _drop_implausible(doc: dict, bad: list[tuple[str, str, str]], skips: list[Skip]) -> list[str]:
    """Leave out, in place, the points `implausible_points` named (``gemm[3]``,
    ``elementwise[2]``, ``collectives[5]``: that point; ``collectives(all_reduce fit)``: every
    point of that op, whose fit would price it; ``memory.copy_bytes_per_s``: the whole STREAM
    block, whose copy figure is the profile's bandwidth; ``memory.memcpy_bytes_per_s``: that
    figure only), each recorded as skipped with why and returned as a warning naming it."""
    warnings, drop = [], {}
    for fld, value, expected in bad:
        section, _, rest = fld.partition("[")
        if section in ("gemm", "attention", "elementwise", "collectives") and rest:
            i = int(rest.rstrip("]"))
            drop.setdefault(section, set()).add(i)
            what = f"{fld} {_point_name(doc[section][i])}"
        elif fld.startswith("collectives("):
            section, what = "collectives", fld
            op = fld[len("collectives(") :].split(" ")[0]
            idx = drop.setdefault(section, set())
            idx.update(i for i, p in enumerate(doc[section]) if p.get("op") == op)
        else:
            section, what = "memory", fld
            if fld == "memory.memcpy_bytes_per_s":
                doc["memory"].pop("memcpy_bytes_per_s", None)
            else:
                doc.pop("memory", None)
        skips.append(Skip(section, what, f"implausible: {value}; expected {expected}"))
        warnings.append(f"warning: {what}: {value}, above what the device can run ({expected}); "
                        "left out of the profile")  # fmt: skip
    for section, idx in drop.items():
        doc[section] = [p for i, p in enumerate(doc[section]) if i not in idx]
    return warnings


def _point_name(p: object) -> str:
    """A measured point's shape in a few words (dtype and sizes, op and bytes)."""
    if not isinstance(p, dict):
        return repr(p)[:60]
    keys = ("dtype", "op", "phase", "m", "n", "k", "batch", "seq_q", "ranks", "bytes")
    return " ".join(f"{k}={p[k]}" for k in keys if k in p)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def _read_collectives(path: str, skips: list[Skip]) -> list[dict]:
    """Points written by ``torchrun -m hwtune.calibrate.collectives`` (across nodes), each
    checked as the profile will check it (`CollectivePoint`, `SkippedBenchmark`) before the
    minutes of measuring: a point that passed here used to fail as a traceback after them."""
    from pydantic import ValidationError

    from hwtune.hardware.profile import CollectivePoint, SkippedBenchmark
    from hwtune.structured_file import loads_json

    try:  # a key given twice is refused (json.loads kept the last)
        data = loads_json(Path(path).read_text(), "collectives-from", path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HwtuneInputError("collectives-from", path, f"a JSON file of points ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("collectives"), list):
        raise HwtuneInputError(f"{path}.collectives", None, "a list of collective points")
    for i, p in enumerate(data["collectives"]):
        ok = isinstance(p, dict) and isinstance(p.get("op"), str)
        for k in ("ranks", "bytes", "seconds"):
            v = p.get(k) if isinstance(p, dict) else None
            ok = ok and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            ok = ok and math.isfinite(v)
        if not ok:
            raise HwtuneInputError(f"{path}.collectives[{i}]", p,
                                   "op, and positive finite ranks, bytes and seconds")  # fmt: skip
        try:
            CollectivePoint(**p)
        except ValidationError as e:  # an unknown op, a fractional rank count, an extra key
            raise from_validation_error(e, where=f"{path}.collectives[{i}]") from None
    listed = data.get("skipped", [])
    if not isinstance(listed, list):
        raise HwtuneInputError(f"{path}.skipped", listed, "a list of skipped benchmarks")
    for i, s in enumerate(listed):
        if not isinstance(s, dict):
            raise HwtuneInputError(f"{path}.skipped[{i}]", s, "a mapping of section, what, reason")
        try:
            SkippedBenchmark(**{"section": "collectives", **s})
        except ValidationError as e:
            raise from_validation_error(e, where=f"{path}.skipped[{i}]") from None
        skips.append(Skip(s.get("section", "collectives"), s["what"], s["reason"]))
    return data["collectives"]


def write_profile(doc: dict, path: str | Path) -> Path:
    """Write the profile document: JSON for a .json path, YAML otherwise. A path that cannot be
    written raises `HwtuneInputError` naming ``output``."""
    p = Path(path)
    text = (json.dumps(doc, indent=1) + "\n" if p.suffix.lower() == ".json"
            else yaml.safe_dump(doc, sort_keys=False, width=100))  # fmt: skip
    try:
        p.write_text(text)
    except OSError as e:
        raise HwtuneInputError("output", str(p), f"a writable file ({e.strerror})") from None
    return p


def check_writable(path: str | Path) -> None:
    """Create and remove a scratch file beside ``path``: a directory that refuses files (a
    read-only or special file system, which ``os.access`` reports writable to root) fails
    before the measuring, not after it."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".hwtune-", dir=p.parent)
    except OSError as e:
        raise HwtuneInputError("output", str(p), f"a writable file ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)
