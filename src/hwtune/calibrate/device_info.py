"""The ``device`` and ``software`` blocks of a profile: what the OS and torch say about the
device, completed with what the benchmarks measured.

A CPU has no datasheet the cost model can use, so its Device is built from measurements:
the peak of each dtype is the best measured GEMM rate (with ``gemm_efficiency`` 1.0), the memory
bandwidth is the STREAM copy bandwidth (``memory_bw_efficiency`` 1.0), memory from
/proc/meminfo, the name and clocks from /proc/cpuinfo and cpufreq, ``sm_count`` the cores the
benchmarks ran on. Every figure says where it came from in ``sources``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import torch

from hwtune.calibrate.harness import Backend, cpu_count
from hwtune.calibrate.memory import last_level_cache_bytes
from hwtune.hardware.profile import MEASURED_PEAKS

DEFAULT_CLOCK_MHZ = 2000.0
CPU_WATTS_PER_CORE = 8.0
"""Assumed power per busy server core, W: 350 W / 56 cores = 6.3 W (Xeon Platinum 8480+), 280 W /
64 = 4.4 W (EPYC 7763), 270 W / 40 = 6.8 W (Xeon 8380) per vendor TDPs, rounded up for uncore and
memory. Used only when no RAPL limit is readable; energy estimates on a CPU profile are rough."""
GPU_DEFAULT_TDP_W = 300.0


def _cpuinfo() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out.setdefault(k.strip(), v.strip())
    return out


def cpu_flags() -> set[str]:
    """The instruction-set flags of /proc/cpuinfo (empty where there is none)."""
    return set(_cpuinfo().get("flags", "").split())


def _meminfo_bytes() -> float | None:
    try:
        m = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
    except OSError:
        return None
    return float(m.group(1)) * 1024 if m else None


def _physical_cores() -> int:
    """Distinct (physical id, core id) pairs of /proc/cpuinfo; the CPU count without them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.cpu_count() or 1
    pairs = set(re.findall(r"physical id\s*:\s*(\d+).*?core id\s*:\s*(\d+)", text, re.S))
    return len(pairs) or (os.cpu_count() or 1)


def _sysfs_khz(name: str) -> float | None:
    try:
        return float(Path(f"/sys/devices/system/cpu/cpu0/cpufreq/{name}").read_text()) / 1000.0
    except (OSError, ValueError):
        return None


def _rapl_watts() -> float | None:
    p = Path("/sys/class/powercap/intel-rapl:0/constraint_0_max_power_uw")
    try:
        return float(p.read_text()) / 1e6
    except (OSError, ValueError):
        return None


def software_versions(backend: Backend) -> dict[str, str | int | float]:
    """Versions and settings the measurements depend on."""
    sw: dict[str, str | int | float] = {
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": backend.kind,
        "threads": backend.threads,
    }
    if backend.kind == "cuda" and torch.version.cuda:
        sw["cuda"] = torch.version.cuda
    if backend.kind == "rocm" and getattr(torch.version, "hip", None):
        sw["hip"] = str(torch.version.hip)
    if backend.is_gpu:
        with contextlib.suppress(RuntimeError, AttributeError, TypeError):
            sw["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    else:
        sw["mkldnn"] = int(torch.backends.mkldnn.is_available())
        sw["mkl"] = int(torch.backends.mkl.is_available())
    try:
        from importlib.metadata import version

        sw["hwtune"] = version("hwtune")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        pass
    sw["argv0"] = Path(sys.argv[0]).name
    return sw


def device_fields(backend: Backend, peaks_flops: dict[str, float], memory: dict | None) -> dict:
    """Device fields (catalog keys and units) for the measured device."""
    if not any(d in peaks_flops for d in ("fp32", "bf16", "fp16")):
        raise RuntimeError("no fp32/bf16/fp16 GEMM was measured; a profile needs one")
    peak_tflops = {d: r / 1e12 for d, r in peaks_flops.items()}
    sources = {
        # the words by which `implausible_points` knows these peaks are no data sheet
        "peak_tflops": f"best GEMM rate {MEASURED_PEAKS} per dtype (gemm_efficiency 1.0)",
    }
    fields: dict = {"peak_tflops": peak_tflops, "gemm_efficiency": 1.0}
    if memory is not None:
        fields["memory_bandwidth_tbps"] = memory["copy_bytes_per_s"] / 1e12
        fields["memory_bw_efficiency"] = 1.0
        which = "best of STREAM copy/scale/triad" if backend.is_gpu else "STREAM copy"
        sources["memory_bandwidth_tbps"] = (
            f"{which} over {memory['array_bytes'] / 2**20:.0f} MiB arrays, hwtune bench "
            "(memory_bw_efficiency 1.0)"
        )
    if backend.is_gpu:
        props = torch.cuda.get_device_properties(backend.device)
        fields.update(
            name=props.name,
            vendor="amd" if backend.kind == "rocm" else "nvidia",
            architecture=_gpu_architecture(backend.kind, props),
            form_factor="gpu",
            memory_gib=props.total_memory / 2**30,
            sm_count=props.multi_processor_count,
            l2_cache_mib=getattr(props, "L2_cache_size", 0) / 2**20,
        )
        clock = _nvml("clock")
        fields["boost_clock_mhz"] = clock or DEFAULT_CLOCK_MHZ
        tdp = _nvml("power")
        fields["tdp_w"] = tdp or GPU_DEFAULT_TDP_W
        sources["boost_clock_mhz"] = "NVML max SM clock" if clock else "default (NVML unavailable)"
        sources["tdp_w"] = "NVML power limit" if tdp else "assumed 300 W (NVML unavailable)"
        sources.update(
            name="torch.cuda.get_device_properties", memory_gib="torch.cuda total_memory"
        )
    else:
        info = _cpuinfo()
        vendor_id = info.get("vendor_id", "")
        cores = min(backend.threads, _physical_cores())
        mhz_max = _sysfs_khz("cpuinfo_max_freq")
        mhz_min = _sysfs_khz("cpuinfo_min_freq")
        mhz_now = float(info["cpu MHz"]) if "cpu MHz" in info else None
        boost = mhz_max or mhz_now or DEFAULT_CLOCK_MHZ
        rapl = _rapl_watts()
        fields.update(
            name=info.get("model name") or platform.processor() or "cpu",
            vendor={"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor_id, "other"),
            architecture=f"{vendor_id} family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}".strip(),
            form_factor="cpu",
            memory_gib=(_meminfo_bytes() or 8 * 2**30) / 2**30,
            sm_count=cores,
            l2_cache_mib=last_level_cache_bytes() / 2**20,
            boost_clock_mhz=boost,
            tdp_w=rapl if rapl else CPU_WATTS_PER_CORE * cores,
        )
        if mhz_min:
            fields["min_clock_mhz"] = mhz_min
        sources.update(
            name="/proc/cpuinfo model name",
            memory_gib="/proc/meminfo MemTotal",
            sm_count=f"cores the benchmarks ran on (torch threads {backend.threads}, "
            f"{_physical_cores()} physical cores, {cpu_count()} CPUs usable)",
            l2_cache_mib="largest cache in /sys/devices/system/cpu/cpu0/cache (last level)",
            boost_clock_mhz="cpufreq cpuinfo_max_freq"
            if mhz_max
            else ("/proc/cpuinfo cpu MHz (no cpufreq)" if mhz_now else "default 2000 MHz"),
            tdp_w="RAPL package limit"
            if rapl
            else f"assumption: {CPU_WATTS_PER_CORE:.0f} W per busy server core "
            "(hwtune.calibrate.device_info.CPU_WATTS_PER_CORE)",
            attention_efficiency="defaults (not measured in tier 1; the profile's curves are)",
        )
    fields["sources"] = sources
    if backend.is_gpu:
        with_catalog_links(fields)
    return fields


CATALOG_FIELDS: tuple[str, ...] = (
    "aliases", "scaleup_link", "scaleup_gbps_per_direction", "pcie_gbps_per_direction",
    "gemm_tile", "min_clock_mhz", "base_clock_mhz", "reference_power_w", "idle_w",
    "sustained_gemm_fraction", "price_per_hour_usd",
)  # fmt: skip
"""Device fields one GPU cannot measure about itself, taken from the catalog entry of the same
name: its links (collectives on one GPU measure nothing; without them a profile used as
``--gpu`` would price data-parallel all-reduces over PCIe), tile, clocks and power figures."""


def _rebase_on_datasheet(fields: dict, cat: Any) -> None:
    """Express the measured peaks and bandwidth against the catalog's data sheet: peaks and
    bandwidth become the data sheet's (the measured figure where it is higher), the measured best bf16 (fp8) GEMM and STREAM figures
    become ``gemm_efficiency`` (``gemm_efficiency_fp8``) and ``memory_bw_efficiency``. Every time
    the cost models derive is unchanged (peak x efficiency = the measured rate; the curves
    come first anyway), but MFU and HFU are then reported against the data-sheet peak, the
    convention of the papers (Chowdhery et al. 2022, App. B), not against a measured best
    that would read 0.79 for a step whose data-sheet MFU is 0.64."""
    peaks = dict(fields["peak_tflops"])
    sheet = cat.peak_tflops.model_dump()
    ref = "bf16" if peaks.get("bf16") and sheet.get("bf16") else "fp16"
    if not (peaks.get(ref) and sheet.get(ref)):
        return
    src = fields["sources"]
    fields["peak_tflops"] = {k: v for k, v in sheet.items() if v is not None}
    src["peak_tflops"] = f"catalog {cat.name} data sheet"
    # a measured rate above the data sheet but within the plausible margin (a card boosting
    # past its rated clock) is kept as measured: the figure becomes the peak, at efficiency 1,
    # and the source says so, instead of an efficiency clamped to 1. Beyond the margin the data
    # sheet stays the peak, so that the bench's `implausible_points` drops those points
    from hwtune.hardware.profile import PLAUSIBLE_MARGIN

    limit = 1.0 + PLAUSIBLE_MARGIN
    for dtype, eff in ((ref, "gemm_efficiency"), ("fp8", "gemm_efficiency_fp8")):
        if not (peaks.get(dtype) and sheet.get(dtype)):
            continue
        got, rated = peaks[dtype], sheet[dtype]
        fields[eff] = min(1.0, got / rated)
        src[eff] = f"best {dtype} GEMM measured by hwtune bench, {got:.1f} of {rated:.1f} TFLOP/s"
        if rated < got <= limit * rated:
            fields["peak_tflops"][dtype] = got
            src["peak_tflops"] += f"; {dtype} as measured, {got:.1f} above its {rated:.1f}"
    bw = fields.get("memory_bandwidth_tbps")
    if bw:
        rated_bw = cat.memory_bandwidth_tbps
        fields["memory_bw_efficiency"] = min(1.0, bw / rated_bw)
        src["memory_bw_efficiency"] = (f"{src.get('memory_bandwidth_tbps', 'measured')}: "
                                       f"{bw:.2f} of {rated_bw} TB/s")  # fmt: skip
        above = rated_bw < bw <= limit * rated_bw
        fields["memory_bandwidth_tbps"] = bw if above else rated_bw
        src["memory_bandwidth_tbps"] = f"catalog {cat.name} data sheet" + (
            f"; as measured, {bw:.2f} above its {rated_bw}" if above else ""
        )


def with_catalog_links(fields: dict) -> dict:
    """``fields`` (a measured GPU's device fields) completed, in place, with `CATALOG_FIELDS` from
    the catalog device of the same name or alias, each source saying so, and its peaks and
    bandwidth expressed against that device's data sheet (`_rebase_on_datasheet`); unchanged
    for a GPU the catalog does not know."""
    from hwtune.errors import HwtuneInputError
    from hwtune.hardware.catalog import get_device

    try:
        cat = get_device(str(fields.get("name", "")))
    except HwtuneInputError:
        return fields
    _rebase_on_datasheet(fields, cat)
    if "memory_bandwidth_tbps" not in fields:  # STREAM left out (`bench._drop_implausible`)
        fields["memory_bandwidth_tbps"] = cat.memory_bandwidth_tbps
        fields["sources"]["memory_bandwidth_tbps"] = (f"catalog {cat.name} data sheet (no usable "
                                                      "STREAM figure from hwtune bench)")  # fmt: skip
    for key in CATALOG_FIELDS:
        value = getattr(cat, key)
        if key not in fields and value not in (None, (), ""):
            fields[key] = list(value) if isinstance(value, tuple) else value
            fields["sources"][key] = f"catalog {cat.name} (not measured by hwtune bench)"
    return fields


CUDA_ARCHITECTURES: dict[tuple[int, int], str] = {
    (6, 0): "pascal", (6, 1): "pascal", (7, 0): "volta", (7, 2): "volta", (7, 5): "turing",
    (8, 0): "ampere", (8, 6): "ampere", (8, 7): "ampere", (8, 9): "ada", (9, 0): "hopper",
    (10, 0): "blackwell", (10, 3): "blackwell-ultra", (11, 0): "blackwell", (12, 0): "blackwell",
    (12, 1): "blackwell",
}  # fmt: skip
"""CUDA compute capability -> the catalog's architecture names (NVIDIA CUDA C++ Programming
Guide, "Compute Capabilities" table; 11.0 is Jetson Thor, 12.1 DGX Spark's GB10)."""

ROCM_ARCHITECTURES: dict[str, str] = {
    "gfx908": "cdna", "gfx90a": "cdna2", "gfx940": "cdna3", "gfx941": "cdna3", "gfx942": "cdna3",
    "gfx950": "cdna4",
}  # fmt: skip
"""ROCm's gfx target -> the catalog's architecture names (LLVM AMDGPU backend, "Processors"
table: gfx908 MI100, gfx90a MI210/MI250/MI250X, gfx940-942 MI300, gfx950 MI350/MI355)."""


def _gpu_architecture(kind: str, props: object) -> str:
    """The catalog's architecture name of a GPU, from ROCm's gfx target or NVIDIA's compute
    capability; the gfx target itself (without its feature flags) or ``sm_XY`` where the tables
    have none."""
    if kind == "rocm":
        gfx = str(getattr(props, "gcnArchName", "") or "rocm").split(":")[0]
        return ROCM_ARCHITECTURES.get(gfx, gfx)
    cc = (int(getattr(props, "major", 0)), int(getattr(props, "minor", 0)))
    return CUDA_ARCHITECTURES.get(cc, f"sm_{cc[0]}{cc[1]}")


def _nvml(what: str) -> float | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        if what == "clock":
            return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
        return pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
    except Exception:  # noqa: BLE001 - NVML absent (ROCm, no driver, no package)
        return None
