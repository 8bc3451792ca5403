"""What-if for published serving rows: a fixed latency L added to the predicted TTFT of the rows
served through Dynamo's HTTP frontend (aiconfigurator's harness rows and InferenceX's
disaggregated rows), read from a saved `serve_validation.py --out` run, without simulating
again. Written for the frontend's sockets without ``TCP_NODELAY`` (ai-dynamo/dynamo PR #14643:
a small SSE chunk can wait for the client's delayed ACK, 40 ms on Linux); VALIDATION.md, "What
is missing". The added time occupies no GPU or host, and the closed loop's next arrival is not
moved (a second-order effect at these latencies).

    python benchmarks/serve_validation.py --out RUN.json
    python benchmarks/serve_added_latency.py RUN.json --latency-ms 0,20,40,60
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict

from hwtune.serve.published import default_csv, is_inferencex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a results JSON written by serve_validation.py --out")
    ap.add_argument("--latency-ms", default="0,20,40,60", help="comma-separated values of L")
    ap.add_argument("--min-rows", type=int, default=10, help="smallest group to list")
    args = ap.parse_args()
    with open(args.run, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    with open(default_csv(), encoding="utf-8", newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}

    def dynamo(r: dict) -> bool:
        return not is_inferencex(raw[r["id"]]) or r["mode"] == "disagg"

    for text in args.latency_ms.split(","):
        lat = float(text) / 1e3
        errs, groups = [], defaultdict(list)
        for r in rows:
            pred = r["pred_ttft_s"] + (lat if dynamo(r) else 0.0)
            e = abs(pred - r["ttft_s"]) / r["ttft_s"]
            errs.append(e)
            key = (r["backend"], r["model"].split("/")[-1], r["mode"], dynamo(r))
            groups[key].append(e)
        within = sum(e <= 0.15 for e in errs)
        print(f"L = {text} ms: TTFT median {statistics.median(errs):.1%}, {within} within 15%")
        for (be, model, mode, dyn), v in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            if len(v) >= args.min_rows:
                fe = "dynamo" if dyn else "own front end"
                print(f"  {be:7s} {model:28s} {mode:6s} {fe:13s} {len(v):4d} rows "
                      f"{statistics.median(v):6.1%} {sum(e <= 0.15 for e in v):4d} within 15%")  # fmt: skip


if __name__ == "__main__":
    main()
