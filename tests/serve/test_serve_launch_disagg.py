"""`hwtune serve --disagg --launch sglang|trtllm`: a disaggregated deployment as the prefill
servers, the decode servers and the router in front of them.

Names and values are facts of the pinned sources (each cited where used):

- SGLang ``python/sglang/srt/server_args.py`` at 001067fffe33427bee0ed2f007fb7551a1d76b44, "PD
  disaggregation" fields: ``disaggregation_mode`` Literal["null", "prefill", "decode"],
  ``disaggregation_transfer_backend`` (choices DISAGG_TRANSFER_BACKEND_CHOICES: mooncake, nixl,
  ascend, fake, mori, mooncake_tcp; default mooncake), ``disaggregation_bootstrap_port`` (default
  8998), ``disaggregation_decode_extra_slots``; flags are the fields with ``-`` for ``_``;
- SGLang's router, ``sgl-router/py_src/sglang_router/router_args.py`` at
  083d601378d0baaef6191e7f2d40fb70d06518af: ``--pd-disaggregation``, ``--prefill URL
  [BOOTSTRAP_PORT]`` (``nargs="+"``, given once per server; without the port the router assumes
  none), ``--decode URL`` (``nargs=1``), ``--policy`` with choices random, round_robin,
  cache_aware, power_of_two;
- vLLM ``docs/features/nixl_connector_usage.md`` at 026c83f974fcee0e1887060ebdcc53dc427bacfc:
  ``--kv-transfer-config`` JSON with ``kv_connector`` "NixlConnector" and ``kv_role``
  (kv_producer for prefill, kv_consumer for decode; kv_both); the proxy
  ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` (at
  030ea52effcb05071543c8c42b8f0145e94cee43) with ``--prefiller-hosts``/``--prefiller-ports``
  and ``--decoder-hosts``/``--decoder-ports`` (``nargs="+"``, as many hosts as ports, else
  ValueError), a round robin over each pool; ``nixl_connector_compatibility.md`` at
  0a5110ef53c5d0d86ac19464bad6e7b9a9c44dbc: the same KV cache dtype on both sides, a prefill
  block size at most the decode one ("Only P block size < D block size is supported");
- TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` at 0004396720054fd8e205cbf616f21f0b57c6b412:
  ``CacheTransceiverConfig.backend`` Literal["DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"];
  ``tensorrt_llm/llmapi/disagg_utils.py`` at 0228a71223416496ff056a157936bad2e42c762f:
  ``context_servers`` / ``generation_servers`` with ``num_instances`` and ``urls`` (each
  ``host:port``, as many as instances) and ``router.type``; ``tensorrt_llm/serve/router.py`` at
  00895e31dc5f9865c6bdfd2dd0508a9d6d964e9d, ``create_router``: round_robin, load_balancing,
  kv_cache_aware, conversation.
"""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hs
from launch_args import flags
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.launch import (
    DisaggLaunch,
    disagg_launch_refusal,
    disagg_plan_router,
    launch_refusal,
    serve_launch_for,
    sglang_disagg_launch,
    trtllm_disagg_launch,
    vllm_disagg_launch,
)
from hwtune.serve.plan import candidates

SGLANG_MODES = ("prefill", "decode")  # disaggregation_mode less "null"
SGLANG_TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
SGLANG_BOOTSTRAP_DEFAULT = "8998"
SGLANG_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
TRTLLM_TRANSCEIVER_BACKENDS = ("DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI")
TRTLLM_ROUTER_TYPES = ("round_robin", "load_balancing", "kv_cache_aware", "conversation")
SGLANG_PROGRAM = ["python", "-m", "sglang.launch_server", "--model-path"]
SGLANG_ROUTER = ["python", "-m", "sglang_router.launch_router"]


def cfg(model: str = "llama3.1-8b", gpu: str = "h100-sxm-80gb", **kw: object) -> ReplicaConfig:
    return ReplicaConfig(get_model(model), get_device(gpu), **kw)  # type: ignore[arg-type]


def router_servers(router: tuple[str, ...]) -> tuple[list[list[str]], list[str], dict]:
    """The router's ``--prefill`` entries (URL and bootstrap port), ``--decode`` URLs and
    other flags (each of those once)."""
    prefill: list[list[str]] = []
    decode: list[str] = []
    rest: list[str] = []
    args = list(router)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--prefill":
            prefill.append(args[i + 1 : i + 3])
            i += 3
        elif a == "--decode":
            decode.append(args[i + 1])
            i += 2
        else:
            rest.append(a)
            i += 1
    return prefill, decode, flags(rest)


def sglang_dep(**kw: object) -> Deployment:
    pre = cfg(tp=2, max_num_seqs=16, max_num_batched_tokens=32768, scheduler="vllm")
    dec = cfg(tp=1, max_num_seqs=128, max_num_batched_tokens=4096, scheduler="vllm")
    d = {"replica": dec, "replicas": 2, "router": "round-robin", "prefill": pre,
         "prefill_replicas": 3} | kw  # fmt: skip
    return Deployment(**d)  # type: ignore[arg-type]


def test_sglang_pools_carry_their_own_degrees_and_limits() -> None:
    la = sglang_disagg_launch(sglang_dep(), "meta-llama/Llama-3.1-8B")
    assert isinstance(la, DisaggLaunch)
    p, d = flags(la.prefill.args), flags(la.decode.args)
    assert p["--tp-size"] == "2" and d["--tp-size"] == "1"
    assert p["--max-running-requests"] == "16" and d["--max-running-requests"] == "128"
    assert p["--chunked-prefill-size"] == "32768" and d["--chunked-prefill-size"] == "4096"
    # SGLang's max_prefill_tokens default (16384) bounds a prefill batch too: raised for the
    # prefill pool's 32768-token budget, not for the decode pool's 4096
    assert p["--max-prefill-tokens"] == "32768" and "--max-prefill-tokens" not in d
    assert la.prefill.replicas == 3 and la.decode.replicas == 2
    assert la.prefill.gpus_per_replica == 2 and la.decode.gpus_per_replica == 1
    assert la.prefill.command().split()[:5] == [*SGLANG_PROGRAM, "meta-llama/Llama-3.1-8B"]


def test_sglang_modes_and_transfer_backend() -> None:
    la = sglang_disagg_launch(sglang_dep(), "m")
    p, d = flags(la.prefill.args), flags(la.decode.args)
    assert (p["--disaggregation-mode"], d["--disaggregation-mode"]) == SGLANG_MODES
    for f in (p, d):
        assert f["--disaggregation-transfer-backend"] in SGLANG_TRANSFER_BACKENDS
        # no step of a prefill or a decode server mixes prompt and decode tokens
        assert "--enable-mixed-chunk" not in f
    assert p["--disaggregation-bootstrap-port"] == SGLANG_BOOTSTRAP_DEFAULT
    assert d["--disaggregation-decode-extra-slots"] == "0"
    assert "--disaggregation-decode-extra-slots" not in p


def test_sglang_router_names_every_server() -> None:
    la = sglang_disagg_launch(sglang_dep(), "m")
    assert list(la.router[:3]) == SGLANG_ROUTER
    prefill, decode, rest = router_servers(la.router[3:])
    assert "--pd-disaggregation" in rest
    assert len(prefill) == 3 and len(decode) == 2  # one entry per server
    bootstrap = flags(la.prefill.args)["--disaggregation-bootstrap-port"]
    assert all(port == bootstrap for _url, port in prefill)  # the port the servers open
    assert len({url for url, _p in prefill} | set(decode)) == 5
    assert rest["--policy"] == "round_robin" and rest["--policy"] in SGLANG_ROUTER_POLICIES


def test_least_tokens_needs_one_server_per_pool() -> None:
    # SGLang's and TensorRT-LLM's routers have no least-outstanding-tokens policy: with one
    # server in each pool there is nothing to choose, so no policy is written
    one = sglang_dep(replicas=1, prefill_replicas=1, router="least-tokens")
    _p, _d, rest = router_servers(sglang_disagg_launch(one, "m").router[3:])
    assert "--policy" not in rest
    one = trtllm_dep(replicas=1, prefill_replicas=1, router="least-tokens")
    doc = yaml.safe_load(dict(trtllm_disagg_launch(one, "m").files)["hwtune-trtllm-disagg.yaml"])
    assert "router" not in doc["context_servers"]
    for engine, dep in (("sglang", sglang_dep(router="least-tokens")),
                        ("trtllm", trtllm_dep(router="least-tokens", replicas=1))):  # fmt: skip
        e = disagg_launch_refusal(engine, dep)
        assert e is not None and e.field == "router" and e.value == "least-tokens"
        with pytest.raises(HwtuneInputError) as info:
            serve_launch_for(engine, dep, "m")
        assert info.value.field == "router"


def test_a_pool_refusal_names_the_field_and_the_pool() -> None:
    dep = sglang_dep(prefill=cfg(tp=2, scheduler="orca"))
    e = disagg_launch_refusal("sglang", dep)
    assert e is not None and e.field == "scheduler" and "prefill" in e.expected
    dep = trtllm_dep(replica=cfg(kv_memory_rule="total"))
    e = disagg_launch_refusal("trtllm", dep)
    assert e is not None and e.field == "kv_memory_rule" and "decode" in e.expected
    e = disagg_launch_refusal("vllm", sglang_dep(prefill=cfg(tp=2, scheduler="orca")))
    assert e is not None and e.field == "scheduler" and "prefill" in e.expected
    # an aggregated deployment is no disaggregated launch
    e = disagg_launch_refusal("sglang", Deployment(cfg(tp=8, scheduler="orca")))
    assert e is not None and e.field == "scheduler"


def test_sglang_attention_dp_decode_pool() -> None:
    # SGLang's DeepSeek PD recipe (docs/advanced_features/pd_disaggregation.md): every server
    # --tp-size 16 --dp-size 8 --enable-dp-attention; here the decode pool alone runs
    # attention DP over 8 GPUs with experts over all 8, the prefill pool plain TP 8
    pre = cfg("deepseek-v3", "h200-sxm-141gb", tp=8, ep=8, max_num_seqs=16)
    dec = cfg("deepseek-v3", "h200-sxm-141gb", tp=1, dp_attention=8, ep=8, max_num_seqs=256,
              max_num_batched_tokens=1024)  # fmt: skip
    la = sglang_disagg_launch(Deployment(dec, 1, "round-robin", pre, 1), "deepseek-ai/DeepSeek-V3")
    p, d = flags(la.prefill.args), flags(la.decode.args)
    assert p["--tp-size"] == "8" and "--enable-dp-attention" not in p and p["--ep-size"] == "8"
    assert d["--tp-size"] == "8" and d["--dp-size"] == "8" and "--enable-dp-attention" in d
    assert d["--ep-size"] == "8" and d["--max-running-requests"] == "256"
    assert d["--chunked-prefill-size"] == str(1024 * 8)  # SGLang divides it by dp_size


def trtllm_dep(**kw: object) -> Deployment:
    common = {"kv_memory_rule": "free", "reserve_to_completion": True, "scheduler": "orca",
              "all_reduce_kernel": "trtllm"}  # fmt: skip
    pre = cfg(tp=2, max_num_seqs=16, max_num_batched_tokens=16384, **common)
    dec = cfg(tp=1, max_num_seqs=128, max_num_batched_tokens=4096, **common)
    d = {"replica": dec, "replicas": 2, "router": "round-robin", "prefill": pre,
         "prefill_replicas": 3} | kw  # fmt: skip
    return Deployment(**d)  # type: ignore[arg-type]


def test_trtllm_pools_and_disaggregated_server() -> None:
    la = trtllm_disagg_launch(trtllm_dep(), "meta-llama/Llama-3.1-8B")
    files = dict(la.files)
    assert la.router[:2] == ("trtllm-serve", "disaggregated")
    cfg_file = la.router[la.router.index("-c") + 1]
    doc = yaml.safe_load(files[cfg_file])
    for launch, key, seqs, tokens, tp in ((la.prefill, "context_servers", 16, 16384, 2),
                                          (la.decode, "generation_servers", 128, 4096, 1)):  # fmt: skip
        f = flags(launch.args)
        assert f["--tp_size"] == str(tp) and f["--max_batch_size"] == str(seqs)
        assert f["--max_num_tokens"] == str(tokens)
        opts = yaml.safe_load(dict(launch.files)[f["--extra_llm_api_options"]])  # type: ignore[index]
        assert opts["cache_transceiver_config"]["backend"] in TRTLLM_TRANSCEIVER_BACKENDS
        assert opts["cuda_graph_config"]["max_batch_size"] == seqs
        servers = doc[key]
        assert servers["num_instances"] == launch.replicas
        assert len(servers["urls"]) == servers["num_instances"]
        for url in servers["urls"]:
            host, port = url.split(":")  # disagg_utils splits each url on ':'
            assert host and int(port) == int(f["--port"])  # type: ignore[arg-type]
        assert servers["router"]["type"] in TRTLLM_ROUTER_TYPES
        assert servers["router"]["type"] == "round_robin"
    assert la.prefill.replicas == 3 and la.decode.replicas == 2
    ctx, gen = flags(la.prefill.args), flags(la.decode.args)
    assert ctx["--extra_llm_api_options"] != gen["--extra_llm_api_options"]


def test_launch_document() -> None:
    dep = sglang_dep()
    doc = json.loads(json.dumps(sglang_disagg_launch(dep, "m").to_dict()))
    assert doc["disaggregated"] is True and doc["gpus"] == dep.gpus == 3 * 2 + 2 * 1
    assert doc["prefill"]["replicas"] == 3 and doc["decode"]["replicas"] == 2
    assert doc["router"]["command"].startswith("python -m sglang_router.launch_router ")
    doc = trtllm_disagg_launch(trtllm_dep(), "m").to_dict()
    assert set(doc["router"]["files"]) == {"hwtune-trtllm-disagg.yaml"}  # type: ignore[index]
    assert "files" in doc["prefill"] and "files" in doc["decode"]  # type: ignore[operator]
    # `launch.files` is every file to write, as in an aggregated launch (the pools' too)
    assert "hwtune-trtllm-disagg.yaml" in doc["files"]  # type: ignore[operator]


SERVE = ["serve", "--concurrency", "4", "--num-requests", "8", "--input-len", "256",
         "--output-len", "8", "--disagg"]  # fmt: skip


def test_cli_serve_lists_the_commands_in_order() -> None:
    res = CliRunner().invoke(app, [*SERVE, "--prefill-tp", "2", "--prefill-replicas", "2",
                                   "--launch", "sglang"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = res.output
    i = out.index("prefill (2 replicas, each on 2 GPUs):")
    j = out.index("decode (1 replica on 1 GPU):")
    k = out.index("router:")
    assert i < j < k
    assert "--disaggregation-mode prefill" in out[i:j] and "--tp-size 2" in out[i:j]
    assert "--disaggregation-mode decode" in out[j:k] and "--tp-size 1" in out[j:k]
    res = CliRunner().invoke(app, [*SERVE, "--replicas", "2", "--launch", "trtllm", "--json"])
    assert res.exit_code == 0, res.output
    launch = json.loads(res.output)["launch"]
    assert launch["engine"] == "trtllm" and launch["decode"]["replicas"] == 2
    assert launch["prefill"]["replicas"] == 1
    assert set(launch["router"]["files"]) == {"hwtune-trtllm-disagg.yaml"}
    assert set(launch["files"]) == {"hwtune-trtllm-disagg.yaml", "hwtune-trtllm-ctx.yaml",
                                    "hwtune-trtllm-gen.yaml"}  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "args", "field", "words"),
    [
        ("sglang", ["--replicas", "2", "--router", "least-tokens"], "--router",
         ["least-tokens", "round-robin"]),
        ("trtllm", ["--prefill-replicas", "2", "--router", "least-tokens"], "--router",
         ["least-tokens", "round-robin"]),
        ("sglang", ["--scheduler", "orca"], "--scheduler", ["orca"]),
        ("vllm", ["--replicas", "2", "--router", "least-tokens"], "--router",
         ["least-tokens", "round-robin"]),
        ("vllm", ["--scheduler", "orca"], "--scheduler", ["orca"]),
        # attention DP with attention TP: TensorRT-LLM runs attention on each rank alone; the
        # prefill pool's TP is --prefill-tp's
        ("trtllm", ["-m", "mixtral-8x7b", "--tp", "1", "--dp-attention", "2", "--ep", "2",
                    "--prefill-tp", "2"], "--prefill-tp", ["2", "prefill pool"]),
    ],
)  # fmt: skip
def test_cli_refusals(rejects, engine: str, args: list[str], field: str,  # noqa: ANN001
                      words: list[str]) -> None:  # fmt: skip
    rejects([*SERVE, *args, "--launch", engine], field, *words)


@settings(max_examples=8, deadline=None)
@given(
    engine=hs.sampled_from(["sglang", "trtllm", "vllm"]),
    tp=hs.sampled_from([1, 2]),
    prefill_tp=hs.sampled_from([1, 2, 4]),
    replicas=hs.integers(1, 2),
    prefill_replicas=hs.integers(1, 2),
)
def test_cli_serve_disagg_launch_counts(engine: str, tp: int, prefill_tp: int, replicas: int,
                                        prefill_replicas: int) -> None:  # fmt: skip
    res = CliRunner().invoke(app, [
        *SERVE, "--tp", str(tp), "--prefill-tp", str(prefill_tp), "--replicas", str(replicas),
        "--prefill-replicas", str(prefill_replicas), "--launch", engine, "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    la = json.loads(res.output)["launch"]
    tp_flag = {"sglang": "--tp-size", "trtllm": "--tp_size",
               "vllm": "--tensor-parallel-size"}[engine]  # fmt: skip
    for pool, n, t in (("prefill", prefill_replicas, prefill_tp), ("decode", replicas, tp)):
        assert la[pool]["replicas"] == n and la[pool]["gpus_per_replica"] == t
        assert flags(tuple(la[pool]["args"]))[tp_flag] == str(t)
    assert la["gpus"] == prefill_replicas * prefill_tp + replicas * tp


@settings(max_examples=12, deadline=None)
@given(
    engine=hs.sampled_from(["sglang", "trtllm", "vllm"]),
    model=hs.sampled_from(["llama3.1-8b", "mixtral-8x7b", "qwen3-32b"]),
    gpu=hs.sampled_from(["h100-sxm-80gb", "h200-sxm-141gb"]),
    max_gpus=hs.integers(2, 6),
)
def test_every_planned_disaggregated_layout_launches(engine: str, model: str, gpu: str,
                                                     max_gpus: int) -> None:  # fmt: skip
    # the layouts `serve plan --launch ENGINE --disagg` searches: each launches as simulated
    engine_fields = {"kv_memory_rule": "free", "reserve_to_completion": True,
                     "scheduler": "orca", "all_reduce_kernel": "trtllm"} \
        if engine == "trtllm" else {}  # fmt: skip
    base = cfg(model, gpu, **engine_fields)
    if launch_refusal(engine, base) is not None:
        return
    every = candidates(base, max_gpus, disagg=True)
    kept = candidates(base, max_gpus, True, lambda c: launch_refusal(engine, c) is None,
                      lambda d: disagg_launch_refusal(engine, d) is None,
                      disagg_plan_router(engine))  # fmt: skip
    for dep in kept:
        la = serve_launch_for(engine, dep, "m")
        if dep.prefill is None:
            continue
        assert isinstance(la, DisaggLaunch)
        assert la.prefill.replicas == dep.prefill_replicas and la.decode.replicas == dep.replicas
    # with one GPU per pool at least, the disaggregated layouts are searched, not all dropped
    if any(d.prefill is not None for d in every):
        assert any(d.prefill is not None for d in kept)


def test_cli_serve_plan_searches_disaggregated_layouts() -> None:
    plan = ["serve", "plan", "--ttft-p90", "2", "--tpot-p90", "0.05", "--rate", "4",
            "--num-requests", "60", "--max-gpus", "3", "--processes", "1", "--top", "50",
            "--json", "--disagg", "--every-layout"]  # fmt: skip
    for engine in ("sglang", "trtllm", "vllm"):
        res = CliRunner().invoke(app, [*plan, "--launch", engine])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        assert any(b["disaggregated"] for b in doc["best"]), engine
        assert doc["launch"]["engine"] == engine


def test_plan_disaggregated_layouts_use_a_router_the_engine_has() -> None:
    base = cfg()
    kept = candidates(base, 4, True, None, lambda d: disagg_launch_refusal("sglang", d) is None,
                      disagg_plan_router("sglang"))  # fmt: skip
    many = [d for d in kept if d.prefill is not None and max(d.replicas, d.prefill_replicas) > 1]
    assert many and all(d.router == "round-robin" for d in many)
    # the aggregated layouts keep the planner's router (their launch has none)
    assert {d.router for d in kept if d.prefill is None} == {"least-tokens"}


def test_vllm_pools_connector_and_proxy() -> None:
    dep = sglang_dep(prefill=cfg(tp=2, max_num_seqs=16, max_num_batched_tokens=32768),
                     replica=cfg(tp=1, max_num_seqs=128, max_num_batched_tokens=4096))  # fmt: skip
    la = vllm_disagg_launch(dep, "meta-llama/Llama-3.1-8B")
    p, d = flags(la.prefill.args), flags(la.decode.args)
    assert p["--tensor-parallel-size"] == "2" and d["--tensor-parallel-size"] == "1"
    assert p["--max-num-seqs"] == "16" and d["--max-num-seqs"] == "128"
    assert p["--max-num-batched-tokens"] == "32768" and d["--max-num-batched-tokens"] == "4096"
    roles = []
    for f in (p, d):
        kv = json.loads(f["--kv-transfer-config"])  # type: ignore[arg-type]
        assert kv["kv_connector"] == "NixlConnector"
        roles.append(kv["kv_role"])
    assert roles == ["kv_producer", "kv_consumer"]
    assert la.prefill.replicas == 3 and la.decode.replicas == 2
    r = list(la.router)
    assert r[:2] == ["python", "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"]

    def values(flag: str) -> list[str]:  # nargs="+": the words up to the next flag
        i = r.index(flag) + 1
        j = next((k for k in range(i, len(r)) if r[k].startswith("--")), len(r))
        return r[i:j]

    assert len(values("--prefiller-hosts")) == len(values("--prefiller-ports")) == 3
    assert len(values("--decoder-hosts")) == len(values("--decoder-ports")) == 2
    assert set(values("--prefiller-ports")) == {p["--port"]}
    assert set(values("--decoder-ports")) == {d["--port"]}


def test_vllm_refuses_what_the_connector_does_not_pair() -> None:
    fp8 = sglang_dep(prefill=cfg(tp=2, kv_dtype="fp8"), replica=cfg())
    e = disagg_launch_refusal("vllm", fp8)
    assert e is not None and e.field == "kv_precision"
    big = sglang_dep(prefill=cfg(tp=2, block_size=32), replica=cfg(block_size=16))
    e = disagg_launch_refusal("vllm", big)
    assert e is not None and e.field == "block_size"
    small = sglang_dep(prefill=cfg(tp=2, block_size=16), replica=cfg(block_size=32))
    assert disagg_launch_refusal("vllm", small) is None
