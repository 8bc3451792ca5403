"""review 24b: `estimate`'s GPU count error naming a flag the user did not set. (Its RAPL
sampler tests are in tests/energy/test_rapl_sampling.py, the Jetson rate test in
tests/energy/test_jetson.py.)"""

from __future__ import annotations


def test_estimate_does_not_name_gpus_for_a_count_derived_from_dp(rejects):
    """Without --gpus, estimate derives the GPU count from --dp*--tp*--pp*--cp; a bad count
    was reported as '--gpus: got -1', a flag the user never typed."""
    msg = rejects(["estimate", "--dp", "-1"], "--dp x --tp x --pp x --cp", "-1")
    assert "--gpus" not in msg
    msg = rejects(["estimate", "--dp", "2", "--pp", "0"], "--dp x --tp x --pp x --cp", "0")
    assert "--gpus" not in msg
    msg = rejects(
        ["estimate", "--dp", "3", "--gpus-per-node", "2"], "--dp x --tp x --pp x --cp", "3"
    )
    assert "--gpus:" not in msg
    # typed (or its default 8), it is still named
    rejects(["estimate", "--gpus-per-node", "3"], "--gpus", "8")
    msg = rejects(["estimate", "--gpus", "0"], "--gpus", "0")
    assert msg.startswith("error: --gpus: got 0")
