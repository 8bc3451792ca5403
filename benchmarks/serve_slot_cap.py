"""What-if for published serving rows: the same simulation with the engine's concurrent
sequences capped (``max_num_seqs``), beside the rows as recorded and the measurements. Written
for InferenceX's vLLM gpt-oss-120b H100 rows at 512 clients, whose measured TTFT and TPOT fit
about 100 requests in the engine at once (VALIDATION.md, "What is missing").

The fitted slots follow from Little's law for a closed loop of C clients with S requests in the
engine, each there for E seconds (about (output tokens - 1) x TPOT): the engine completes S / E
requests a second, so a request waits W = (C - S) E / S before it starts; with W about the
measured TTFT, S = C E / (TTFT + E), from the row's own measured TTFT and TPOT.

    python benchmarks/serve_slot_cap.py                       # those 9 rows, 100 slots
    python benchmarks/serve_slot_cap.py --backend sglang --model DeepSeek --min-clients 256
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from hwtune.serve.published import load_rows, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--model", default="gpt-oss", help="a substring of the model name")
    ap.add_argument("--min-clients", type=int, default=512)
    ap.add_argument("--slots", type=int, default=100, help="max_num_seqs of the what-if")
    ap.add_argument("--requests-per-client", type=int, default=4)
    args = ap.parse_args()
    if args.slots < 1:
        ap.error(f"--slots: got {args.slots}; expected an integer >= 1")
    rows = [
        r
        for r in load_rows()
        if r.deployment is not None
        and r.backend == args.backend
        and args.model in r.model
        and r.concurrency >= args.min_clients
    ]
    print(f"# {len(rows)} rows; TTFT s / TPOT ms")
    print(
        f"| ISL/OSL | clients | TP | measured | as recorded | {args.slots} slots | fitted slots |"
    )
    print("|---|---:|---:|---|---|---|---:|")
    for r in rows:
        dep = r.deployment
        base = predict(r, args.requests_per_client)
        capped = replace(
            r, deployment=replace(dep, replica=dep.replica.with_(max_num_seqs=args.slots))
        )
        cap = predict(capped, args.requests_per_client)
        in_engine = (r.osl - 1) * r.tpot_s  # a request's decode time, measured
        fitted = r.concurrency * in_engine / (r.ttft_s + in_engine)
        print(
            f"| {r.isl}/{r.osl} | {r.concurrency} | {dep.replica.tp} "
            f"| {r.ttft_s:.1f} / {1e3 * r.tpot_s:.2f} | {base[0]:.1f} / {1e3 * base[1]:.2f} "
            f"| {cap[0]:.1f} / {1e3 * cap[1]:.2f} | {fitted:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
