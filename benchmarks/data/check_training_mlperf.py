"""Re-derive the measured throughput of benchmarks/data/training_mlperf.jsonl from the MLPerf logs.

The rows are MLCommons Training v5.1 ``llama31_8b`` submissions (Llama 3.1 8B pretraining on C4,
8,192-token sequences) on at most 72 GPUs, and with ``--data`` the ``llama31_405b`` ones
(``training_mlperf_405b.jsonl``, 256-5,120 GPUs): their parallel layout and precision were read from each
submission's config files and the configuration its logs print (the row's ``source.locator``,
``precision_detail`` and ``notes`` say where), and their throughput from the logs' MLLOG lines.
This script recomputes that throughput from a copy of the results repository and compares:

    git clone https://github.com/mlcommons/training_results_v5.1   # about 2 GB
    python benchmarks/data/check_training_mlperf.py --repo training_results_v5.1

(``--repo`` may also be a bare mirror; files are then read with ``git show HEAD:PATH``.)

Throughput of a run: the samples of each training block (MLLOG ``block_start`` to ``block_stop``:
the steps between them times the logged ``global_batch_size``, or where the blocks carry no step
the ``samples_count`` at the evaluation that follows less the block's own), divided by the block's wall time; blocks end
where evaluation starts, so evaluation is outside them. A row's figure is the median over every
block of every run except each run's first (warm-up, compilation) and is converted to tokens per
second per GPU: samples/s x 8192 / GPUs. A row whose measured entry says ``"method": "step_time"``
is taken per step instead: the median of global batch / ``train_step_time`` over the steps
logged after each run's first block (NVIDIA's 2,560- and 5,120-GPU Llama 3.1 405B runs, whose
later blocks are 15-20 steps long and each ends 2.6-5.5 s after its last step, a gap that would
weigh up to 16% in a block's rate). The AMD-stack logs also print that median's own input
(``tracked_stats`` ``throughput``, samples/s over the training batches); the two agree within
0.03% there. The logged global batch, gradient accumulation and sequence length are checked
against the row's. Exit status 1 when a row's logs give a figure more than 1% from the row's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "training_mlperf.jsonl"
TOLERANCE = 0.01


class Repo:
    """A checkout or a bare git mirror of the results repository."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bare = not (root / "AMD").is_dir()

    def files(self, folder: str) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.root)) for p in (self.root / folder).glob("*"))
        out = subprocess.run(["git", "-C", str(self.root), "ls-tree", "--name-only", f"HEAD:{folder}"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return sorted(f"{folder}/{n}" for n in out.split())

    def read(self, path: str) -> str:
        if not self.bare:
            return (self.root / path).read_text(errors="replace")
        return subprocess.run(["git", "-C", str(self.root), "show", f"HEAD:{path}"],
                              capture_output=True, text=True, check=True, errors="replace").stdout  # fmt: skip


def mllog(text: str) -> list[dict]:
    """Rank 0's MLLOG events of one result file, each once (multi-node logs prefix every line
    with its rank, ``N: ``, and some repeat events)."""
    events, seen = [], set()
    for line in text.splitlines():
        i = line.find(":::MLLOG ")
        if i < 0:
            continue
        prefix = line[:i].strip().rstrip(":").strip()
        if prefix and prefix.split()[-1] != "0":
            continue
        try:
            e = json.loads(line[i + len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        key = (e.get("time_ms"), e.get("key"), json.dumps(e.get("value")))
        if key not in seen:
            seen.add(key)
            events.append(e)
    return events


def block_rates(events: list[dict]) -> list[float]:
    """Samples per second of each training block of one run, in order."""
    gbs = logged(events, "global_batch_size")
    starts = [e for e in events if e["key"] == "block_start"]
    stops = [e for e in events if e["key"] == "block_stop"]
    rates = []
    for a, b in zip(starts, stops, strict=False):
        ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
        if "step" in ma and "step" in mb and gbs:
            samples = (mb["step"] - ma["step"]) * gbs
        else:  # the samples seen when the evaluation after the block starts
            end = mb.get("samples_count", 0)
            after = (e["metadata"]["samples_count"] for e in events
                     if e["key"] in ("eval_start", "block_start") and e["time_ms"] >= b["time_ms"]
                     and "samples_count" in (e.get("metadata") or {}))  # fmt: skip
            samples = max(end, next(after, end)) - ma.get("samples_count", 0)
        dt = (b["time_ms"] - a["time_ms"]) / 1e3
        if samples > 0 and dt > 0:
            rates.append(samples / dt)
    return rates


def step_rates(events: list[dict]) -> list[float]:
    """Samples per second of each training step logged after the run's first ``block_stop``
    (MLLOG ``tracked_stats`` ``train_step_time``, the wall time between consecutive batch ends
    in NVIDIA's ``custom_callbacks.py``): global batch / step time."""
    gbs = logged(events, "global_batch_size")
    first_stop = next((e["time_ms"] for e in events if e["key"] == "block_stop"), None)
    if not gbs or first_stop is None:
        return []
    return [gbs / e["value"]["train_step_time"] for e in events
            if e["key"] == "tracked_stats" and e["time_ms"] > first_stop
            and isinstance(e.get("value"), dict) and e["value"].get("train_step_time")]  # fmt: skip


def logged(events: list[dict], key: str) -> object:
    """The value of the first POINT_IN_TIME event ``key``, or None."""
    return next((e["value"] for e in events if e["key"] == key), None)


def row_figure(repo: Repo, row: dict) -> tuple[float, int, int]:
    """(tokens/s/GPU, runs, blocks) of one row from its result files; exits naming the row when
    a run logs another global batch, gradient accumulation or sequence length than the row."""
    folder = row["source"]["locator"].split("/result_")[0]
    p = row["parallel"]
    want = {"global_batch_size": p["global_batch"], "gradient_accumulation_steps": p["grad_accum"],
            "max_sequence_length": row["model"]["seq_len"]}  # fmt: skip
    per_step = row["measured"][0].get("method") == "step_time"
    rates, runs = [], 0
    for path in repo.files(folder):
        if not Path(path).name.startswith("result_"):
            continue
        runs += 1
        events = mllog(repo.read(path))
        for key, value in want.items():
            if logged(events, key) != value:
                raise SystemExit(f"{row['id']}: {path} logs {key} {logged(events, key)}, "
                                 f"the row says {value}")  # fmt: skip
        if per_step:
            rates += step_rates(events)
        else:
            rates += block_rates(events)[1:]  # each run's first block left out
    if not rates:
        raise SystemExit(
            f"{row['id']}: no training {'steps' if per_step else 'blocks'} in {folder}"
        )
    seq = row["model"]["seq_len"]
    return statistics.median(rates) * seq / row["hardware"]["n_gpus"], runs, len(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True,
                    help="checkout or bare mirror of mlcommons/training_results_v5.1")  # fmt: skip
    ap.add_argument("--data", type=Path, default=DATA)
    a = ap.parse_args()
    repo = Repo(a.repo)
    bad = 0
    for line in a.data.read_text().splitlines():
        row = json.loads(line)
        stated = next(
            m["value"] for m in row["measured"] if m["metric"] == "tokens_per_sec_per_gpu"
        )
        got, runs, blocks = row_figure(repo, row)
        off = got / stated - 1
        bad += abs(off) > TOLERANCE
        print(
            f"{row['id']:<66} {stated:>8,.0f} {got:>8,.0f} {off:+.2%}  ({runs} runs, {blocks} "
            f"{'steps' if row['measured'][0].get('method') == 'step_time' else 'blocks'})"
        )
    print(f"{bad} rows more than {TOLERANCE:.0%} from the logs")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
