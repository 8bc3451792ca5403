"""Request lengths are taken as given: a zero-token prompt or output and a shared prefix as long
as a prompt are errors, not clamped to what the simulator can run."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.serve.request import (
    Workload,
    closed_loop,
    fixed_lengths,
    open_loop,
    range_ratio_lengths,
)


@pytest.mark.parametrize(("prompts", "outputs", "field"), [((0, 5), (3, 3), "prompt length"),
                                                          ((5, 5), (3, 0), "output length"),
                                                          ((5, 5), (3,), "outputs")])  # fmt: skip
def test_workload_rejects_empty_lengths(prompts, outputs, field):
    with pytest.raises(HwtuneInputError, match=field):
        Workload(prompts, outputs)


def test_loops_reject_empty_lengths():
    p, o = np.full(4, 100), np.zeros(4, dtype=int)  # fixed_lengths refuses a 0 itself
    with pytest.raises(HwtuneInputError, match="output length"):
        closed_loop(2, p, o)
    with pytest.raises(HwtuneInputError, match="prompt length"):
        open_loop(2.0, np.zeros(4, dtype=int), np.ones(4, dtype=int))


def test_prefix_must_be_shorter_than_every_prompt():
    p, o = np.array([300, 50, 400]), np.array([5, 5, 5])
    with pytest.raises(HwtuneInputError, match=r"prefix_len.*50 tokens"):
        closed_loop(2, p, o, prefix_len=50, prefix_groups=2)
    wl = closed_loop(2, p, o, prefix_len=49, prefix_groups=2)
    assert wl.prefix_lens == (49, 49, 49)


def test_cli_prefix_longer_than_a_sampled_prompt():
    """The ShareGPT-like mix samples prompts of a few tokens: a 512-token prefix was cut to each
    of them less one token; now it says how short the shortest prompt is."""
    r = CliRunner().invoke(app, ["serve", "--concurrency", "2", "--num-requests", "20",
                                 "--prefix-len", "512", "--prefix-groups", "2"])  # fmt: skip
    assert r.exit_code == 2 and "--prefix-len" in r.output and "shortest prompt" in r.output
    assert "Traceback" not in r.output and r.output.count("\n") == 1
    r = CliRunner().invoke(app, ["serve", "--concurrency", "2", "--num-requests", "4",
                                 "--input-len", "600", "--output-len", "4", "--prefix-len", "512",
                                 "--prefix-groups", "2", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


HUGE = "99999999999999999999"  # past int64: numpy's lengths overflowed (a traceback)


@pytest.mark.parametrize(
    "cmd", [["serve"], ["serve", "plan", "--max-gpus", "1", "--processes", "1"]]
)
@pytest.mark.parametrize(
    ("opt", "value", "expected"),
    [
        ("--input-len", HUGE, "a token count from 1 to 1,000,000,000"),
        ("--output-len", HUGE, "a token count from 1 to 1,000,000,000"),
        ("--num-requests", HUGE, "a number of requests from 1 to 1,000,000"),
        # 2^40 requests asked numpy for 8 TiB of lengths (a MemoryError)
        ("--num-requests", str(2**40), "a number of requests from 1 to 1,000,000"),
    ],
)
def test_a_count_past_what_can_be_simulated_is_refused(rejects, cmd, opt, value, expected):
    rate = ["--rate", "2"] if "plan" in cmd else ["--concurrency", "2"]
    rejects([*cmd, "-m", "llama3.1-8b", *rate, opt, value], opt, f"got {value}", expected)


def test_the_generators_own_the_bounds():
    # the Python API refuses them too, whichever generator makes the lengths
    with pytest.raises(HwtuneInputError, match=r"num_requests: got 1000001"):
        fixed_lengths(1_000_001, 10, 10)
    with pytest.raises(HwtuneInputError, match=r"input_len: got 1000000001"):
        range_ratio_lengths(4, 1_000_000_001, 10, 0.5)
    with pytest.raises(HwtuneInputError, match=r"output_len: got 0"):
        fixed_lengths(4, 100, 0)
    p, o = fixed_lengths(2, 1_000_000_000, 1)  # the bound itself is a valid request length
    assert p.tolist() == [1_000_000_000] * 2 and o.tolist() == [1, 1]
