"""How exactly `hwtune serve measure` measures: against the mock server (its own process, set
timing), measured TTFT and TPOT over the set values, by clients and token rate.

    .venv/bin/python benchmarks/serve_measure_client.py [--json out.json]

The mock (`hwtune.serve.mock_server`) is a Python server too, so at high chunk rates the error
is the pair's, an upper bound on the client's. Results: BENCHMARKS.md, "serve measure".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time

from hwtune.serve.endpoint_bench import Endpoint, run_closed_loop
from hwtune.serve.mock_server import MODEL, free_port

BASE, PER_TOKEN, INPUT = 0.05, 2e-5, 1024
CASES = [(1, 0.010), (16, 0.010), (64, 0.010), (256, 0.010), (16, 0.002), (64, 0.002)]
OUTPUT = 64


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    rows = []
    for c, itl in CASES:
        port = free_port()
        srv = subprocess.Popen([sys.executable, "-m", "hwtune.serve.mock_server", "--port",
                                str(port), "--base", str(BASE), "--per-token", str(PER_TOKEN),
                                "--itl", str(itl)], stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            t = time.perf_counter()
            res = run_closed_loop(Endpoint(f"http://127.0.0.1:{port}", MODEL), c, INPUT,
                                  OUTPUT, num_requests=4 * c, warmup=c)  # fmt: skip
            wall = time.perf_counter() - t
        finally:
            srv.terminate()
            srv.wait()
        s = res.summary()
        ttft_set = BASE + PER_TOKEN * INPUT
        row = {"clients": c, "itl_ms": itl * 1e3, "chunks_per_s": c / itl,
               "ttft_ratio": s["ttft_s"]["mean"] / ttft_set,  # type: ignore[index]
               "tpot_ratio": s["tpot_s"]["mean"] / itl,  # type: ignore[index]
               "ttft_p90_ratio": s["ttft_s"]["p90"] / ttft_set,  # type: ignore[index]
               "failed": s["failed"], "wall_s": wall}  # fmt: skip
        rows.append(row)
        print(
            f"C={c:4d} itl={itl * 1e3:4.1f} ms ({c / itl:7.0f} chunks/s): TTFT x"
            f"{row['ttft_ratio']:.3f} (p90 x{row['ttft_p90_ratio']:.3f}), TPOT x"
            f"{row['tpot_ratio']:.3f}, failed {row['failed']}, {wall:.1f} s",
            flush=True,
        )
    if a.json:
        doc = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                          f"Python {platform.python_version()}", "rows": rows}  # fmt: skip
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
