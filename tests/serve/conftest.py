from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel
from hwtune.serve.request import Request
from hwtune.serve.scheduler import Replica


@pytest.fixture(scope="session")
def llama8b():
    return get_model("llama3.1-8b")


@pytest.fixture(scope="session")
def h100():
    return get_device("h100-sxm-80gb")


@pytest.fixture(scope="session")
def cfg8b(llama8b, h100):
    return ReplicaConfig(llama8b, h100)


@pytest.fixture
def decoding_replica():
    """A function (config, decoding, output=64) -> a `Replica` of ``config`` with room for
    100,000 KV blocks and ``decoding`` requests past their 16-token prompt, decoding (ids from
    1000, so tests tell them from the prompts they add)."""

    def make(cfg: ReplicaConfig, decoding: int, output: int = 64) -> Replica:
        rep = Replica(0, cfg, IterationModel(cfg), kv_blocks=100_000)
        for i in range(decoding):
            r = Request(rid=1000 + i, arrival=0.0, prompt=16, output=output, computed=17,
                        target=16)  # fmt: skip
            r.blocks = rep.blocks.allocate(2)
            rep.running.append(r)
        return rep

    return make
