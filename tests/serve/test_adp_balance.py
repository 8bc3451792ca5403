"""TensorRT-LLM attention-DP balancing in the scheduler (`Replica._adp_hold`;
``PyExecutor._balance_adp_requests`` with ``enable_balance``, ``timeout_iters``, no batching wait):
while every rank decodes, new prompts wait for one per rank or for the timeout."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.request import Request
from hwtune.serve.scheduler import Replica

DP = 4


@pytest.fixture
def replica(decoding_replica):
    def make(timeout: int, decoding: int) -> Replica:
        cfg = ReplicaConfig(get_model("deepseek-v3"), get_device("h200-sxm-141gb"), tp=1,
                            dp_attention=8, ep=8, weight_dtype="fp8", scheduler="orca",
                            adp_balance_timeout_iters=timeout)  # fmt: skip
        return decoding_replica(cfg.with_(dp_attention=DP, ep=4), decoding)

    return make


def _new(n: int) -> list[Request]:
    return [Request(rid=i, arrival=0.0, prompt=64, output=8, target=64) for i in range(n)]


def _admitted(rep: Replica) -> int:
    batch, _ = rep.schedule(0.0)
    return sum(1 for r, _q in batch if r.rid < 1000)


def test_a_lone_prompt_waits_for_the_timeout_while_every_rank_decodes(replica):
    rep = replica(timeout=5, decoding=DP)
    rep.waiting.extend(_new(1))
    waited = 0
    while _admitted(rep) == 0:
        waited += 1
        assert waited < 50
    assert waited == 4  # held 4 steps, scheduled on the 5th (the counter reaching timeout_iters)


@pytest.mark.parametrize("waiting,decoding", [(DP, DP), (1, DP - 1), (3, 0)])
def test_prompts_go_at_once_when_every_rank_has_one_or_some_rank_is_idle(
    waiting, decoding, replica
):
    rep = replica(timeout=60, decoding=decoding)
    rep.waiting.extend(_new(waiting))
    assert _admitted(rep) == waiting


def test_no_balancing_without_attention_dp_or_timeout(replica):
    rep = replica(timeout=0, decoding=DP)
    rep.waiting.extend(_new(1))
    assert _admitted(rep) == 1
    with pytest.raises(HwtuneInputError, match="adp_balance_timeout_iters"):
        rep.cfg.with_(adp_balance_timeout_iters=-1)
