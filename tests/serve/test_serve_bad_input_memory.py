"""The KV cache needs room for a few blocks (`MIN_KV_BLOCKS`), not for block_size squared
tokens; a block size too large for the memory left is named as such."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.serve.memory import MIN_KV_BLOCKS, replica_memory


def test_a_large_block_size_fits_when_its_blocks_do(cfg8b):
    m = replica_memory(replace(cfg8b, block_size=1024))  # 1024^2 tokens used to be required
    assert m.kv_blocks >= MIN_KV_BLOCKS
    assert m.kv_tokens == pytest.approx(replica_memory(cfg8b).kv_tokens, rel=0.01)


def test_a_block_size_that_does_not_fit_is_named(cfg8b):
    with pytest.raises(HwtuneInputError, match="block_size"):
        replica_memory(replace(cfg8b, block_size=10**8))


def test_cli_block_size():
    args = ["serve", "--concurrency", "1", "--input-len", "64", "--output-len", "4",
            "--num-requests", "1"]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--block-size", "1024", "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*args, "--block-size", "100000000"])
    assert r.exit_code == 2 and "--block-size" in r.output and "Traceback" not in r.output
    assert r.output.count("\n") == 1
