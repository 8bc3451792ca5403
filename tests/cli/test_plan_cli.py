"""`hwtune plan | scale | size | study`: one JSON document on stdout with --json, bad input exits
2 with one line on stderr and no traceback, impossible jobs say why (DESIGN.md, *Interfaces*
and *Conventions*; issue 3)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ["--model", "llama3.1-8b", "--gpus", "8", "--global-batch", "16", "--seq", "4096"]
RANKED_BELOW = "ranked below the top-k"

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def doc_of(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # one document and nothing else on stdout


def hwtune(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command in a child process (stderr a pipe, no terminal)."""
    return subprocess.run([sys.executable, "-m", "hwtune.cli.main", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


# ------------------------------------------------------------------ plan
def test_plan_json_document():
    d = doc_of(run("plan", *SMALL, "--json"))
    for k in ("top", "candidates", "evaluated", "pruned", "why_best"):
        assert k in d
    assert (d["model"], d["n_gpus"], d["global_batch"], d["seq"]) == ("llama3.1-8b", 8, 16, 4096)
    assert len(d["top"]) == 5  # --top defaults to 5
    # every candidate is either estimated or pruned before estimation for exactly one reason
    before = sum(v for k, v in d["pruned"].items() if k != RANKED_BELOW)
    assert d["candidates"] == d["evaluated"] + before
    tps = [t["tokens_per_s"] for t in d["top"]]
    assert all(a >= b * (1 - 1e-6) for a, b in zip(tps, tps[1:], strict=False))
    for t in d["top"]:
        st = t["strategy"]
        assert st["dp"] * st["tp"] * st["pp"] * st["cp"] == 8
        assert t["fits"] and t["memory_per_gpu_bytes"]["total"] <= 80 * 2**30
        assert t["objective_value"] == pytest.approx(t["tokens_per_s"])  # by throughput
        assert t["label"].startswith(f"dp{st['dp']} tp{st['tp']} pp{st['pp']}")
    assert d["why_best"] and "\n" not in d["why_best"]
    assert d["candidates_per_s"] == pytest.approx(d["candidates"] / d["search_seconds"])


def test_plan_table_output():
    r = run("plan", *SMALL, "--top", "3")
    assert r.exit_code == 0, r.output
    assert "why #1" in r.stdout and "candidates" in r.stdout


def test_plan_fix_and_max_flags():
    d = doc_of(run("plan", *SMALL, "--fix", "tp=2", "--max", "mb=1", "--json"))
    assert d["top"]
    assert all(t["strategy"]["tp"] == 2 for t in d["top"])
    # `mb` is the CLI's short name for micro_batch
    assert all(t["strategy"]["micro_batch"] == 1 for t in d["top"])


def test_plan_hardware_comparison():
    d = doc_of(run("plan", *SMALL, "--gpu", "h100-sxm-80gb,a100-sxm4-80gb", "--json"))
    hw = d["hardware"]
    assert [h["gpu"] for h in hw] == ["h100-sxm-80gb", "a100-sxm4-80gb"]
    # the A100's dense bf16 peak is about a third of the H100's (312 vs 989 TFLOP/s)
    assert hw[0]["time_to_train_s"] < hw[1]["time_to_train_s"]
    for h in hw:
        assert h["fits"] and h["n_gpus"] == 8
        assert h["time_to_train_s"] == pytest.approx(d["tokens"] / h["tokens_per_s"])
        # the catalog carries market prices for both: cost = price x GPUs x hours
        assert h["cost_usd"] == pytest.approx(
            {"h100-sxm-80gb": 3.78, "a100-sxm4-80gb": 2.4984}[h["gpu"]]
            * 8
            * h["time_to_train_s"]
            / 3600
        )


def test_plan_what_if_nic():
    r = run("plan", "--model", "llama3.1-8b", "--gpus", "32", "--global-batch", "64",
            "--seq", "4096", "--what-if", "nic=100,400", "--json")  # fmt: skip
    d = doc_of(r)
    assert d["field"] == "nic"
    assert [p["value"] for p in d["points"]] == [100.0, 400.0]
    thr = [p["tokens_per_s"] for p in d["points"]]
    assert thr[1] >= thr[0]  # more NIC bandwidth never hurts
    assert max(p["efficiency"] for p in d["points"]) == 1.0
    assert d["least_value"] in (100.0, 400.0)
    least = next(p for p in d["points"] if p["value"] == d["least_value"])
    assert least["efficiency"] >= d["target_efficiency"]


def test_impossible_job_names_the_shortfall_in_gib():
    # 405B in bf16 is 810 GB of weights alone: more than 8 x 80 GB
    r = run("plan", "--model", "llama3.1-405b", "--gpus", "8", "--global-batch", "64")
    assert r.exit_code != 0
    assert "Traceback" not in r.output
    m = re.search(r"needs ([\d.]+) GiB more", r.stdout)
    assert m, r.stdout
    # at least the weights' overshoot: 810e9 / 8 B - 80 GiB = 15.9 GiB per GPU
    assert float(m.group(1)) >= (810e9 / 8 - 80 * 2**30) / 2**30


def test_impossible_job_json_has_the_shortfall_and_exits_non_zero():
    r = run("plan", "--model", "llama3.1-405b", "--gpus", "8", "--global-batch", "64", "--json")
    assert r.exit_code != 0
    d = json.loads(r.stdout)
    assert d["top"] == []
    assert d["infeasible"]["smallest_shortfall_bytes"] > 0
    assert d["infeasible"]["closest_strategy"]["dp"] >= 1


def test_contradicting_constraint_exits_2_with_one_line():
    # 3 does not divide Llama-3.1-8B's 32 attention heads
    p = hwtune("plan", *SMALL, "--fix", "tp=3")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert re.search(r"tp\W+3\b", lines[0])
    assert p.stdout == ""


@pytest.mark.parametrize(
    "args,word",
    [
        (["--fix", "bogus=2"], "bogus"),
        (["--fix", "tp"], "--fix"),
        (["--schedule", "pipedream"], "pipedream"),
        (["--objective", "speed"], "objective"),
        (["--global-batch-tokens", "65536"], "no value with --global-batch"),  # 16 as well
        (["--what-if", "latency=1,2"], "latency"),
        (["--gpu", "h100-sxm-80gbx"], "h100"),
        (["--global-batch", "0"], "--global-batch"),  # not the default 512
    ],
)
def test_plan_bad_input_exits_2_naming_it(args, word):
    r = run("plan", *SMALL, *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and word in err


def test_global_batch_tokens_must_be_whole_sequences():
    r = run("plan", "--model", "llama3.1-8b", "--gpus", "8", "--seq", "4096",
            "--global-batch-tokens", "1000")  # fmt: skip
    assert r.exit_code == 2 and "--global-batch-tokens" in r.stderr


def test_global_batch_tokens_is_sequences_times_seq():
    # 65,536 tokens of 4,096 = 16 sequences: the same job as --global-batch 16
    d = doc_of(run("plan", "--model", "llama3.1-8b", "--gpus", "8", "--seq", "4096",
                   "--global-batch-tokens", "65536", "--top", "1", "--json"))  # fmt: skip
    assert d["global_batch"] == 16


def test_cost_objective_without_a_price_exits_2_naming_it():
    r = run("plan", *SMALL, "--gpu", "mi300x", "--objective", "cost")
    assert r.exit_code == 2
    assert "price_per_hour_usd" in r.stderr


def test_cost_objective_with_a_price_flag():
    d = doc_of(run("plan", *SMALL, "--objective", "cost", "--price-per-gpu-hour", "2.5", "--json"))
    t = d["top"][0]
    # USD per million tokens = price x GPUs x step seconds / 3600 / tokens per step x 1e6
    assert t["objective_value"] == pytest.approx(
        2.5 * 8 * t["step_time_s"] / 3600 / (16 * 4096) * 1e6
    )


# ------------------------------------------------------------------ scale
def test_scale_json_points_and_knees():
    d = doc_of(run("scale", "--json", "--gpus", "8,16,32", "--model", "llama3.1-8b",
                   "--global-batch", "64"))  # fmt: skip
    assert d["policy"] == "strong"
    assert [p["n_gpus"] for p in d["points"]] == [8, 16, 32]
    assert isinstance(d["knees"], list)
    assert d["points"][0]["scaling_efficiency"] == 1.0
    for p in d["points"]:
        assert p["global_batch"] == 64
        assert 0 < p["scaling_efficiency"] <= 1.2
        assert p["tokens_per_s_per_gpu"] == pytest.approx(p["tokens_per_s"] / p["n_gpus"])
        assert p["strategy"].startswith("dp")
    for k in d["knees"]:
        assert k["kind"] in ("efficiency", "regime") and k["n_gpus"] in (16, 32)


def test_scale_plot_writes_a_png(tmp_path):
    png = tmp_path / "out.png"
    r = run("scale", "--gpus", "8,16", "--model", "llama3.1-8b", "--global-batch", "32",
            "--seq", "4096", "--plot", str(png))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert str(png.name) in r.stdout


def test_scale_model_size_sweep():
    d = doc_of(run("scale", "--model", "llama3.1-8b,llama2-7b", "--fixed-gpus", "8",
                   "--global-batch", "16", "--seq", "4096", "--json"))  # fmt: skip
    assert d["n_gpus"] == 8
    assert [p["model"] for p in d["points"]] == ["llama3.1-8b", "llama2-7b"]
    assert all(p["tokens_per_s"] > 0 for p in d["points"])


def test_scale_global_batch_sweep():
    d = doc_of(run("scale", "--model", "llama3.1-8b", "--fixed-gpus", "8", "--global-batches",
                   "8,16", "--seq", "4096", "--json"))  # fmt: skip
    assert [p["global_batch"] for p in d["points"]] == [8, 16]


def test_scale_bad_policy_exits_2():
    r = run("scale", "--gpus", "8", "--model", "llama3.1-8b", "--policy", "medium")
    assert r.exit_code == 2 and "policy" in r.stderr and "Traceback" not in r.output


# ------------------------------------------------------------------ size
def test_size_check_json():
    d = doc_of(run("size", "--json"))
    assert d["model"] == "llama3.1-8b" and d["gpu"] == "h100-sxm-80gb" and d["tp"] == 1
    for i in d["issues"]:
        assert 0 < i["efficiency"] < 0.97
        assert len(i["shape_mnk"]) == 3 and i["lost_s_per_step_per_microbatch"] >= 0


def test_size_target_json():
    d = doc_of(run("size", "--target", "7B", "--json"))
    assert d["target_params"] == 7e9
    assert d["proposals"]
    for p in d["proposals"]:
        assert abs(p["params"] / 7e9 - 1) <= 0.02  # the default tolerance
        assert p["config"]["d_model"] % 256 == 0
        assert p["speedup_vs_naive"] == pytest.approx(
            p["tokens_per_s"] / d["naive"]["tokens_per_s"]
        )
    assert d["proposals"][0]["speedup_vs_naive"] >= 1.0


@pytest.mark.parametrize("target", ["seven", "0"])
def test_size_bad_target_exits_2(target):
    r = run("size", "--target", target)
    assert r.exit_code == 2 and "target" in r.stderr and "Traceback" not in r.output


# ------------------------------------------------------------------ study
def test_study_json(tmp_path):
    out = tmp_path / "s"
    r = run("study", "--models", "llama3.1-8b", "--scales", "8", "--global-batch", "16",
            "--seq", "4096", "--output", str(out), "--workers", "1", "--json")  # fmt: skip
    d = doc_of(r)
    assert d["csv"] == str(out / "study.csv")
    assert len(d["rows"]) == 1 and d["rows"][0]["fits"] == "True"
    with (out / "study.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 1
    assert (out / "study.parquet").exists()


def test_study_bad_scales_exit_2(tmp_path):
    r = run("study", "--scales", "eight", "--output", str(tmp_path / "s"))
    assert r.exit_code == 2 and "scales" in r.stderr


def test_study_unparsable_topology_is_named(tmp_path):
    r = run("study", "--models", "llama3.1-8b", "--scales", "8", "--topologies", "fast",
            "--global-batch", "16", "--seq", "4096", "--output", str(tmp_path / "s"),
            "--workers", "1")  # fmt: skip
    assert r.exit_code == 2
    assert "topolog" in r.stderr and "scales" not in r.stderr


def test_plan_takes_the_frameworks_kernels():
    """FlashAttention-2 and eager elementwise kernels only add time: the best plan for them is
    slower than for the fused defaults, and the chosen strategy says which kernels it assumed."""
    fused = doc_of(run("plan", *SMALL, "--json"))["top"][0]
    args = ("--attention-kernel", "fa2", "--eager", "--loss", "pytorch", "--json")
    slow = doc_of(run("plan", *SMALL, *args))["top"][0]
    assert slow["tokens_per_s_per_gpu"] < fused["tokens_per_s_per_gpu"]
    assert slow["strategy"]["attention_kernel"] == "fa2"
    assert slow["strategy"]["fused_elementwise"] is False
    assert slow["strategy"]["loss_kernel"] == "pytorch"
    r = hwtune("plan", *SMALL, "--attention-kernel", "fa3")
    assert r.returncode == 2 and "--attention-kernel" in r.stderr and "Traceback" not in r.stderr


def test_framework_presets_set_the_kernels():
    """`--framework` is a preset of the kernel fields (hwtune.train.frameworks); a flag that
    differs from its default still wins; an unknown name is one line, exit 2."""
    from hwtune.train.frameworks import FRAMEWORKS

    d = doc_of(run("plan", *SMALL, "--framework", "torchtitan", "--json"))["top"][0]
    for key, value in FRAMEWORKS["torchtitan"].items():
        assert d["strategy"][key] == value
    d = doc_of(run("plan", *SMALL, "--framework", "torchtitan", "--loss", "fused", "--json"))
    assert d["top"][0]["strategy"]["loss_kernel"] == "pytorch"  # "fused" is the default: no say
    d = doc_of(
        run("plan", *SMALL, "--framework", "megatron", "--attention-kernel", "fa2", "--json")
    )
    assert d["top"][0]["strategy"]["attention_kernel"] == "fa2"
    r = hwtune("estimate", "--framework", "megatorn")
    assert r.returncode == 2 and "framework" in r.stderr and "Traceback" not in r.stderr


def test_zero3_gather_flag_reaches_the_estimate_and_bad_values_are_one_line():
    """`--zero3-gather parameter` (DeepSpeed of 2021: synchronous per-parameter gathers) only
    adds exposed data-parallel time to a ZeRO-3 step; the preset huggingface-deepspeed sets
    "module"; an unknown unit is a one-line error naming the field, exit 2."""
    base = ("estimate", "--model", "gpt3-175b", "--gpu", "a100", "--gpus", "384", "--dp", "384",
            "--zero", "3", "--micro-batch", "1", "--global-batch", "384", "--seq", "2048",
            "--recompute", "full", "--json")  # fmt: skip
    mod = doc_of(run(*base, "--zero3-gather", "module"))
    par = doc_of(run(*base, "--zero3-gather", "parameter"))
    assert par["step_time_s"] > mod["step_time_s"]
    assert par["breakdown"]["dp_comm_exposed"] > mod["breakdown"]["dp_comm_exposed"]
    ds = doc_of(run(*base, "--framework", "huggingface-deepspeed"))
    assert ds["step_time_s"] == pytest.approx(
        doc_of(run(*base, "--framework", "huggingface-deepspeed", "--zero3-gather", "module"))[
            "step_time_s"
        ]
    )
    r = hwtune("estimate", "--zero", "3", "--zero3-gather", "block")
    assert r.returncode == 2 and "--zero3-gather" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
