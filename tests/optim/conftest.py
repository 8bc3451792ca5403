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
