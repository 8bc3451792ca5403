"""SGLang's default scheduling (`scheduler="sglang"`; SGLang v0.5 ``Scheduler.get_next_batch_to_run``
runs a prefill batch whenever one can be formed, and with ``enable_mixed_chunk`` off never puts
decodes in it): a step carries prompt chunks or decodes, never both."""

from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.request import Request
from hwtune.serve.scheduler import Replica


@pytest.fixture
def replica(decoding_replica):
    def make(policy: str, decoding: int, budget: int = 4096) -> Replica:
        cfg = ReplicaConfig(get_model("llama-3.1-8b"), get_device("h200-sxm-141gb"),
                            scheduler=policy, max_num_batched_tokens=budget)  # fmt: skip
        return decoding_replica(cfg, decoding)

    return make


def _step(rep: Replica) -> tuple[tuple[int, int], int]:
    """(prompt chunks, decodes) of the next step, and its prompt tokens; then the step's tokens
    are counted as computed, as the engine loop does."""
    batch, s = rep.schedule(0.0)
    pf = sum(1 for r, _q in batch if r.computed < r.target)
    for r, q in batch:
        r.computed += q
    return (pf, len(batch) - pf), s.pf_tokens


def test_a_waiting_prompt_runs_alone_and_the_decodes_wait(replica):
    rep = replica("sglang", decoding=3)
    rep.waiting.append(Request(rid=1, arrival=0.0, prompt=1000, output=8, target=1000))
    assert _step(rep)[0] == (1, 0)
    assert _step(rep)[0] == (0, 4)  # then everyone decodes, the new one too
    mixed = replica("vllm", decoding=3)
    mixed.waiting.append(Request(rid=1, arrival=0.0, prompt=1000, output=8, target=1000))
    assert _step(mixed)[0] == (1, 3)  # vLLM mixes them in one step


def test_a_long_prompt_is_chunked_and_finishes_before_any_decode(replica):
    rep = replica("sglang", decoding=2, budget=4096)
    rep.waiting.append(Request(rid=1, arrival=0.0, prompt=10_000, output=8, target=10_000))
    steps = [_step(rep) for _ in range(4)]
    assert steps[:3] == [((1, 0), 4096), ((1, 0), 4096), ((1, 0), 1808)]
    assert steps[3][0] == (0, 3)
