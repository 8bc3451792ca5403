"""Mapper and scheduler physics: the roofline bound holds for every op; traffic is never below
the compulsory bytes; a layer that fits no core names the smallest buffer that would work."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.accel.architecture import CoreType, catalog_names, load_accelerator
from hwtune.accel.mapper import _NoFit, map_mac_op
from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.training import lower_training
from hwtune.errors import HwtuneInputError

CORE = CoreType(name="c", pe_rows=16, pe_cols=8, local_buffer_kib=64, local_bandwidth_bytes_per_cycle=64,
                mac_energy_pj=1, local_access_pj_per_byte=1)  # fmt: skip


@pytest.mark.parametrize("arch", catalog_names())
@pytest.mark.parametrize("fusion", [1, 4])
def test_roofline_bound_every_op(arch, fusion):
    acc = load_accelerator(arch)
    for g in (resnet18(batch=1, image=96), gpt2(seq=64, config=GPT2Config(n_layer=1))):
        r = schedule(lower_training(g), acc, fusion_depth=fusion)
        f = acc.frequency_hz
        cores = acc.core_list
        for o in r.ops:
            dur = o.end - o.start
            assert dur * (1 + 1e-9) >= o.macs / (cores[o.core].pes * f), o.name
            assert dur * (1 + 1e-9) >= o.dram_bytes / acc.dram_bandwidth_si, o.name
        assert r.latency_s >= r.macs / acc.peak_macs_per_s
        assert r.latency_s >= r.dram_traffic_bytes / acc.dram_bandwidth_si * (1 - 1e-9)


@settings(max_examples=80, deadline=None)
@given(
    phase=st.sampled_from(["fwd", "bwd_x", "bwd_w"]), n=st.integers(1, 4096), k=st.integers(1, 512),
    c=st.integers(1, 512), r=st.sampled_from([1, 9]), acc=st.booleans(),
)  # fmt: skip
def test_mapping_invariants(phase, n, k, c, r, acc):
    x, w, y = 2.0 * n * c, 2.0 * k * c * r, 2.0 * n * k
    roles = {"fwd": (x, w, y), "bwd_x": (y, w, x), "bwd_w": (x, y, w)}[phase]
    try:
        m = map_mac_op(phase, 1, n, k, c, r, *roles, 2, acc, CORE)
    except _NoFit as e:
        assert e.min_buffer > CORE.local_buffer_bytes
        return
    macs = n * k * c * r
    assert m.cycles >= math.ceil(macs / CORE.pes)
    assert 0 < m.utilization <= 1
    for t, comp in zip(m.traffic, m.compulsory, strict=True):
        assert t >= comp * (1 - 1e-12)
    assert m.footprint <= CORE.local_buffer_bytes
    assert m.min_buffer <= m.footprint


def test_layer_that_fits_no_core_names_smallest_buffer():
    acc = load_accelerator("eyeriss-like")
    tiny = acc.model_copy(
        update={"cores": (acc.cores[0].model_copy(update={"local_buffer_kib": 1.0}),)}
    )
    tiny.__dict__.pop("core_list", None)
    with pytest.raises(HwtuneInputError) as e:
        schedule(lower_training(resnet18(image=64)), tiny)
    msg = str(e.value)
    assert msg.startswith("layer ") and "local_buffer_kib >=" in msg and "\n" not in msg
    need = int(msg.split("local_buffer_kib >= ")[1].split()[0])
    # that buffer is enough for the op named (the next failure, if any, is a different layer)
    bigger = acc.model_copy(
        update={"cores": (acc.cores[0].model_copy(update={"local_buffer_kib": float(need)}),)}
    )
    bigger.__dict__.pop("core_list", None)
    name = msg.split()[1].rstrip(":")
    try:
        schedule(lower_training(resnet18(image=64)), bigger)
    except HwtuneInputError as e2:
        assert str(e2.value if hasattr(e2, "value") else e2).split()[1].rstrip(":") != name
