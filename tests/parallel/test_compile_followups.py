"""Follow-ups to the compiler review: interleaved needs vpp >= 2, ZeRO-3 all-gathers before a
recompute, ZB-V's activation limit, DualPipe's bubble against DeepSeek-V3's Table 2."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.parallel.spec import make_spec


# ---- 1. interleaved needs at least two chunks per rank ----------------------------------------
def test_interleaved_with_one_chunk_is_refused_by_the_spec():
    with pytest.raises(HwtuneInputError) as e:
        make_spec(pp=2, global_batch=4, schedule={"name": "interleaved", "vpp": 1})
    assert e.value.field.endswith("vpp") and e.value.value == 1
    assert "2" in e.value.expected and "interleaved" in e.value.expected
    make_spec(pp=2, global_batch=4, schedule={"name": "interleaved", "vpp": 2})  # accepted


@pytest.mark.parametrize("extra", [["--vpp", "1"], []], ids=["vpp-1", "vpp-default"])
def test_interleaved_with_one_chunk_is_refused_by_the_cli(rejects, extra):
    args = ["compile", "--pp", "2", "--global-batch", "4", "--schedule", "interleaved", *extra]
    rejects(args, "vpp", "1", "interleaved", "at least 2")


def test_interleaved_with_one_chunk_is_refused_from_a_strategy_file(rejects, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("mesh: {pp: 2}\nglobal_batch: 4\nschedule: {name: interleaved, vpp: 1}\n")
    rejects(["compile", "--strategy", str(f)], "vpp", "1", "interleaved")
