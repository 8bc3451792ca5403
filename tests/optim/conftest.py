"""Shared set-up for the hwtune.optim tests (torch is an optional extra of hwtune)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))  # tiny_models, reference


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: small tensors run faster, and runs are reproducible on busy CI."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def graphs(monkeypatch) -> list:
    """The graphs `compiled_update_span` compiles while the test runs: its own settings with a
    pass-through backend that counts them (no C++ compile; the eager ops run)."""
    import functools

    from hwtune.optim import optimizer as opt_mod

    seen: list = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    monkeypatch.setattr(opt_mod, "_compiled_update_span", None)
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()
