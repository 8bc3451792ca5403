"""The launch commands as a user runs them: across the five frameworks (Megatron-LM, torchtitan,
vLLM, SGLang, TensorRT-LLM), the ``--json`` ``launch`` document is read the same way, and the
printed commands say where to run them, how many times, and what to replace.

Facts used: torchrun with ``--nnodes N > 1`` and no rendezvous options uses the static
rendezvous with node rank 0 and master address 127.0.0.1 (torch/distributed/run.py,
``--node-rank`` and ``--master-addr`` defaults), so one command line copied to N machines only
meets with ``--rdzv-backend c10d --rdzv-endpoint HOST:PORT`` (PyTorch's "torchrun (Elastic
Launch)" page, "Usage: Multi-node"); ``--node-rank``, ``--master-addr``, ``--master-port`` and
``--rdzv-*`` are torchrun's options, not Megatron-LM's (megatron/training/arguments.py has
none of them)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.model.catalog import get_model
from hwtune.train.launch import megatron_launch, split_command, strategy_from_megatron
from hwtune.train.launch_torchtitan import torchtitan_launch
from hwtune.train.strategy import Strategy

LLAMA = get_model("llama3.1-8b")
TITAN = {"attention_kernel": "flex", "fused_elementwise": False, "fused_norm": True,
         "loss_kernel": "chunked", "grad_reduce_dtype": "fp32"}  # fmt: skip
"""The kernels torchtitan runs (``--framework torchtitan-flex``)."""
COMMON = ("command", "env", "files", "gpus", "note")
"""What every launch document has, whatever the framework or engine."""


def _torchrun_part(command: str, entry: str) -> list[str]:
    """The tokens of ``command`` before its entry (torchrun's own options)."""
    tokens = split_command(command)
    return tokens[: tokens.index(entry)]


# ---- training: several nodes --------------------------------------------------------------
@pytest.mark.parametrize("launch", ["megatron", "torchtitan"])
def test_several_node_command_meets_at_one_rendezvous(launch: str) -> None:
    kernels = {} if launch == "megatron" else TITAN
    st = Strategy(dp=4, tp=4, zero=1, **kernels)
    fn, entry = ((megatron_launch, "pretrain_gpt.py") if launch == "megatron"
                 else (torchtitan_launch, "torchtitan.train"))  # fmt: skip
    multi = fn(st, LLAMA, 16, 8).command()
    run = _torchrun_part(multi, entry)
    # every node runs the same line: c10d rendezvous at one host, not localhost's static one
    assert run[run.index("--rdzv-backend") + 1] == "c10d"
    host = run[run.index("--rdzv-endpoint") + 1]
    assert not host.startswith(("127.", "localhost"))
    doc = fn(st, LLAMA, 16, 8).to_dict()
    assert host.split(":")[0] in str(doc["note"])  # the placeholder is explained
    # one node: torchrun's defaults meet on the machine itself, nothing to add
    single = _torchrun_part(fn(Strategy(dp=2, tp=4, zero=1, **kernels), LLAMA, 8, 8).command(),
                            entry)  # fmt: skip
    assert not any(t.startswith("--rdzv") for t in single)


def test_several_node_megatron_command_reads_back_the_same() -> None:
    st = Strategy(dp=4, tp=2, pp=2, zero=1, micro_batch=1, global_batch=64, seq=4096)
    line = megatron_launch(st, LLAMA, 16, 8).command()
    assert "--rdzv-endpoint" in line
    job = strategy_from_megatron(split_command(line))
    assert job.n_gpus == 16
    assert job.not_read == ()  # the rendezvous options are torchrun's, and known
    assert job.fields["tp"] == 2 and job.fields["pp"] == 2


def test_torchrun_options_are_not_called_megatron_options() -> None:
    line = ("torchrun --nnodes 2 --nproc_per_node 8 --node_rank 1 --master-addr n0 "
            "--master_port 6000 --rdzv-id job7 --standalone pretrain_gpt.py "
            "--tensor-model-parallel-size 2 --seq-length 4096 --lr 1e-4")  # fmt: skip
    job = strategy_from_megatron(split_command(line))
    assert job.not_read == ("--lr",)
    assert job.n_gpus == 16 and job.fields["tp"] == 2


# ---- the JSON document, read the same way for all five ------------------------------------
TRAIN = ["estimate", "-m", "llama3.1-8b", "--gpus", "16", "--tp", "2", "--global-batch", "64",
         "--seq", "4096", "--json"]  # fmt: skip
SERVE = ["serve", "-m", "llama3.1-8b", "--tp", "2", "--replicas", "2", "--concurrency", "4",
         "--num-requests", "8", "--input-len", "256", "--output-len", "8", "--json"]  # fmt: skip
DISAGG = ["--disagg", "--prefill-tp", "1", "--prefill-replicas", "3"]


def _launch(args: list[str]) -> dict:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["launch"]


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_training_launch_document_has_the_common_keys(framework: str) -> None:
    doc = _launch([*TRAIN, "--launch", framework])
    assert set(COMMON) <= set(doc), framework
    assert doc["gpus"] == 16 == doc["nnodes"] * doc["nproc_per_node"]
    assert doc["files"] == {}  # neither reads a file hwtune writes
    assert "data" in doc["note"]  # what is still to be added is said in --json too


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_serving_launch_documents_have_the_common_keys(engine: str) -> None:
    agg = _launch([*SERVE, "--launch", engine])
    assert set(COMMON) <= set(agg) and agg["disaggregated"] is False
    assert agg["gpus"] == 2 * 2  # two replicas at TP 2
    dis = _launch([*SERVE, *DISAGG, "--launch", engine])
    assert set(COMMON) - {"command", "env"} <= set(dis) and dis["disaggregated"] is True
    parts = [dis["prefill"], dis["decode"], dis["router"]]
    for part in parts:  # each part alike: what to run, how many copies, on how many GPUs
        assert {"command", "env", "files", "replicas", "gpus"} <= set(part), engine
    assert dis["router"]["replicas"] == 1 and dis["router"]["gpus"] == 0
    assert dis["gpus"] == 3 * 1 + 2 * 2 == sum(p["gpus"] for p in parts)
    # `launch.files` is every file to write, as for an aggregated launch
    every = {name for p in parts for name in p["files"]}
    assert set(dis["files"]) == every
    assert (engine == "trtllm") == bool(every)


# ---- what the printed output says ----------------------------------------------------------
def _text(args: list[str]) -> str:
    res = CliRunner().invoke(app, [a for a in args if a != "--json"])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())  # rich wraps long lines


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_disaggregated_output_explains_its_placeholder_hosts(engine: str) -> None:
    out = _text([*SERVE, *DISAGG, "--launch", engine])
    first, second = ("CTX", "GEN") if engine == "trtllm" else ("PREFILL", "DECODE")
    assert f"{first}_1" in out and f"{second}_2" in out  # in the router's command or file
    head = out[: out.index("prefill (")]  # said before the commands, not left to the README
    assert "replace" in head and f"{first}_3" in head and f"{second}_2" in head
    assert "router once" in head


def test_aggregated_replicas_are_said_to_need_a_load_balancer() -> None:
    out = _text([*SERVE, "--launch", "vllm"])
    assert "2 times" in out and "round-robin load balancer" in out
    out = _text([*SERVE, "--router", "least-tokens", "--launch", "sglang"])
    assert "least-tokens load balancer" in out


def test_training_output_says_how_many_nodes_run_the_line() -> None:
    out = _text([*TRAIN, "--launch", "megatron"])
    assert "2 nodes x 8 GPUs" in out and "each of the 2 nodes" in out
    assert "NODE_0" in out.split("each of the 2 nodes")[1].split("torchrun")[0]


# ---- Megatron-LM's pipeline stages ---------------------------------------------------------
# DeepSeek-V3 has 61 layers (config.json num_hidden_layers), a prime. Megatron-LM (d98e8a64)
# asserts num_layers % pp == 0 (arguments.py:998) and (num_layers / pp) % vpp == 0
# (transformer_block.py:176) unless --decoder-first/last-pipeline-num-layers set the first or
# last rank's count, the other ranks then even (transformer_block.py:125-131).
DSV3 = get_model("deepseek-v3")


def _megatron_rank_layers(args: list[str], n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline rank as Megatron-LM builds them from ``args`` (no virtual stages)."""
    opt = {args[i]: int(args[i + 1]) for i in range(len(args) - 1) if args[i].startswith("--")
           and args[i + 1].isdigit()}  # fmt: skip
    first = opt.get("--decoder-first-pipeline-num-layers")
    last = opt.get("--decoder-last-pipeline-num-layers")
    rest = n_layers - (first or 0) - (last or 0)
    middle = pp - (first is not None) - (last is not None)
    assert rest % middle == 0, "Megatron-LM asserts the other ranks are even"
    ranks = [rest // middle] * middle
    return ([first] if first is not None else []) + ranks + ([last] if last is not None else [])


def test_megatron_launch_builds_the_stages_the_estimate_prices() -> None:
    from hwtune.train.estimator import _stage_layers

    assert DSV3.n_layers == 61
    for pp in (2, 4, 5):  # 61 = pp * base + 1: one more layer on the first rank
        st = Strategy(pp=pp, dp=2, ep=2, sequence_parallel=False, global_batch=4 * pp)
        la = megatron_launch(st, DSV3, 2 * pp, 8)
        built = _megatron_rank_layers(list(la.args), 61, pp)
        assert built == [len(r) for r in _stage_layers(61, pp, 1)], pp
    # 61 over 32 ranks: 29 ranks of 2 and 3 of 1, which no first/last count gives
    with pytest.raises(Exception) as info:
        megatron_launch(Strategy(pp=32, dp=1, global_batch=64), DSV3, 32, 8)
    assert getattr(info.value, "field", None) == "pp"
    # interleaving 32 layers over 4 ranks of 8 in 3 virtual stages
    st = Strategy(pp=4, dp=2, schedule="interleaved", vpp=3, global_batch=64)
    with pytest.raises(Exception) as info:
        megatron_launch(st, LLAMA, 8, 8)
    assert getattr(info.value, "field", None) == "vpp"


def test_uneven_pipeline_errors_are_one_line_and_read_back() -> None:
    args = ["estimate", "-m", "deepseek-v3", "--gpus", "2048", "--pp", "32", "--cp", "4",
            "--ep", "8", "--global-batch", "2048", "--seq", "8192", "--launch", "megatron"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "--pp" in res.output and len(res.output.splitlines()) == 1
    args = ["estimate", "-m", "deepseek-v3", "--gpus", "256", "--pp", "4", "--ep", "8",
            "--global-batch", "256", "--seq", "4096", "--launch", "megatron", "--json"]  # fmt: skip
    line = _launch(args)["command"]
    assert "--decoder-first-pipeline-num-layers 16" in line  # 16 + 3 x 15 = 61
    res = CliRunner().invoke(app, ["estimate", "-m", "deepseek-v3", "--megatron-args", line])
    assert res.exit_code == 0, res.output
    assert "not read" not in res.output  # the first-stage count is read, and matches
    cut = line.replace(" --decoder-first-pipeline-num-layers 16", "")
    res = CliRunner().invoke(app, ["estimate", "-m", "deepseek-v3", "--megatron-args", cut])
    assert res.exit_code == 2 and "--decoder-first-pipeline-num-layers" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_plan_launches_only_pipelines_megatron_builds() -> None:
    args = ["plan", "-m", "deepseek-v3", "--gpus", "256", "--global-batch", "256", "--seq",
            "4096", "--top", "5", "--launch", "megatron", "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    for row in json.loads(res.output)["top"]:
        st = row["strategy"]
        v = st["vpp"] if st["schedule"] == "interleaved" else 1
        even = 61 % (st["pp"] * v) == 0
        assert even or (v == 1 and 61 % st["pp"] in (1, st["pp"] - 1)), st


def test_model_placeholder_is_in_the_json_note_too() -> None:
    # llama2-7b's catalog entry names no Hugging Face repository, so the command says MODEL
    doc = _launch(["serve", "-m", "llama2-7b", "--concurrency", "2", "--num-requests", "4",
                   "--input-len", "128", "--output-len", "4", "--launch", "vllm", "--json"])  # fmt: skip
    assert " MODEL " in doc["command"]
    assert "MODEL" in doc["note"] and "llama2-7b" in doc["note"]
