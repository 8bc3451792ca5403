"""A replica's own context limit (`ReplicaConfig.max_model_len`, ``serve --max-model-len``): the
longest request an engine accepts (vLLM ``--max-model-len``, SGLang ``--context-length``,
TensorRT-LLM ``--max_seq_len``). Engines refuse longer requests and, without an override in the
environment, a limit above the model's derived context (vLLM ``_get_and_verify_max_len``); vLLM
refuses to start when one rank's KV cache cannot hold a request of that length
(``check_enough_kv_cache_memory``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from launch_args import flags

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.launch import sglang_launch, trtllm_launch, vllm_launch, vllm_refusal
from hwtune.serve.memory import replica_memory
from hwtune.serve.request import closed_loop, fixed_lengths
from hwtune.serve.simulator import simulate

# Llama-3.1's config.json: max_position_embeddings 131072 (rope_scaling llama3, factor 8 over
# the 8192 of original_max_position_embeddings), the length vLLM derives
LLAMA31_CONTEXT = 131072


def cfg(gpu: str = "h100-sxm-80gb", **kw: object) -> ReplicaConfig:
    return ReplicaConfig(get_model("llama3.1-8b"), get_device(gpu), **kw)  # type: ignore[arg-type]


def run(c: ReplicaConfig, prompt: int, output: int) -> None:
    p, o = fixed_lengths(2, prompt, output)
    simulate(Deployment(c), closed_loop(1, p, o))


@pytest.mark.parametrize("bad", [0, -4096, True, 2048.0, "4096"])
def test_not_a_token_count_is_refused(bad: object) -> None:
    with pytest.raises(HwtuneInputError) as e:
        cfg(max_model_len=bad)
    assert e.value.field == "max_model_len" and e.value.value == bad


def test_above_the_models_context_is_refused() -> None:
    assert cfg().context_limit == LLAMA31_CONTEXT  # unset: the model's own
    assert cfg(max_model_len=LLAMA31_CONTEXT).context_limit == LLAMA31_CONTEXT
    with pytest.raises(HwtuneInputError, match="at most 131072 tokens") as e:
        cfg(max_model_len=LLAMA31_CONTEXT + 1)
    assert e.value.field == "max_model_len"


def test_a_learned_position_table_bounds_it() -> None:
    # Megatron-LM's GPT of Narayanan et al. (SC'21, Table 1): sequence length 2048, learned
    # position embeddings of that many rows
    gpt = get_model("gpt-1.7b")
    assert gpt.max_position == 2048
    ReplicaConfig(gpt, get_device("h100-sxm-80gb"), max_model_len=2048)
    with pytest.raises(HwtuneInputError, match="learned position table"):
        ReplicaConfig(gpt, get_device("h100-sxm-80gb"), max_model_len=2049)


@settings(max_examples=15, deadline=None)
@given(limit=hs.integers(64, 4096), prompt=hs.integers(1, 4096), output=hs.integers(1, 512))
def test_a_request_is_refused_exactly_when_longer_than_the_limit(
    limit: int, prompt: int, output: int
) -> None:
    c = cfg(max_model_len=limit)
    if prompt + output > limit:
        with pytest.raises(HwtuneInputError, match="--max-model-len") as e:
            run(c, prompt, output)
        assert e.value.field == "input-len + output-len" and e.value.value == prompt + output
    else:
        run(c, prompt, output)


def test_each_engine_gets_its_own_flag() -> None:
    c = cfg(max_model_len=8192)
    assert flags(vllm_launch(Deployment(c), "m").args)["--max-model-len"] == "8192"
    assert (
        flags(sglang_launch(Deployment(c.with_(eager_prefill=True)), "m").args)["--context-length"]
        == "8192"
    )
    t = c.with_(scheduler="orca", all_reduce_kernel="trtllm", kv_memory_rule="free",
                reserve_to_completion=True, eager_prefill=True, block_size=32)  # fmt: skip
    assert flags(trtllm_launch(Deployment(t), "m").args)["--max_seq_len"] == "8192"
    unset = cfg()
    assert "--context-length" not in flags(sglang_launch(Deployment(unset.with_(
        eager_prefill=True)), "m").args)  # fmt: skip
    assert "--max_seq_len" not in flags(trtllm_launch(Deployment(t.with_(max_model_len=None)),
                                                      "m").args)  # fmt: skip


def test_vllm_refuses_a_limit_the_cache_cannot_hold() -> None:
    small = cfg("rtx-4090")  # ~30k tokens of KV beside 15 GiB of weights
    held = replica_memory(small).kv_tokens
    assert held < LLAMA31_CONTEXT
    r = vllm_refusal(small.with_(max_model_len=held + 1))
    assert r is not None and r.field == "max_model_len" and str(held) in r.expected
    assert vllm_refusal(small.with_(max_model_len=held)) is None
    assert flags(vllm_launch(Deployment(small.with_(max_model_len=held)), "m").args)[
        "--max-model-len"
    ] == str(held)  # the user's own, not rounded down


def test_cli(rejects) -> None:  # noqa: ANN001
    base = ["serve", "--concurrency", "1", "--num-requests", "2"]
    rejects([*base, "--max-model-len", "0"], "--max-model-len", "0", "positive integer")
    rejects([*base, "--max-model-len", "1024", "--input-len", "1000", "--output-len", "25"],
            "input-len + output-len", "1025", "at most 1024", "--max-model-len")  # fmt: skip
    rejects(["serve", "plan", "--max-model-len", "200000"], "--max-model-len", "200000", "131072")
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    for extra, want in (([], LLAMA31_CONTEXT), (["--max-model-len", "4096"], 4096)):
        r = CliRunner().invoke(app, [*base, "--input-len", "100", "--output-len", "10", "--json",
                                     *extra])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["max_model_len"] == want


def test_plan_launch_finds_the_layout_whose_cache_holds_it() -> None:
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    # one RTX 4090 holds ~30k tokens of Llama-3.1-8B's KV, two hold ~2.5x that (the weights
    # split): a 60000-token limit is launched on two, not refused on the first layout tried
    args = ["serve", "plan", "--model", "llama3.1-8b", "--gpu", "rtx-4090", "--launch", "vllm",
            "--max-model-len", "60000", "--max-gpus", "2", "--concurrency", "2",
            "--num-requests", "4", "--input-len", "100", "--output-len", "10", "--json",
            "--processes", "1"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    cmd = json.loads(r.output)["launch"]["command"]
    assert "--tensor-parallel-size 2" in cmd and "--max-model-len 60000" in cmd


def test_json_reports_the_launched_limit_and_both_pools_get_it() -> None:
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    base = ["serve", "--concurrency", "2", "--num-requests", "4", "--input-len", "100",
            "--output-len", "10", "--json", "--launch", "vllm"]  # fmt: skip
    # no limit given on an RTX 4090: vLLM gets the KV cache's capacity, and --json says so
    r = CliRunner().invoke(app, [*base, "--gpu", "rtx-4090"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    n = doc["max_model_len"]
    assert n < LLAMA31_CONTEXT and f"--max-model-len {n} " in doc["launch"]["command"]
    # disaggregated: the prefill and the decode servers both carry the limit
    r = CliRunner().invoke(app, [*base, "--disagg", "--max-model-len", "8192"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["max_model_len"] == 8192
    for pool in ("prefill", "decode"):
        assert "--max-model-len 8192 " in doc["launch"][pool]["command"]


def test_the_emulated_endpoint_refuses_a_longer_request() -> None:
    from hwtune.serve.emulator import EmulatedEngine

    now = [0.0]
    eng = EmulatedEngine(cfg(max_model_len=512), clock=lambda: now[0])
    eng.submit(500, 12)  # 512 tokens: accepted
    with pytest.raises(HwtuneInputError, match="--max-model-len") as e:
        eng.submit(500, 13)
    assert e.value.value == 513
