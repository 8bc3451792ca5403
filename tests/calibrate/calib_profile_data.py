"""A synthetic profile document shared by the calibration tests."""

from __future__ import annotations

from hwtune.hardware.profile import PROFILE_VERSION

DEVICE = {
    "name": "Test CPU",
    "vendor": "intel",
    "form_factor": "cpu",
    "peak_tflops": {"fp32": 0.15},
    "gemm_efficiency": 1.0,
    "memory_gib": 16.0,
    "memory_bandwidth_tbps": 0.012,
    "memory_bw_efficiency": 1.0,
    "sm_count": 2,
    "boost_clock_mhz": 2300.0,
    "tdp_w": 16.0,
}


def make_doc(**over: object) -> dict:
    doc = {
        "profile_version": PROFILE_VERSION,
        "device": dict(DEVICE),
        "software": {"torch": "2.13.0", "backend": "cpu", "threads": 1},
        "gemm": [
            {"dtype": "fp32", "m": 256, "n": 256, "k": 256, "batch": 1, "seconds": 3.0e-4},
            {"dtype": "fp32", "m": 1024, "n": 1024, "k": 1024, "batch": 1, "seconds": 0.015},
        ],
        "memory": {"copy_bytes_per_s": 1.1e10, "triad_bytes_per_s": 1.2e10, "launch_s": 2e-6},
        "elementwise": [
            {"op": "add", "bytes": 3e5, "seconds": 1e-5},
            {"op": "add", "bytes": 3e7, "seconds": 2e-3},
        ],
        "attention": [
            {
                "dtype": "fp32",
                "phase": "fwd",
                "batch": 1,
                "heads": 8,
                "seq_q": 512,
                "seq_k": 512,
                "head_dim": 64,
                "causal": True,
                "flops": 2.7e8,
                "seconds": 5e-3,
            },
        ],  # fmt: skip
        "collectives": [
            {"op": "all_reduce", "ranks": 2, "bytes": 1024.0, "seconds": 1e-4},
            {"op": "all_reduce", "ranks": 2, "bytes": 6.7e7, "seconds": 0.04},
        ],
        "skipped": [{"section": "gemm", "what": "bf16", "reason": "no native bf16"}],
    }
    doc.update(over)
    return doc
