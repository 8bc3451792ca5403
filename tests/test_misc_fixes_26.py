"""Twenty-sixth session: node-size errors name the option, and `compile` says which tier priced it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

H200_PROFILE = (
    Path(__file__).resolve().parents[1] / "src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml"
)


def test_energy_step_names_the_node_size_option(rejects):
    """12 GPUs in nodes of 8 (the DGX H100 preset): the expectation named the Python field
    ``gpus_per_node``, an option `energy step` did not have."""
    line = rejects(["energy", "step", "--gpus", "12"], "--gpus", "--gpus-per-node", "8")
    assert "gpus_per_node" not in line


def test_energy_step_takes_a_node_size():
    r = CliRunner().invoke(
        app, ["energy", "step", "--gpus", "12", "--gpus-per-node", "4", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["n_gpus"] == 12


def test_energy_step_rejects_a_zero_node_size(rejects):
    rejects(["energy", "step", "--gpus", "16", "--gpus-per-node", "0"], "--gpus-per-node", "0")


def test_compile_names_the_node_size_option(rejects):
    line = rejects(["compile", "--gpus", "12"], "--gpus", "--gpus-per-node", "8")
    assert "gpus_per_node" not in line


def test_compile_says_which_tier_priced_it():
    """Tier 2 prices the step from the profile (a different time) and says so, as estimate does."""
    runner = CliRunner()
    docs = {}
    for gpu in ("h200-sxm-141gb", str(H200_PROFILE)):
        r = runner.invoke(app, ["compile", "--tp", "8", "--gpu", gpu])
        assert r.exit_code == 0, r.output
        assert f"note: tier {1 if gpu.endswith('gb') else 2}:" in r.output
        j = runner.invoke(app, ["compile", "--tp", "8", "--gpu", gpu, "--json"])
        docs[gpu] = json.loads(j.output)
    tiers = [d["tier"] for d in docs.values()]
    assert tiers == [1, 2]
    times = [d["simulation"]["step_time_s"] for d in docs.values()]
    assert times[0] != times[1]


def _serve_json(*args: str) -> dict:
    r = CliRunner().invoke(
        app, ["serve", "--concurrency", "4", "--num-requests", "20", "--json", *args]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_the_serving_record_says_what_it_does_not_cover():
    """The record is of tier-1 predictions on H100/H200 (every published row is Hopper): a
    Hopper run at tier 1 carries it as is; another architecture is told so; a tier-2 prediction
    is told so and gets no likely band, which corrects tier-1 errors it does not have."""
    h100 = _serve_json("--gpu", "h100-sxm-80gb")["accuracy"]
    assert "scope" not in h100 and "likely" in h100
    a100 = _serve_json("--gpu", "a100-sxm-80gb")["accuracy"]
    assert "ampere" in a100["scope"] and "likely" in a100
    tier2 = _serve_json("--gpu", str(H200_PROFILE))
    assert tier2["tier"] == 2
    assert "tier 2" in tier2["accuracy"]["scope"] and "likely" not in tier2["accuracy"]


def test_serve_plan_carries_the_scope_too():
    r = CliRunner().invoke(app, ["serve", "plan", "--gpu", "a100-sxm-80gb", "--num-requests", "40",
                                 "--max-gpus", "2", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    acc = json.loads(r.output)["accuracy"]
    assert "ampere" in acc["agg"]["scope"]


def _dsv3(dp: int, seqs: int = 256):
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig

    return ReplicaConfig(get_model("deepseek-v3"), get_device("h200-sxm-141gb"), tp=8 // dp,
                         dp_attention=dp, ep=8, weight_dtype="fp8", kv_dtype="fp8",
                         max_num_seqs=seqs, max_num_batched_tokens=8192)  # fmt: skip


def test_attention_dp_activations_are_a_full_rank_budget():
    """The token budget is per attention-DP rank (the scheduler's rank_budget; each engine's
    profiling run fills it on every rank), so a DP-8 rank holds the activations of 8,192 tokens
    like a TP-8 GPU does, plus logits of its eighth of the sequences; it was priced at 1,024."""
    from hwtune.serve.memory import activation_bytes_per_gpu

    spec = _dsv3(8).model
    t, up = 8192, 2
    widest = max(spec.ffn_hidden * up, (spec.n_heads + 2 * spec.kv_heads) * spec.hd,
                 spec.moe.top_k * up * spec.moe.expert_ffn_hidden)  # tp 1, moe_tp 1  # fmt: skip
    want = 2.0 * t * (4 * spec.d_model + 2 * widest) + 4.0 * 2 * (256 // 8) * spec.vocab
    assert activation_bytes_per_gpu(_dsv3(8)) == pytest.approx(want)


def test_vllm_max_num_seqs_is_per_data_parallel_rank():
    """vLLM runs each data-parallel rank as its own engine core with its own scheduler, so the
    replica's 256 sequences over 4 ranks are --max-num-seqs 64 (it gave 256: 4x the simulated)."""
    from launch_args import flags

    from hwtune.serve.config import Deployment
    from hwtune.serve.launch import vllm_launch

    cfg = _dsv3(4).with_(kv_memory_rule="total", scheduler="vllm", ep=8)
    got = flags(vllm_launch(Deployment(cfg), "deepseek-ai/DeepSeek-V3").args)
    assert got["--max-num-seqs"] == "64" and got["--data-parallel-size"] == "4"
    assert got["--max-num-batched-tokens"] == "8192"  # a rank's budget already
    from hwtune.serve.launch import vllm_refusal

    bad = vllm_refusal(cfg.with_(max_num_seqs=10))
    assert (
        bad is not None and bad.field == "max_num_seqs" and "per data-parallel rank" in bad.expected
    )
