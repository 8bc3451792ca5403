"""A prompt longer than one step's token budget under a policy that prefills prompts whole
(orca, prefill-first) is refused, as TensorRT-LLM without chunked prefill rejects the request
("The sum of prompt length (P), query length (Q) should not exceed max_num_tokens (M)") and vLLM
without chunked prefill does not start with max_num_batched_tokens below max_model_len."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment
from hwtune.serve.request import closed_loop, fixed_lengths
from hwtune.serve.simulator import WHOLE_PROMPT_POLICIES, simulate


def _wl(prompt: int, n: int = 3, output: int = 4):
    p, o = fixed_lengths(n, prompt, output)
    return closed_loop(2, p, o)


@pytest.mark.parametrize("sched", ["orca", "prefill-first"])
def test_a_prompt_over_the_budget_is_refused_under_a_whole_prompt_policy(cfg8b, sched):
    cfg = replace(cfg8b, scheduler=sched, max_num_batched_tokens=2048)
    with pytest.raises(HwtuneInputError) as e:
        simulate(cfg, _wl(2049))
    msg = str(e.value)
    assert e.value.field == "input-len" and "2049" in msg and "at most 2048" in msg
    assert sched in msg and "chunking scheduler" in msg


@pytest.mark.parametrize("sched", ["orca", "prefill-first"])
def test_a_prompt_of_exactly_the_budget_runs_whole_in_one_step(cfg8b, sched):
    cfg = replace(cfg8b, scheduler=sched, max_num_batched_tokens=2048)
    res = simulate(cfg, _wl(2048, n=1), record_steps=True)
    assert [s.shape.pf_tokens for s in res.steps if s.shape.pf_tokens] == [2048]


@pytest.mark.parametrize("sched", ["vllm", "sarathi", "sglang", "static"])
def test_chunking_and_static_policies_run_longer_prompts(cfg8b, sched):
    cfg = replace(cfg8b, scheduler=sched, max_num_batched_tokens=512)
    res = simulate(cfg, _wl(1500))
    assert all(r.generated == r.output for r in res.requests)


def test_the_prefill_pool_of_a_disaggregated_deployment_is_the_one_checked(cfg8b):
    small = replace(cfg8b, scheduler="orca", max_num_batched_tokens=1024)
    big = replace(cfg8b, scheduler="vllm", max_num_batched_tokens=8192)
    # the decode pool never prefills a prompt: its whole-prompt budget does not bind
    res = simulate(Deployment(small, 1, "round-robin", big, 1), _wl(2000))
    assert len(res.requests) == 3
    with pytest.raises(HwtuneInputError, match="prefill pool"):
        simulate(Deployment(big, 1, "round-robin", small, 1), _wl(2000))


@settings(max_examples=30, deadline=None)
@given(
    sched=st.sampled_from(WHOLE_PROMPT_POLICIES),
    budget=st.sampled_from([256, 1024, 4096]),
    prompts=st.lists(st.integers(1, 5000), min_size=1, max_size=6),
)
def test_refused_exactly_when_some_prompt_exceeds_the_budget(cfg8b, sched, budget, prompts):
    from hwtune.serve.request import Workload

    cfg = replace(cfg8b, scheduler=sched, max_num_batched_tokens=budget)
    wl = Workload(tuple(prompts), (2,) * len(prompts), "closed", 2)
    if max(prompts) > budget:
        with pytest.raises(HwtuneInputError, match="input-len"):
            simulate(cfg, wl)
    else:
        assert len(simulate(cfg, wl).requests) == len(prompts)


def test_cli_refuses_with_one_line(rejects):
    rejects(["serve", "--scheduler", "orca", "--max-num-batched-tokens", "2048",
             "--input-len", "4096", "--output-len", "8", "--num-requests", "2"],
            "input-len", "4096", "2048")  # fmt: skip


def test_trtllm_engine_defaults_refuse_a_prompt_over_max_num_tokens(rejects):
    """`--engine trtllm` runs whole prompts (TensorRT-LLM's default: no chunked prefill)."""
    rejects(["serve", "--engine", "trtllm", "--max-num-batched-tokens", "1024",
             "--input-len", "3000", "--output-len", "8", "--num-requests", "2"],
            "input-len", "3000", "1024")  # fmt: skip


def test_plan_refuses_when_no_layout_holds_the_prompt_whole(rejects):
    line = rejects(["serve", "plan", "--engine", "trtllm", "--input-len", "9000", "--output-len",
                    "16", "--concurrency", "2", "--num-requests", "4", "--max-gpus", "1",
                    "--no-disagg"], "input-len", "9000", "8192")  # fmt: skip
    # the same refusal from every layout is the input's own, said once
    assert line.startswith("error: --input-len: got 9000; expected at most 8192"), line


def test_plan_takes_the_budget_and_launches_it():
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, ["serve", "plan", "--input-len", "9000", "--output-len", "16",
                                 "--concurrency", "2", "--num-requests", "4", "--max-gpus", "1",
                                 "--max-num-batched-tokens", "12288", "--launch", "trtllm",
                                 "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    args = json.loads(r.stdout)["launch"]["args"]
    assert args[args.index("--max_num_tokens") + 1] == "12288"


@given(field=st.sampled_from(["input-len", "tp", "gpu"]), value=st.integers(0, 10**6),
       expected=st.text(alphabet="abc 0123456789,()", min_size=1, max_size=40))  # fmt: skip
def test_an_error_read_back_from_its_text_says_the_same(field, value, expected):
    # `serve plan`'s layouts return their refusals as text; read back, one says the same line
    text = str(HwtuneInputError(field, value, expected))
    again = HwtuneInputError.from_message(text)
    assert again is not None and str(again) == text
    assert (again.field, again.expected) == (field, expected)
    assert HwtuneInputError.from_message("every layout failed") is None
