"""Serving review fixes (2026-12-07): a trace row is named by its file line in length errors, a
JSONL row naming a key twice is refused, and --seed is refused beside --trace."""

from __future__ import annotations


def test_a_too_long_trace_row_is_named_by_its_line_not_its_sorted_index(rejects, tmp_path) -> None:
    f = tmp_path / "m40.csv"
    # the long row arrives last but is the file's line 2 (sorting by arrival puts it third)
    f.write_text(
        "arrival_time,prompt_tokens,output_tokens\n5.0,200000,5\n0.0,1000,100\n1.0,10,10\n"
    )
    line = rejects(["serve", "--trace", str(f)], "m40.csv line 2", "200005")
    assert "input-len" not in line  # an option refused beside --trace


def test_a_jsonl_row_naming_a_key_twice_is_refused(rejects, tmp_path) -> None:
    f = tmp_path / "m23.jsonl"
    f.write_text('{"arrival_time": 0, "prompt_tokens": 10, "output_tokens": 5, "prompt_tokens": 12}\n'
                 '{"arrival_time": 1, "prompt_tokens": 10, "output_tokens": 5}\n')  # fmt: skip
    rejects(["serve", "--trace", str(f)], "m23.jsonl line 1", "prompt_tokens", "each key once")


def test_seed_is_refused_beside_a_trace(rejects, tmp_path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n0,100,10\n1,100,10\n")
    rejects(["serve", "--trace", str(f), "--seed", "5"], "seed", "--trace")


def test_plan_says_by_how_much_a_model_misses_its_budget(rejects) -> None:
    # Llama-3.1-405B in bf16 is ~811 GB of weights: more than 8 x 80 GB, less than 16 x 80 GB
    rejects(["serve", "plan", "--model", "llama3.1-405b", "--gpu", "h100", "--max-gpus", "8",
             "--rate", "1", "--ttft-p90", "1"], "--max-gpus", "short by", "GiB per GPU",
            "the fewest that hold it: 16")  # fmt: skip


def test_a_trace_prompt_past_a_whole_prompt_budget_is_named_as_prompt_tokens(rejects, tmp_path):
    # orca prefills a prompt whole: the check is on the prompt alone, not prompt + output
    f = tmp_path / "w.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n0,600,5\n1,100,10\n")
    line = rejects(["serve", "--trace", str(f), "--scheduler", "orca",
                    "--max-num-batched-tokens", "512"], "w.csv line 2: prompt tokens", "600")  # fmt: skip
    assert "output" not in line.split(":")[1]
