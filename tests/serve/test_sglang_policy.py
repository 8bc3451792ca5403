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


def test_a_prompt_waits_until_the_cache_holds_all_of_it():
    """SGLang admits a prompt only when the free KV holds its whole input (``PrefillAdder``),
    so with one chunk's room but not the whole prompt's it waits; admitted on the first chunk's
    room, a chunked prompt preempted itself each step when the cache barely held a request, and
    the run never ended (found by a review: 81 blocks, 15 requests of up to 974 tokens)."""
    import numpy as np

    from hwtune.serve.request import Workload
    from hwtune.serve.simulator import simulate

    cfg = ReplicaConfig(get_model("llama-3.1-8b"), get_device("h100-sxm-80gb"),
                        scheduler="sglang", max_num_batched_tokens=300, chunk_size=128,
                        gpu_memory_utilization=0.209, enable_prefix_caching=False,
                        eager_prefill=True, max_num_seqs=64)  # fmt: skip
    rng = np.random.default_rng(1)
    prompts = tuple(int(x) for x in rng.integers(100, 600, 15))
    outputs = tuple(int(x) for x in rng.integers(50, 500, 15))
    arrivals = tuple(float(x) for x in np.sort(rng.uniform(0, 0.3, 15)))
    res = simulate(cfg, Workload(prompts, outputs, "open", 0, arrivals), max_sim_time=120.0)
    assert len(res.requests) == 15  # all finished within two simulated minutes
    # and the admission rule itself: one 300-token chunk fits, the 1,000-token prompt does not
    rep = Replica(0, cfg, res.models["both"], kv_blocks=40)
    rep.waiting.append(Request(rid=1, arrival=0.0, prompt=1000, output=8))
    batch, _ = rep.schedule(0.0)
    assert batch == [] and len(rep.waiting) == 1
    rep = Replica(0, cfg, res.models["both"], kv_blocks=63)
    rep.waiting.append(Request(rid=1, arrival=0.0, prompt=1000, output=8))
    batch, _ = rep.schedule(0.0)
    assert [q for _r, q in batch] == [300]
