from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig


@pytest.fixture(scope="session")
def llama8b():
    return get_model("llama3.1-8b")


@pytest.fixture(scope="session")
def h100():
    return get_device("h100-sxm-80gb")


@pytest.fixture(scope="session")
def cfg8b(llama8b, h100):
    return ReplicaConfig(llama8b, h100)
