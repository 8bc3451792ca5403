"""Perfetto / Chrome trace JSON of a serving simulation (Trace Event Format: "X" complete events,
microsecond timestamps; https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).

One process per replica: the step lane shows each engine step (tokens, prefill and decode counts)
and the kernel lane lays the step's breakdown (GEMMs, attention, collectives, host) end to end.
A "requests" process shows each request's queueing, prefill and decode spans."""

from __future__ import annotations

import json
from pathlib import Path

from hwtune.serve.simulator import SimResult

US = 1e6


def chrome_trace(res: SimResult, max_requests: int = 2000) -> dict:
    """The trace document (needs a run with ``record_steps=True`` for the step lanes)."""
    ev: list[dict] = []
    models = res.models
    seen: set[int] = set()
    for st in res.steps:
        pid = st.replica
        if pid not in seen:
            seen.add(pid)
            ev.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"replica {pid} ({st.role})"}})  # fmt: skip
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
                       "args": {"name": "steps"}})  # fmt: skip
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1,
                       "args": {"name": "kernels"}})  # fmt: skip
        sh = st.shape
        ev.append({
            "ph": "X", "pid": pid, "tid": 0, "ts": st.start * US, "dur": st.duration * US,
            "name": f"step {sh.tokens} tok ({st.prefills}p/{st.decodes}d)",
            "args": {"tokens": sh.tokens, "prefill_tokens": sh.pf_tokens,
                     "decode_seqs": sh.dec_n, "kv_used": round(st.kv_used, 4)},
        })  # fmt: skip
        model = models.get(st.role)
        if model is not None:
            t = st.start
            parts = model.breakdown(sh)
            scale = st.duration / max(sum(parts.values()), 1e-30)
            for name, sec in parts.items():
                if sec <= 0:
                    continue
                ev.append({"ph": "X", "pid": pid, "tid": 1, "ts": t * US,
                           "dur": sec * scale * US, "name": name})  # fmt: skip
                t += sec * scale
    rp = 10_000
    ev.append({"ph": "M", "name": "process_name", "pid": rp, "args": {"name": "requests"}})
    for r in res.requests[:max_requests]:
        lane = r.rid % 64
        spans = (("queued", r.arrival, r.first_scheduled), ("prefill", r.first_scheduled,
                 r.first_token), ("decode", r.first_token, r.finish))  # fmt: skip
        for name, a, b in spans:
            if a == a and b == b and b > a:
                ev.append({"ph": "X", "pid": rp, "tid": lane, "ts": a * US, "dur": (b - a) * US,
                           "name": f"{name} #{r.rid}",
                           "args": {"prompt": r.prompt, "output": r.output}})  # fmt: skip
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


def write_chrome_trace(res: SimResult, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps(chrome_trace(res)))
    return p
