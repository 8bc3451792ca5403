"""Session 48's review of the commands' edges: errors name the option typed, empty list items and
aliased duplicates are refused, a plan exists at seq 1, sizing reaches 1B from a head-dim-96
base, JSON says null where nothing ran, and the default batch under a pipeline says what it
costs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as hs
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.cli.parsing import listed
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.search import Constraints, layouts


def _json(args: list[str]) -> dict:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "args, line_start",
    [
        # the checks below the CLI name ReplicaConfig's and the workload's fields
        (["serve", "--max-num-seqs", "0"], "error: --max-num-seqs: got 0"),
        (["serve", "--prefix-len", "100"], "error: --prefix-groups: got 0"),
        (["serve", "--disagg", "--prefill-replicas", "0"], "error: --prefill-replicas: got 0"),
        # the CLI's own checks, once spelled without the dashes
        (["serve", "--input-len", "8", "--range-ratio", "2"], "error: --range-ratio: got 2.0"),
        (["bench", "--dtypes", "fp32,,bf16"], "error: --dtypes: got 'fp32,,bf16'"),
    ],
)
def test_an_error_names_the_option_typed(rejects, args, line_start):
    line = rejects(args, line_start.split(": ")[1])
    assert line.startswith(line_start), line


def test_a_field_that_is_no_option_keeps_its_name(rejects, tmp_path):
    # the cluster file's key is not --gpus: the user typed no such flag
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 12\n")
    line = rejects(["estimate", "--cluster", str(f)], "c.yaml.n_gpus")
    assert "--gpus:" not in line


@given(hs.lists(hs.text("abc-_.0189", min_size=1), min_size=1, max_size=6))
def test_listed_splits_what_it_joined(items):
    assert listed(",".join(items), "f") == items
    assert listed(";".join(items), "f", sep=";") == items


@pytest.mark.parametrize("text", ["a,,b", "a,", ",a", " , ", ""])
def test_listed_refuses_an_empty_item(text):
    with pytest.raises(HwtuneInputError, match="^f: .*without empty items"):
        listed(text, "f")


@pytest.mark.parametrize(
    "args, field",
    [
        (["study", "--topologies", "default;", "--scales", "8"], "--topologies"),
        (["study", "--gpus", "h100,", "--scales", "8"], "--gpus"),
        (["plan", "--gpu", "h100,"], "--gpu"),
        (["scale", "--model", "llama3.1-8b,"], "--model"),
    ],
)
def test_an_empty_list_item_is_refused(rejects, args, field):
    rejects(args, field, "without empty items")


def test_study_refuses_one_gpu_under_two_names(rejects, tmp_path):
    out = tmp_path / "st"
    rejects(["study", "--models", "llama3.1-8b", "--gpus", "h100,h100-sxm-80gb", "--scales", "8",
             "--output", str(out)], "--gpus", "h100-sxm-80gb", "once")  # fmt: skip
    assert not out.exists()  # refused before the study's directory was made


def test_plan_names_the_gpu_count_no_layout_divides(rejects):
    # 100,000 = 2^5 x 5^5: no power-of-2 TP or CP, no PP within 32 layers and no DP dividing
    # the batch of 512 = 2^9 takes the factor 5^5; no --fix/--max was typed to blame
    line = rejects(["plan", "--model", "llama3.1-8b", "--gpus", "100000"], "--gpus", "100000",
                   "power of 2", "batch 512")  # fmt: skip
    assert "--fix" not in line


def test_a_sequence_of_one_token_has_a_layout():
    # CP splits a sequence into 2 x cp chunks; at cp 1 nothing is split, so seq 1 runs (as
    # `estimate --seq 1` on dp 8 does)
    spec, cl = get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", 8)
    lay = list(layouts(spec, cl, 1, 512, Constraints()))
    assert (1, 1, 1, 8, 1) in lay and all(cp == 1 for _, _, cp, _, _ in lay)
    doc = _json(["plan", "--model", "llama3.1-8b", "--gpus", "8", "--seq", "1", "--top", "1",
                 "--json"])  # fmt: skip
    assert doc["top"] and doc["top"][0]["strategy"]["cp"] == 1


def test_sizing_reaches_1b_from_gpt_1_7b():
    # gpt-1.7b's head dim is 96, which divides neither 1792 nor 2048 (the multiples of 256
    # around the naive 1B width): the proposals split those widths into 128-wide heads
    doc = _json(["size", "--model", "gpt-1.7b", "--target", "1B", "--json"])
    assert doc["proposals"]
    for p in doc["proposals"]:
        assert p["params"] == pytest.approx(1e9, rel=0.02)
        c = p["config"]
        assert c["d_model"] % 256 == 0 and c["head_dim"] == 128
        assert c["n_heads"] * c["head_dim"] == c["d_model"]


def test_estimate_json_gives_the_batch_it_ran():
    # 8 GPUs, dp 8, micro-batch 1, no --global-batch: the step runs dp x micro-batch = 8
    doc = _json(["estimate", "--model", "llama3.1-8b", "--gpus", "8", "--json"])
    st = doc["strategy"]
    assert st["global_batch"] == st["dp"] * st["micro_batch"] == 8
    assert doc["tokens_per_step"] == 8 * 8192


def test_a_default_batch_through_a_pipeline_is_named():
    doc = _json(["estimate", "--model", "llama3.1-8b", "--gpus", "8", "--pp", "4", "--json"])
    note = next(n for n in doc["notes"] if n.startswith("global batch left"))
    # dp 2 x micro-batch 1 = 2 sequences: one micro-batch per pipeline; 4 x pp x dp x mb = 32
    assert "= 2: 1 micro-batch through 4 pipeline stages" in note and "(32:" in note
    given = _json(["estimate", "--model", "llama3.1-8b", "--gpus", "8", "--pp", "4",
                   "--global-batch", "32", "--json"])  # fmt: skip
    assert not any(n.startswith("global batch left") for n in given["notes"])


def test_scale_json_has_no_zeros_where_nothing_fits():
    # 70B parameters in bf16 are 140 GB of weights alone: one 80 GB GPU holds no strategy
    r = CliRunner().invoke(app, ["scale", "--model", "llama3.1-70b", "--gpus", "1,8", "--json"])
    assert r.exit_code == 0, r.output
    one, eight = json.loads(r.stdout)["points"]
    assert not one["fits"] and eight["fits"]
    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "scaling_efficiency",
              "exposed_comm_share", "exposed_share", "mfu"):  # fmt: skip
        assert one[k] is None and eight[k] is not None, k
