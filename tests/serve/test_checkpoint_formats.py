"""Integer weight-only (int4 W4A16) checkpoints as a serving weight format."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from hwtune.cost.quantized_gemm import INT4_GROUP_SIZE, serving_gemm_time, weight_bytes_per_element
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.hf_config import checkpoint_precision, load_hf_config, weight_group_size
from hwtune.model.params import total_params
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape
from hwtune.serve.memory import weight_bytes_per_gpu

# the Hugging Face configs the package ships (copies of ../shared/models)
MODELS = Path(str(resources.files("hwtune.model").joinpath("configs")))
KIMI = MODELS / "moonshotai--Kimi-K2.5.json"
GPT_OSS = MODELS / "openai--gpt-oss-120b.json"


def _llama_8b() -> dict:
    return json.loads((MODELS / "meta-llama--Meta-Llama-3.1-8B.json").read_text())


def _cli(args: list[str]) -> dict:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


_SHORT = ("--concurrency", "2", "--input-len", "128", "--output-len", "8", "--num-requests", "4")


# --- reading int4 checkpoints ------------------------------------------------------------------
def _ct(weights: dict, activations: dict | None = None) -> dict:
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {"quantization_config": {"quant_method": "compressed-tensors",
                                    "config_groups": {"group_0": group}}}  # fmt: skip


@pytest.mark.parametrize(
    ("top", "fmt", "group"),
    [
        # transformers GPTQConfig / AwqConfig as written into config.json
        ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}},
         "int4", 128),
        ({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64,
                                  "zero_point": True, "version": "gemm"}}, "int4", 64),
        ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}},
         "int4", -1),  # per output channel
        ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "int4", None),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ",
                                  "group_size": 128}}, "int4", 128),
        (_ct({"type": "int", "num_bits": 4, "group_size": 32, "strategy": "group"}), "int4", 32),
        (_ct({"type": "int", "num_bits": 4, "strategy": "channel"}), "int4", -1),
        # not int4 weight-only
        ({"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 128}},
         None, None),
        ({"quantization_config": {"quant_method": "awq", "bits": 3}}, None, None),
        (_ct({"type": "int", "num_bits": 8, "strategy": "channel"}), None, None),  # int8
        (_ct({"type": "int", "num_bits": 4, "group_size": 128},  # W4A8: int8 activations
             {"type": "int", "num_bits": 8}), None, None),
    ],
)  # fmt: skip
def test_int4_checkpoints_and_their_group_size(top, fmt, group):
    assert checkpoint_precision(top) == fmt
    assert weight_group_size(top) == group


def test_a_gptq_config_loads_as_int4():
    cfg = _llama_8b()
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                  "desc_act": False, "sym": True}  # fmt: skip
    s = load_hf_config(cfg)
    assert (s.checkpoint_precision, s.weight_group_size, s.quantized_weights) == (
        "int4",
        128,
        "all",
    )
    cfg["quantization_config"]["bits"] = 8
    assert load_hf_config(cfg).checkpoint_precision is None


def test_kimi_reads_int4_in_groups_of_32():
    s = load_hf_config(KIMI)
    assert (s.checkpoint_precision, s.weight_group_size) == ("int4", 32)
    assert s.quantized_weights == "experts"  # attention, shared experts, dense MLP stay bf16


def test_int4_bytes_per_weight():
    # 4 bits plus one 16-bit scale per group
    assert weight_bytes_per_element("int4", 32) == pytest.approx(0.5 + 2 / 32)
    assert weight_bytes_per_element("int4") == pytest.approx(0.5 + 2 / INT4_GROUP_SIZE)
    assert weight_bytes_per_element("int4", -1) == 0.5
    assert weight_bytes_per_element("bf16", 32) == 2.0 and weight_bytes_per_element("fp8") == 1.0


def test_fp4_bytes_per_weight_carry_the_block_scales():
    """OCP MX v1.0: MXFP4 blocks of 32 share one 8-bit (E8M0) scale; NVFP4 blocks of 16 share
    one FP8 (E4M3) scale, the default when the checkpoint does not say."""
    assert weight_bytes_per_element("fp4", 32) == pytest.approx(0.5 + 1 / 32)
    assert weight_bytes_per_element("fp4") == pytest.approx(0.5 + 1 / 16)
    assert load_hf_config(GPT_OSS).weight_group_size == 32
    assert weight_bytes_per_element("bf16") == 2.0


# --- serving default and memory ---------------------------------------------------------------
def test_kimi_defaults_to_int4():
    doc = _cli(["serve", "--model", str(KIMI), "--gpu", "h200", "--tp", "8", *_SHORT, "--json"])
    assert (doc["precision"], doc["precision_source"]) == ("int4", "checkpoint")


def test_kimi_weight_bytes_per_gpu_by_hand():
    # Kimi-K2.5 text_config: 61 layers, the first dense (first_k_dense_replace 1), 384 routed
    # experts of 3 x 7168 x 2048 in each of the other 60; untied 163840 x 7168 embedding and head
    spec = load_hf_config(KIMI)
    routed = 60 * 384 * 3 * 7168 * 2048
    emb = 2 * 163840 * 7168
    rest = total_params(spec) - routed - emb  # attention, shared experts, dense MLP, norms
    tp = 8
    by_hand = routed * (0.5 + 2 / 32) / tp + rest * 2 / tp + emb * 2 / tp
    cfg = ReplicaConfig(spec, get_device("h200-sxm-141gb"), tp=tp, weight_dtype="int4")
    assert weight_bytes_per_gpu(cfg) == pytest.approx(by_hand, rel=1e-12)
    # about 73 GB per GPU: fits an H200 (141 GB), where bf16 weights (~256 GB) cannot
    assert 70e9 < by_hand < 80e9
    bf16 = weight_bytes_per_gpu(cfg.with_(weight_dtype="bf16"))
    assert bf16 == pytest.approx((routed + rest + emb) * 2 / tp, rel=1e-12)


def test_explicit_int4_on_a_bf16_model_uses_the_default_group():
    spec = get_model("llama3.1-8b")
    assert spec.weight_group_size is None
    dev = get_device("h100-sxm-80gb")
    w4 = weight_bytes_per_gpu(ReplicaConfig(spec, dev, weight_dtype="int4"))
    w16 = weight_bytes_per_gpu(ReplicaConfig(spec, dev, weight_dtype="bf16"))
    emb = 2 * 128256 * 4096 * 2.0  # untied embedding and head stay bf16
    assert (w4 - emb) / (w16 - emb) == pytest.approx((0.5 + 2 / 128) / 2.0, rel=1e-12)


# --- step costs -------------------------------------------------------------------------------
_DECODE = StepShape(tokens=32, seqs=32, sampled=32, dec_n=32, dec_ctx=32 * 1025.0,
                    dec_ctx_w=32 * 1025.0)  # fmt: skip


def _it(gpu: str, fmt: str) -> IterationModel:
    return IterationModel(ReplicaConfig(get_model("llama3.1-70b"), get_device(gpu), tp=4,
                                        weight_dtype=fmt))  # fmt: skip


def test_int4_decode_on_h100_is_faster_than_bf16():
    # decode reads the weights: 4-bit weights take ~a quarter of the bytes
    bf16, int4 = (_it("h100-sxm-80gb", f).step_time(_DECODE) for f in ("bf16", "int4"))
    assert int4 < 0.7 * bf16


def test_int4_on_hopper_is_priced_as_fp4_weight_only():
    # neither has Hopper tensor-core math: both run the bf16 wgmma path on dequantized tiles
    h100 = get_device("h100-sxm-80gb")
    big = (8192, 8192, 8192)
    assert serving_gemm_time(*big, h100, "int4") == serving_gemm_time(*big, h100, "fp4")
    assert serving_gemm_time(*big, h100, "int4") == pytest.approx(
        serving_gemm_time(*big, h100, "bf16"), rel=1e-9)  # fmt: skip
    # memory-bound: the bytes per weight decide; in groups of 32, int4's 16-bit scales are a
    # little more than MXFP4's 8-bit ones (0.5625 against 0.53125 byte)
    small = (1, 8192, 8192)
    fp4, int4 = (serving_gemm_time(*small, h100, f, group_size=32) for f in ("fp4", "int4"))
    assert fp4 < int4 < 1.07 * fp4


def test_int4_prefill_on_blackwell_runs_at_the_bf16_rate_while_fp4_is_faster():
    b200 = get_device("b200")
    assert b200.architecture == "blackwell" and b200.peak_tflops.fp4
    gemm = {f: _it("b200", f).linear(8192)[0] for f in ("bf16", "int4", "fp4")}
    assert gemm["int4"] == pytest.approx(gemm["bf16"], rel=1e-9)  # never FP4 tensor cores
    assert gemm["fp4"] < 0.5 * gemm["bf16"]


def test_kimi_int4_prices_only_its_routed_experts_in_4_bits():
    # attention GEMMs of Kimi stay bf16: a narrower format changes the experts only
    spec = load_hf_config(KIMI)
    dev = get_device("h200-sxm-141gb")
    it = {
        f: IterationModel(ReplicaConfig(spec, dev, tp=8, weight_dtype=f)) for f in ("int4", "fp4")
    }
    assert it["int4"]._gemm(64, 7168, 7168) == it["fp4"]._gemm(64, 7168, 7168)
    # int4 in Kimi's groups of 32 (16-bit scales) and fp4 in NVFP4's blocks of 16 (8-bit
    # scales; Kimi's int4 group size is not an fp4 block size) both read 0.5625 byte per weight
    assert it["int4"]._gemm(16, 2048, 7168, expert=True) == it["fp4"]._gemm(
        16, 2048, 7168, expert=True
    )
    assert it["int4"]._gemm(16, 2048, 7168, expert=True) < it["int4"]._gemm(16, 2048, 7168)


# --- int4 is not a KV-cache format, nor a training precision ----------------------------------
def test_kv_precision_int4_is_refused(rejects):
    line = rejects(["serve", "--kv-precision", "int4", *_SHORT], "--kv-precision", "int4",
                   "bf16, fp16, fp8, fp4", "weight-only")  # fmt: skip
    assert "Traceback" not in line


def test_replica_config_refuses_int4_kv():
    with pytest.raises(HwtuneInputError, match="kv_precision"):
        ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"), kv_dtype="int4")


def test_training_planner_refuses_int4(rejects):
    rejects(["plan", "--model", "llama3.1-8b", "--gpus", "8", "--precision", "int4"],
            "precision", "int4", "fp8")  # fmt: skip


# --- the checkpoint's KV-cache format as the KV default ----------------------------------------
@pytest.mark.parametrize(
    ("quant", "kv"),
    [
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"},
         "fp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": None}, None),
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"}, None),
        ({"quant_method": "compressed-tensors", "config_groups": {},
          "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}}, "fp8"),
        ({"quant_method": "compressed-tensors", "config_groups": {},
          "kv_cache_scheme": {"num_bits": 8, "type": "int"}}, None),
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, None),
        ({"quant_method": "fp8"}, None),
    ],
)  # fmt: skip
def test_checkpoint_kv_precision(quant, kv):
    from hwtune.model.hf_config import checkpoint_kv_precision

    assert checkpoint_kv_precision({"quantization_config": quant}) == kv
    cfg = _llama_8b() | {"quantization_config": quant}
    assert load_hf_config(cfg).checkpoint_kv_precision == kv


def test_kv_format_resolution():
    from hwtune.serve.config import kv_format

    fp8_kv = _llama_8b() | {"quantization_config": {"quant_method": "modelopt",
                            "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}  # fmt: skip
    spec = load_hf_config(fp8_kv)
    assert kv_format(spec, None) == ("fp8", "checkpoint")
    assert kv_format(spec, "bf16") == ("bf16", "option")
    assert kv_format(get_model("llama3.1-8b"), None) == ("bf16", "default")
    assert kv_format(load_hf_config(KIMI), None) == ("bf16", "default")  # kv_cache_scheme null


def _modelopt_folder(tmp_path: Path, kv_algo: str | None) -> Path:
    # a ModelOpt export: config.json without quantization_config, hf_quant_config.json beside it
    (tmp_path / "config.json").write_text(json.dumps(_llama_8b()))
    quant = {"quant_algo": "FP8", "kv_cache_quant_algo": kv_algo, "exclude_modules": ["lm_head"]}
    doc = {"producer": {"name": "modelopt", "version": "0.19.0"}, "quantization": quant}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(doc))
    return tmp_path


def test_modelopt_fp8_kv_in_a_folder_is_the_serving_default(tmp_path):
    folder = _modelopt_folder(tmp_path, "FP8")
    base = ["serve", "--model", str(folder / "config.json"), "--gpu", "h100", *_SHORT, "--json"]
    doc = _cli(base)
    assert (doc["precision"], doc["precision_source"]) == ("fp8", "checkpoint")
    assert (doc["kv_precision"], doc["kv_precision_source"]) == ("fp8", "checkpoint")
    explicit = _cli([*base, "--kv-precision", "bf16"])  # an explicit option wins
    assert (explicit["kv_precision"], explicit["kv_precision_source"]) == ("bf16", "option")
    assert doc["kv_cache_tokens"] > 1.9 * explicit["kv_cache_tokens"]  # 1-byte KV entries
    same = _cli([*base, "--kv-precision", "fp8"])
    assert same["kv_precision_source"] == "option"
    for key in ("ttft_s", "tpot_s", "kv_cache_tokens"):
        assert doc[key] == same[key]


def test_modelopt_without_kv_quantization_keeps_bf16_kv(tmp_path):
    folder = _modelopt_folder(tmp_path, None)
    doc = _cli(["serve", "--model", str(folder), "--gpu", "h100", *_SHORT, "--json"])
    assert doc["precision"] == "fp8"
    assert (doc["kv_precision"], doc["kv_precision_source"]) == ("bf16", "default")


# --- ReplicaConfig built in Python resolves the formats as the CLI does ------------------------
def test_replica_config_defaults_to_the_checkpoint_formats():
    from hwtune.serve.config import kv_format, weight_format

    h200 = get_device("h200-sxm-141gb")
    for name in ("deepseek-v3", "kimi-k2.5", "gpt-oss-20b", "llama3.1-8b"):
        spec = get_model(name)
        cfg = ReplicaConfig(spec, h200, tp=8 if spec.moe else 1)
        assert cfg.weight_dtype == weight_format(spec, None)[0]
        assert cfg.kv_dtype == kv_format(spec, None)[0]
    assert ReplicaConfig(get_model("deepseek-v3"), h200, tp=8).weight_dtype == "fp8"
    assert ReplicaConfig(get_model("kimi-k2.5"), h200, tp=8).weight_dtype == "int4"
    fp8_kv = load_hf_config(_llama_8b() | {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})  # fmt: skip
    assert (ReplicaConfig(fp8_kv, h200).weight_dtype, ReplicaConfig(fp8_kv, h200).kv_dtype) == (
        "fp8", "fp8")  # fmt: skip


def test_replica_config_keeps_explicit_formats():
    h200 = get_device("h200-sxm-141gb")
    cfg = ReplicaConfig(get_model("deepseek-v3"), h200, tp=8, weight_dtype="bf16", kv_dtype="fp16")
    assert (cfg.weight_dtype, cfg.kv_dtype) == ("bf16", "fp16")
    assert cfg.with_(tp=4).weight_dtype == "bf16"  # a copy keeps the resolved value


def test_published_rows_state_their_formats(monkeypatch):
    # the validation harness passes each row's precision explicitly, so the Python default
    # cannot move a published-row prediction
    from hwtune.serve import published

    if not published.default_csv().is_file():
        pytest.skip("validation data absent")
    seen = []
    real = published.ReplicaConfig

    def spy(*args, **kw):
        seen.append(("weight_dtype" in kw, "kv_dtype" in kw))
        return real(*args, **kw)

    monkeypatch.setattr(published, "ReplicaConfig", spy)
    published.load_rows()
    assert seen and all(w and k for w, k in seen)
