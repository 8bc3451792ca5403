"""The predicted-against-measured figure of the published serving runs (`plot_validation`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.report.serve_plots import plot_validation
from hwtune.serve.accuracy import VALIDATION_TARGETS, relative_errors


def _row(i: int, ttft: float, tpot: float, pt: float, pp: float, backend: str = "vllm") -> dict:
    return {"id": f"r{i}", "backend": backend, "ttft_s": ttft, "tpot_s": tpot,
            "pred_ttft_s": pt, "pred_tpot_s": pp}  # fmt: skip


def test_targets_are_the_issue_s() -> None:
    # issue 4: median TTFT error <= 15%, median TPOT error <= 12%
    assert VALIDATION_TARGETS == {"ttft": 0.15, "tpot": 0.12}


def test_relative_error_literals() -> None:
    assert relative_errors(np.array([1.2, 0.5, 2.0]), np.array([1.0, 1.0, 2.0])) == pytest.approx(
        [0.2, 0.5, 0.0]
    )


@given(st.floats(1e-4, 1e3), st.floats(1e-4, 1e3))
@settings(max_examples=50, deadline=None)
def test_relative_error_is_scaled_distance(p: float, m: float) -> None:
    e = float(relative_errors(p, m))
    assert e >= 0
    assert e == pytest.approx(abs(p / m - 1), rel=1e-9, abs=1e-12)
    # scale-free: the same ratio at any unit
    assert float(relative_errors(1000 * p, 1000 * m)) == pytest.approx(e, rel=1e-9, abs=1e-12)


def test_writes_a_png(tmp_path) -> None:
    rows = [_row(i, 0.1 * (i + 1), 0.01, 0.1 * (i + 1) * (1.1 if i % 2 else 0.7), 0.011,
                 "trtllm" if i % 3 else "sglang") for i in range(12)]  # fmt: skip
    p = plot_validation(rows, tmp_path / "v.png", "t")
    head = p.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([], ("rows", "at least one")),
        ([{"id": "a", "ttft_s": 1.0}], ("rows[a].tpot_s", "expected")),
        ([_row(0, 0.1, 0.01, 0.1, 0.01), {"id": "b"}], ("rows[b].ttft_s",)),
        ([_row(0, 0.1, 0.01, math.nan, 0.01)], ("rows[r0].ttft", "nan", "positive")),
        ([_row(0, 0.0, 0.01, 0.1, 0.01)], ("rows[r0].ttft", "0.0", "positive")),
        ([_row(0, 0.1, 0.01, 0.1, -0.01)], ("rows[r0].tpot", "-0.01", "positive")),
    ],
)
def test_bad_rows_are_named(tmp_path, rows: list, words: tuple[str, ...]) -> None:
    with pytest.raises(HwtuneInputError) as e:
        plot_validation(rows, tmp_path / "v.png")
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg
    assert not (tmp_path / "v.png").exists()
