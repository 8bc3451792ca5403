"""Shared test helpers."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (seeded from each test's source), so the
# suite passes or fails the same way on CI as here: a random draw once failed CI on a case no
# earlier run had made. HYPOTHESIS_PROFILE=explore draws new examples (with a replay database)
# to look for such cases; pytest --hypothesis-seed=N reproduces one exploration run.
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (the scripts are not a package) once per session."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


SHARED_TRAINING = (
    Path(
        os.environ.get(
            "HWTUNE_VALIDATION_DIR", Path(__file__).resolve().parents[2] / "shared" / "validation"
        )
    )
    / "training_published.jsonl"
)
"""The shared set of published training runs (``$HWTUNE_VALIDATION_DIR`` if set)."""


@pytest.fixture(scope="session")
def published_runs():
    """The expressible-or-not `PublishedRun`s of `SHARED_TRAINING`; skips when it is absent."""
    if not SHARED_TRAINING.exists():
        pytest.skip(f"no {SHARED_TRAINING}")
    from hwtune.train.published import load_published

    return {r.id: r for r in load_published(SHARED_TRAINING)}


@pytest.fixture(scope="session")
def throughput_error():
    """The estimate's tokens/s per GPU over a `PublishedRun`'s measured figure, less 1."""
    from hwtune.train.estimator import _estimate

    def error(run) -> float:  # noqa: ANN001
        est = _estimate(run.spec, run.cluster, run.strategy)
        return est.tokens_per_s_per_gpu / run.targets["tokens_per_s_per_gpu"] - 1

    return error


@pytest.fixture(scope="session")
def benchmark_module():
    """`load_benchmark` as a fixture, for tests of the benchmark scripts."""
    return load_benchmark


@pytest.fixture(scope="session")
def rejects():
    """``rejects(args, field, *words)``: `hwtune ARGS` exits with code 2 and one line naming
    ``field`` (and any ``words``: the value, what was expected), without a traceback; returns
    that line."""
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    def check(args: list[str], field: str, *words: str) -> str:
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, r.output
        assert "Traceback" not in r.output and r.output.count("\n") == 1, r.output
        for w in (field, *words):
            assert w in r.output, r.output
        return r.output

    return check
