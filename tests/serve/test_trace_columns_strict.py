"""Trace files and lengths that used to be read silently one way among several: an extra cell,
a column named twice, two aliases of one field, a length past a learned position table."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.request import Workload, load_trace
from hwtune.serve.simulator import simulate


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("arrival_time,prompt_tokens,output_tokens\n0,10,5,7\n", ("line 2", "at most 3 cells")),
        ("arrival_time,prompt_tokens,prompt_tokens,output_tokens\n0,10,11,5\n",
         ("header", "prompt_tokens", "each column once")),
        ("arrival_time,prompt_tokens,input_tokens,output_tokens\n0,10,11,5\n",
         ("line 2", "input_tokens", "prompt_tokens=")),
    ],
)  # fmt: skip
def test_ambiguous_csv_rows_are_refused(tmp_path, text: str, words: tuple[str, ...]) -> None:
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(HwtuneInputError) as e:
        load_trace(p)
    for w in words:
        assert w in str(e.value)


def test_two_arrival_aliases_in_jsonl(tmp_path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_time": 0, "arrival": 1, "prompt_tokens": 5, "output_tokens": 2}\n')
    with pytest.raises(HwtuneInputError, match="arrival"):
        load_trace(p)


def test_one_alias_still_reads(tmp_path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1.5,10,5\n0.5,20,3\n")
    w = load_trace(p)
    assert w.prompts == (20, 10) and w.arrivals == (0.0, 1.0)


def test_learned_position_table_bounds_the_request() -> None:
    spec = get_model("gpt-1.7b")
    assert spec.max_position == 2048  # its catalog config: a learned table of 2048 rows
    cfg = ReplicaConfig(spec, get_device("h100-sxm-80gb"))
    with pytest.raises(HwtuneInputError, match="2048"):
        simulate(cfg, Workload((2000,), (49,), "closed", 1))
    simulate(cfg, Workload((2000,), (48,), "closed", 1))  # exactly the table: runs


@pytest.mark.parametrize("name", ["trace.txt", "trace", "TRACE.JSONL", "t.log"])
def test_jsonl_under_another_name_is_read_as_jsonl(tmp_path, name: str) -> None:
    # a JSONL trace saved as .txt was parsed as a CSV whose header was its first JSON row
    p = tmp_path / name
    p.write_text('{"arrival_time": 0.5, "prompt_tokens": 10, "output_tokens": 5}\n\n'
                 '{"arrival_time": 2.0, "prompt_tokens": 12, "output_tokens": 3}\n')  # fmt: skip
    wl = load_trace(p)
    assert (wl.prompts, wl.outputs, wl.arrivals) == ((10, 12), (5, 3), (0.0, 1.5))


@pytest.mark.parametrize("name", ["t.csv", "T.CSV"])
def test_a_csv_name_stays_csv(tmp_path, name) -> None:
    p = tmp_path / name  # JSON in a .csv file: its header is what is wrong, and said so
    p.write_text('{"arrival_time": 0, "prompt_tokens": 10, "output_tokens": 5}\n')
    with pytest.raises(HwtuneInputError, match="header.*looks like JSON"):
        load_trace(p)


@pytest.mark.parametrize(
    ("row", "field", "value"),
    [("0,-5,3", "prompt tokens", "-5"), ("0,5,0", "output tokens", "0")],
)
def test_a_count_below_one_names_its_field_and_value(tmp_path, row, field, value) -> None:
    p = tmp_path / "t.csv"
    p.write_text(f"arrival_time,prompt_tokens,output_tokens\n{row}\n")
    with pytest.raises(HwtuneInputError) as e:
        load_trace(p)
    assert str(e.value) == f"t.csv line 2: {field}: got '{value}'; expected at least 1 token"
