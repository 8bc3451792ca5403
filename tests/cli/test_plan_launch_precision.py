"""`plan --launch torchtitan` refuses a precision torchtitan cannot train in before searching
(its ``training.mixed_precision_param`` is bfloat16 or float32), instead of reporting "no
strategy fits" with a 0 GiB shortfall; and a search whose every candidate the framework refuses
says so rather than naming a memory shortfall it never measured."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError

JOB = ["--model", "llama3.1-8b", "--gpus", "8", "--seq", "2048", "--global-batch", "64"]


def test_torchtitan_plan_refuses_fp16_and_fp8_up_front(rejects) -> None:  # noqa: ANN001
    line = rejects(["plan", *JOB, "--gpu", "h100", "--launch", "torchtitan", "--precision",
                    "fp16"], "--precision", "fp16", "bf16 or fp32")  # fmt: skip
    assert "GiB" not in line
    rejects(["plan", *JOB, "--gpu", "h100", "--launch", "torchtitan", "--precision", "fp8"],
            "--precision", "fp8", "converter")  # fmt: skip
    # on V100 the default is fp16, which torchtitan cannot take: fp32 is the way
    rejects(["plan", *JOB, "--gpu", "v100", "--launch", "torchtitan"], "--precision", "fp32",
            "V100")  # fmt: skip


def test_torchtitan_plan_in_fp32_on_v100_searches() -> None:
    r = CliRunner().invoke(app, ["plan", *JOB, "--gpu", "v100", "--launch", "torchtitan",
                                 "--precision", "fp32", "--top", "1", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["top"][0]["strategy"]["precision"] == "fp32"
    assert doc["launch"]["framework"] == "torchtitan"


def test_a_search_the_framework_refuses_entirely_names_no_memory_shortfall(monkeypatch) -> None:  # noqa: ANN001
    import hwtune.train.launch as launch

    def refuse_all(st, model=None):  # noqa: ANN001, ANN202
        return HwtuneInputError("schedule", st.schedule, "something else")

    monkeypatch.setattr(launch, "megatron_refusal", refuse_all)
    r = CliRunner().invoke(app, ["plan", *JOB, "--gpu", "h100", "--launch", "megatron"])
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())  # rich wraps the line
    assert "no strategy runs" in text and "not run by the launch framework" in text
    assert "GiB" not in text


def test_a_launch_of_a_comparison_is_refused_before_its_precision(rejects) -> None:  # noqa: ANN001
    # one GPU type first: naming --precision fp32 would only lead to this refusal
    rejects(["plan", *JOB, "--gpu", "v100,h100", "--launch", "torchtitan"], "--launch",
            "one GPU type")  # fmt: skip


def test_json_says_why_nothing_was_found(monkeypatch) -> None:  # noqa: ANN001
    import hwtune.train.launch as launch

    monkeypatch.setattr(launch, "megatron_refusal",
                        lambda st, model=None: HwtuneInputError("x", 1, "y"))  # fmt: skip
    r = CliRunner().invoke(app, ["plan", *JOB, "--gpu", "h100", "--launch", "megatron", "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["infeasible"]["reason"] == "no candidate left"
    assert doc["infeasible"]["pruned"]["not run by the launch framework"] > 0
    big = CliRunner().invoke(app, ["plan", "-m", "llama3.1-405b", "--gpu", "h100", "--gpus", "8",
                                   "--seq", "8192", "--global-batch", "8", "--json"])  # fmt: skip
    assert big.exit_code == 1
    assert json.loads(big.stdout)["infeasible"]["reason"] == "memory"


def test_torchtitan_kernel_sets_refuse_fp16_but_price_fp8(rejects) -> None:  # noqa: ANN001
    # --framework torchtitan* prices torchtitan's kernels: it has no fp16 training (its
    # mixed_precision_param is bfloat16 or float32), so fp16, V100's default, is refused; its
    # float8 converter is a real torchtitan run, refused only where a launch command is asked
    rejects(["estimate", "--gpu", "v100", "--framework", "torchtitan-flex"], "--precision",
            "fp32")  # fmt: skip
    rejects(["plan", *JOB, "--gpu", "h100", "--framework", "torchtitan", "--precision", "fp16"],
            "--precision", "bf16 or fp32")  # fmt: skip
    r = CliRunner().invoke(app, ["estimate", "--gpu", "h100", "--framework", "torchtitan",
                                 "--precision", "fp8", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["strategy"]["precision"] == "fp8"
