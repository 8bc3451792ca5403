"""Session 49's calibration review: a collective fit never yields a negative latency or an
unmeasured (near-infinite, zero or negative) bandwidth without saying so, and `serve measure`
errors are one line."""

from __future__ import annotations

import math
import socket

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.hardware.cluster import make_cluster
from hwtune.hardware.device import load_device_file
from hwtune.hardware.profile import CollectivePoint, DeviceProfile
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import estimate

SPEC = ModelSpec(name="tiny-gpt2", family="gpt2", n_layers=2, d_model=256, n_heads=4,
                 ffn_hidden=1024, ffn_act="gelu", vocab=8192, tied_embeddings=True,
                 norm="layernorm", pos_emb="learned", max_position=256)  # fmt: skip
SPEC_KW = dict(global_batch=8, seq=256, precision="fp32")


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_measure_error_is_exactly_one_line():
    # --served-model skips discovery, so the refused connection is met inside the runs' progress
    # bar, which off a terminal used to end with an empty line before the error
    url = f"http://127.0.0.1:{_closed_port()}"
    r = CliRunner().invoke(app, ["serve", "measure", "--url", url, "--served-model", "m",
                                 "--concurrency", "1"])  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --url: ")
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), repr(r.stderr)
    assert r.stdout == ""


# ---- collective alpha-beta fits (item 3) -------------------------------------------------------


def _prof(*pts: tuple[int, float, float], op: str = "all_reduce") -> DeviceProfile:
    return DeviceProfile(collectives=tuple(
        CollectivePoint(op=op, ranks=n, bytes=s, seconds=t) for n, s, t in pts))  # fmt: skip


@pytest.mark.parametrize(
    "pts, words",
    [
        ([(2, 1e6, 1e-3)], "one message size"),  # a single point
        ([(2, 1e6, 1e-3), (2, 1e6, 1.2e-3), (2, 1e6, 0.9e-3)], "one message size"),
        # equal sizes but for a rounding step: a tiny positive determinant fitted 244 us, 1 GB/s
        (
            [(2, 1e6, 1e-3), (2, 1e6 * (1 + 1e-15), 1e-3 * (1 + 3e-16)), (2, 1e6, 1.0000001e-3)],
            "one message size",
        ),
        ([(2, 1e3, 1e-3), (2, 1e6, 1e-4)], "does not grow"),  # faster for more bytes
        ([(2, 1e3, 1e-3), (2, 1e6, 1e-3 + 1e-15)], "latency-bound"),  # flat: it fitted 1e21 B/s
    ],
)
def test_a_degenerate_fit_falls_back_and_says_why(pts, words):
    prof = _prof(*pts)
    assert prof.collective_fit() is None
    assert words in prof.collective_fit_note() and "spec sheet" in prof.collective_fit_note()


def test_a_negative_latency_becomes_a_noted_bandwidth_only_fit():
    beta = 1e9  # points of t = 2 alpha + S / beta with alpha -2 us: the plain fit's alpha < 0
    prof = _prof(*((2, s, 2 * -2e-6 + s / beta) for s in (1e4, 1e5, 1e6, 1e7)))
    a, bw = prof.collective_fit()
    assert a == 0.0 and 0.9 * beta < bw < 1.5 * beta
    assert "negative" in prof.collective_fit_note()


def test_a_plain_fit_has_no_note_and_no_points_no_note():
    prof = _prof(*((2, s, 2 * 5e-6 + s / 1e9) for s in (1e3, 1e5, 1e7)))
    a, bw = prof.collective_fit()
    assert a == pytest.approx(5e-6) and bw == pytest.approx(1e9)
    assert prof.collective_fit_note() == "" and DeviceProfile().collective_fit_note() == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 16), st.floats(1.0, 1e10), st.floats(1e-7, 10.0)),
                min_size=1, max_size=6))  # fmt: skip
def test_a_fit_is_none_or_nonnegative_latency_and_finite_positive_bandwidth(pts):
    prof = _prof(*pts)
    fit = prof.collective_fit()
    if fit is None:  # a fallback always says why
        assert prof.collective_fit_note()
        return
    a, bw = fit
    assert a >= 0.0 and math.isfinite(a)
    assert bw > 0.0 and math.isfinite(bw)
    assert (a == 0.0) or "negative" not in prof.collective_fit_note()


def test_the_estimate_prices_a_degenerate_fit_at_the_spec_sheet_link_and_notes_it(tmp_path):
    doc = make_doc()
    doc["collectives"] = [{"op": "all_reduce", "ranks": 2, "bytes": 1e6, "seconds": 1e-3}] * 2
    p = tmp_path / "one-size.yaml"
    p.write_text(yaml.safe_dump(doc))
    t2 = load_device_file(p)
    plain = t2.model_copy(update={"profile": None})
    assert make_cluster(t2, 2).intra_link() == make_cluster(plain, 2).intra_link()
    est = estimate(SPEC, make_cluster(t2, 2), dp=2, **SPEC_KW)
    assert any("tier 2" in n and "one message size" in n for n in est.notes), est.notes
    good = estimate(SPEC, make_cluster(load_device_file(_write(tmp_path, make_doc())), 2), dp=2,
                    **SPEC_KW)  # fmt: skip
    assert not any("message size" in n for n in good.notes)


def _write(tmp_path, doc, name="prof.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p
