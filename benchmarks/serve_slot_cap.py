"""What-if for published serving rows: the same simulation with the engine's concurrent
sequences capped (``max_num_seqs``), beside the rows as recorded and the measurements. Written
for InferenceX's vLLM gpt-oss-120b H100 rows at 512 clients, whose measured TTFT and TPOT fit
about 100 requests in the engine at once, and used for the TensorRT-LLM 1.0.0rc3 Llama-3.1-8B
sweep of aiconfigurator's harness, whose 8-32 client rows fit one slot fewer than clients
(VALIDATION.md, "What is missing").

The fitted slots follow from Little's law for a closed loop of C clients with S requests in the
engine, each there for E seconds (about (output tokens - 1) x TPOT): the engine completes S / E
requests a second, so a request waits W = (C - S) E / S before it starts; with W about the
measured TTFT, S = C E / (TTFT + E), from the row's own measured TTFT and TPOT.

    python benchmarks/serve_slot_cap.py                       # those 9 rows, 100 slots
    python benchmarks/serve_slot_cap.py --backend sglang --model DeepSeek --min-clients 256
    python benchmarks/serve_slot_cap.py --backend trtllm --model Llama-3.1-8B --min-clients 8 \\
        --below-clients 1 --summary                           # C - 1 slots, errors by clients
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import replace

from hwtune.serve.published import load_rows, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--model", default="gpt-oss", help="a substring of the model name")
    ap.add_argument("--min-clients", type=int, default=512)
    ap.add_argument("--max-clients", type=int, default=None, help="default: no upper bound")
    ap.add_argument("--slots", type=int, default=100, help="max_num_seqs of the what-if")
    ap.add_argument(
        "--below-clients",
        type=int,
        default=None,
        help="instead of --slots: each row's clients minus this many slots",
    )
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument(
        "--summary",
        action="store_true",
        help="print median TTFT errors by clients instead of one line per row",
    )
    args = ap.parse_args()
    if args.slots < 1:
        ap.error(f"--slots: got {args.slots}; expected an integer >= 1")
    if args.max_clients is not None and args.max_clients < args.min_clients:
        ap.error(
            f"--max-clients: got {args.max_clients}; expected >= --min-clients ({args.min_clients})"
        )
    if args.below_clients is not None and args.below_clients < 0:
        ap.error(f"--below-clients: got {args.below_clients}; expected an integer >= 0")
    rows = [
        r
        for r in load_rows()
        if r.deployment is not None
        and r.backend == args.backend
        and args.model in r.model
        and r.concurrency >= args.min_clients
        and (args.max_clients is None or r.concurrency <= args.max_clients)
    ]
    below = args.below_clients is not None
    label = f"C - {args.below_clients} slots" if below else f"{args.slots} slots"
    print(f"# {len(rows)} rows; TTFT s / TPOT ms")
    if not args.summary:
        print(f"| ISL/OSL | clients | TP | measured | as recorded | {label} | fitted slots |")
        print("|---|---:|---:|---|---|---|---:|")
    errors: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for r in rows:
        dep = r.deployment
        slots = max(1, r.concurrency - args.below_clients) if below else args.slots
        base = predict(r, args.requests_per_client)
        capped = replace(r, deployment=replace(dep, replica=dep.replica.with_(max_num_seqs=slots)))
        cap = predict(capped, args.requests_per_client)
        in_engine = (r.osl - 1) * r.tpot_s  # a request's decode time, measured
        fitted = r.concurrency * in_engine / (r.ttft_s + in_engine)
        errors[r.concurrency].append(
            (abs(base[0] / r.ttft_s - 1), abs(cap[0] / r.ttft_s - 1), cap[0] / r.ttft_s)
        )
        if not args.summary:
            print(
                f"| {r.isl}/{r.osl} | {r.concurrency} | {dep.replica.tp} "
                f"| {r.ttft_s:.3g} / {1e3 * r.tpot_s:.2f} | {base[0]:.3g} / {1e3 * base[1]:.2f} "
                f"| {cap[0]:.3g} / {1e3 * cap[1]:.2f} | {fitted:.0f} |",
                flush=True,
            )
    if args.summary:
        print(f"| clients | rows | TTFT error as recorded | {label} | pred/meas ({label}) |")
        print("|---:|---:|---:|---:|---:|")
        for c in sorted(errors):
            e = errors[c]
            med = [statistics.median(x[i] for x in e) for i in range(3)]
            print(f"| {c} | {len(e)} | {med[0]:.1%} | {med[1]:.1%} | {med[2]:.2f} |")


if __name__ == "__main__":
    main()
