"""`hwtune study`: a grid of models x hardware x topologies x scales, each point searched.

Each grid point is one `search.plan` (top-1). Results are a tidy table, one row per point,
written as CSV and Parquet; a study is resumable (points already in the CSV are skipped) and
runs on local processes by default or on a Ray cluster (`ray_address`).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from hwtune.errors import HwtuneInputError
from hwtune.workers import check_workers, run_all

COLUMNS = (
    "model", "gpu", "topology", "n_gpus", "global_batch", "seq", "precision",
    "fits", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "step_time_s", "memory_gib",
    "tp", "pp", "dp", "cp", "ep", "micro_batch", "schedule", "vpp", "zero", "recompute",
    "offload", "exposed_comm_share", "bubble_share", "candidates", "search_s",
)  # fmt: skip


@dataclass(frozen=True)
class StudyPoint:
    model: str
    gpu: str
    topology: str  # a system preset name, or "nic=<Gb/s>,domain=<n>"
    n_gpus: int
    global_batch: int
    seq: int
    precision: str | None = None  # None: the GPU's `default_precision` (fp16 on V100)

    def __post_init__(self) -> None:
        if self.precision is None:
            object.__setattr__(self, "precision", _default_precision_of(self.gpu))

    @property
    def key(self) -> tuple:
        return (
            self.model,
            self.gpu,
            self.topology,
            self.n_gpus,
            self.global_batch,
            self.seq,
            self.precision,
        )


def grid(
    models: Sequence[str],
    gpus: Sequence[str],
    topologies: Sequence[str],
    scales: Sequence[int],
    global_batch: int,
    seq: int,
    precision: str | None = None,
) -> list[StudyPoint]:
    """The Cartesian product of the study's axes (names are checked by `check_points`);
    ``precision`` None: each GPU's `default_precision` (fp16 on V100)."""
    from hwtune.train.search import check_search_job

    for axis, values in (("models", models), ("gpus", gpus), ("topologies", topologies),
                         ("scales", scales)):  # fmt: skip
        if not values:
            raise HwtuneInputError(axis, list(values), "at least one value (an axis of the grid)")
    check_search_job(global_batch, seq, precision or "bf16", 1, None, 1.0)
    for axis, values in (("models", models), ("gpus", gpus), ("topologies", topologies),
                         ("scales", scales)):  # fmt: skip
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:  # the point would run and be written twice
            raise HwtuneInputError(axis, twice, "each value once (it is listed twice)")
    for n in scales:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise HwtuneInputError("scales", n, "positive integers (accelerator counts)")
    for t in topologies:  # bad input is named before any point runs
        _topology_fields(t)
    return [  # a point without a precision takes its GPU's (StudyPoint.__post_init__)
        StudyPoint(m, g, t, int(n), global_batch, seq, precision)
        for m, g, t, n in itertools.product(models, gpus, topologies, scales)
    ]


def _default_precision_of(gpu: str) -> str:
    """`default_precision` of ``gpu``; bf16 for a name the catalog lacks (`check_points`
    names it before any point runs)."""
    from hwtune.hardware.catalog import get_device
    from hwtune.train.estimator import default_precision

    try:
        return default_precision(get_device(gpu))
    except HwtuneInputError:
        return "bf16"


def _topology_fields(topology: str) -> dict[str, float] | None:
    """None for 'default' or a system preset; else the parsed nic/domain/oversubscription."""
    from hwtune.hardware.cluster import systems

    if topology == "default" or topology in systems():
        return None
    kv: dict[str, float] = {}
    for part in topology.split(","):
        k, _, v = part.partition("=")
        if k.strip() in kv:  # nic=100,nic=200 would keep only the last
            raise HwtuneInputError(f"topology {k.strip()}", topology, "each key once")
        try:
            kv[k.strip()] = float(v)
        except ValueError:
            kv = {}
            break
    if not kv or set(kv) - {"nic", "domain", "oversubscription"}:
        raise HwtuneInputError(
            "topology", topology,
            "'default', a system preset, or nic=<Gb/s>,domain=<GPUs>,oversubscription=<ratio>",
        )  # fmt: skip
    nic, dom, over = kv.get("nic", 1.0), kv.get("domain", 1.0), kv.get("oversubscription", 1.0)
    if not (math.isfinite(nic) and nic > 0):
        raise HwtuneInputError("topology nic", nic, "a positive finite Gb/s per GPU")
    if not (math.isfinite(dom) and dom >= 1 and dom == int(dom)):
        raise HwtuneInputError("topology domain", dom, "a positive whole number of GPUs")
    if not (math.isfinite(over) and over >= 1):
        raise HwtuneInputError("topology oversubscription", over, "a finite ratio >= 1")
    return kv


def _cluster(p: StudyPoint) -> object:
    from hwtune.hardware.cluster import make_cluster, systems

    if p.topology == "default":
        return make_cluster(p.gpu, p.n_gpus)
    if p.topology in systems():
        s = systems()[p.topology]
        return make_cluster(p.gpu, p.n_gpus, gpus_per_node=s.get("gpus_per_node"),
                            nic_gbps=s.get("nic_gbps_per_gpu"), scaleup_domain=s.get("scaleup_domain"),
                            nvls_allreduce_algbw_gbps=s.get("nvls_allreduce_algbw_gbps"),
                            host_memory_gbps_per_node=s.get("host_memory_gbps_per_node"))  # fmt: skip
    kv = _topology_fields(p.topology) or {}
    dom = int(kv["domain"]) if "domain" in kv else None
    extra = {"oversubscription": kv["oversubscription"]} if "oversubscription" in kv else {}
    return make_cluster(p.gpu, p.n_gpus, nic_gbps=kv.get("nic"), scaleup_domain=dom,
                        gpus_per_node=min(8, dom) if dom else None, **extra)  # fmt: skip


def check_points(points: Sequence[StudyPoint]) -> None:
    """Name a bad model, GPU, topology, scale or precision before any point runs (a point that
    cannot run is bad input, not a "no fit" row): every model loads, every cluster builds and
    every device has a peak for the precision."""
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import check_training_precision

    seen_models: dict[str, object] = {}
    seen_gpus: dict[str, object] = {}
    seen_clusters: set[tuple] = set()
    for p in points:
        if p.model not in seen_models:
            seen_models[p.model] = get_model(p.model)
            _once("models", p.model, seen_models)
        if p.gpu not in seen_gpus:
            seen_gpus[p.gpu] = get_device(p.gpu)
            _once("gpus", p.gpu, seen_gpus)
        if (p.gpu, p.topology, p.n_gpus, p.precision) not in seen_clusters:
            seen_clusters.add((p.gpu, p.topology, p.n_gpus, p.precision))
            try:
                cl = _cluster(p)
            except HwtuneInputError as e:  # a scale the topology's nodes do not take
                if not e.field.endswith("n_gpus"):
                    raise
                raise HwtuneInputError(
                    "scales",
                    p.n_gpus,
                    f"{e.expected} (the nodes of {p.gpu}, topology {p.topology})",
                ) from None
            check_training_precision(p.precision, cl.device)  # type: ignore[attr-defined]


def _once(axis: str, name: str, seen: dict[str, object]) -> None:
    """Refuse ``name`` when an earlier name of the axis loaded the same model or GPU (an alias,
    ``h100`` and ``h100-sxm-80gb``): its points would run and be written twice."""
    twin = next((k for k, v in seen.items() if k != name and v == seen[name]), None)
    if twin is not None:
        raise HwtuneInputError(axis, name, f"each {'GPU' if axis == 'gpus' else 'model'} once "
                               f"({name} is {twin}, listed before it)")  # fmt: skip


def _output_dir(out: Path) -> Path:
    """``out/study.csv``: ``out`` a directory (made if missing), and a study.csv there one that
    a previous study wrote (another file of that name is refused, not overwritten)."""
    from hwtune.structured_file import read_utf8

    if out.exists() and not out.is_dir():
        raise HwtuneInputError("output", str(out), "a directory (for study.csv), not a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HwtuneInputError(
            "output", str(out), f"a directory that can be made ({e.strerror})"
        ) from None
    csv_path = out / "study.csv"
    if not os.access(out, os.W_OK | os.X_OK) or (
        csv_path.is_file() and not os.access(csv_path, os.W_OK)
    ):
        raise HwtuneInputError("output", str(out), "a writable directory (permission denied)")
    if csv_path.is_dir():
        raise HwtuneInputError("output", str(csv_path), "study.csv to be a file, not a directory")
    if csv_path.exists():
        text = read_utf8(csv_path, "output")
        header = next(csv.reader(text.splitlines()), [])
        if text.strip() and header[: len(COLUMNS)] != list(COLUMNS):
            raise HwtuneInputError(
                "output", str(csv_path),
                "a study.csv written by hwtune study (its header is not the study's columns); "
                "move it or choose another --output",
            )  # fmt: skip
    return csv_path


def run_point(p: StudyPoint) -> dict:
    """Search one grid point; a tidy row (infeasible points have fits=False)."""
    from hwtune.model.catalog import get_model
    from hwtune.train.search import plan

    row: dict = {**asdict(p), "fits": False}
    try:
        r = plan(
            get_model(p.model), _cluster(p), p.global_batch, p.seq, precision=p.precision, top_k=1
        )  # type: ignore[arg-type]
    except HwtuneInputError as e:
        row["error"] = str(e)
        return row
    row.update(candidates=r.candidates, search_s=r.seconds)
    if not r.top:
        return row
    e = r.top[0]
    st = e.strategy
    b = e.breakdown
    row.update(
        fits=True, tokens_per_s=e.tokens_per_s, tokens_per_s_per_gpu=e.tokens_per_s_per_gpu,
        mfu=e.mfu, step_time_s=e.step_time_s, memory_gib=e.memory.total / 2**30,
        tp=st.tp, pp=st.pp, dp=st.dp, cp=st.cp, ep=st.ep, micro_batch=st.micro_batch,
        schedule=st.schedule, vpp=st.vpp, zero=st.zero, recompute=st.recompute,
        offload=st.offload_optimizer, exposed_comm_share=e.exposed_comm_s / e.step_time_s,
        bubble_share=b.get("pipeline_bubble", 0.0) / e.step_time_s,
    )  # fmt: skip
    return row


def inputs_digest(p: StudyPoint) -> str:
    """A short hash of what a point's result is computed from besides its key: the cluster
    (device figures, network) and the model's dimensions as the catalog gives them now. A
    resumed study recomputes a row whose digest differs (a catalog update: the MI250X became
    one GCD on 2026-12-06), or that has none (written before the digest existed)."""
    import hashlib
    import json

    from hwtune.model.catalog import get_model

    cl = _cluster(p)
    blob = json.dumps(
        [cl.model_dump(mode="json", exclude={"device": {"sources"}}),  # type: ignore[attr-defined]
         get_model(p.model).model_dump(mode="json")],
        sort_keys=True, default=str,
    )  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_complete_rows(csv_path: Path) -> tuple[list[dict], int]:
    """Rows of a previous run that are whole (every column present and the key fields parse),
    and how many were not: a line torn by an interrupted run is dropped, so its point is
    recomputed."""
    if not csv_path.exists():
        return [], 0
    rows, damaged = [], 0
    with csv_path.open(newline="") as f:
        for r in csv.DictReader(f):
            if any(r.get(c) is None for c in COLUMNS) or None in r:
                damaged += 1
                continue
            try:
                int(r["n_gpus"]), int(r["global_batch"]), int(r["seq"])
            except (TypeError, ValueError):
                damaged += 1
                continue
            rows.append(r)
    return rows, damaged


def _key_of(r: dict) -> tuple:
    return (r["model"], r["gpu"], r["topology"], int(r["n_gpus"]), int(r["global_batch"]),
            int(r["seq"]), r["precision"])  # fmt: skip


def run_study(
    points: Iterable[StudyPoint],
    out_dir: str | Path,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    notice: Callable[[str], None] | None = None,
) -> Path:
    """Run the grid, appending rows to ``out_dir/study.csv`` as they finish (so an interrupted
    study resumes where it stopped), then write ``study.parquet`` and summary plots.
    ``notice`` gets one line when a previous run's rows are reused or damaged ones dropped."""
    check_workers(workers, ray_address)
    points = list(points)
    check_points(points)
    out = Path(out_dir)
    csv_path = _output_dir(out)
    kept, damaged = _load_complete_rows(csv_path)
    digest = {p.key: inputs_digest(p) for p in points}
    fresh, stale = [], []
    for r in kept:
        key = _key_of(r)
        (stale if key in digest and r.get("inputs_digest") != digest[key] else fresh).append(r)
    kept = fresh
    done = {_key_of(r) for r in kept}
    todo = [p for p in points if p.key not in done]
    if notice is not None and (kept or damaged or stale):
        reused = len(points) - len(todo)
        notice(f"resuming {csv_path}: {reused} of {len(points)} points already there"
               + (f"; {damaged} damaged row(s) dropped and recomputed" if damaged else "")
               + (f"; {len(stale)} row(s) computed from other catalog figures recomputed"
                  if stale else ""))  # fmt: skip
    fields = list(COLUMNS) + ["error", "inputs_digest"]
    # rewrite what survived (drops a torn last line), then append as points finish
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)
    with csv_path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        total = len(todo)
        for i, (j, row) in enumerate(run_all(run_point, todo, workers, ray_address)):
            row["inputs_digest"] = digest[todo[j].key]
            w.writerow(row)
            f.flush()
            if progress:
                progress(i + 1, total)
    _in_grid_order(csv_path, fields, [p.key for p in points])
    _write_parquet(csv_path, out / "study.parquet")
    _plot(csv_path, out)
    return csv_path


def _in_grid_order(csv_path: Path, fields: list[str], keys: list[tuple]) -> None:
    """Rewrite the finished CSV with its rows in the grid's order (workers finish points in any
    order; a row of an earlier run outside this grid keeps its place after the grid's), so the
    same study gives the same file whatever the workers."""
    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rank = {k: i for i, k in enumerate(keys)}

    def place(i: int) -> tuple[int, int]:
        try:
            return rank.get(_key_of(rows[i]), len(keys)), i
        except (KeyError, TypeError, ValueError):  # not a row of this grid: after it
            return len(keys), i

    order = sorted(range(len(rows)), key=place)
    if order == list(range(len(rows))):
        return
    tmp = csv_path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows[i] for i in order)
    tmp.replace(csv_path)


def _write_parquet(csv_path: Path, pq_path: Path) -> None:
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return  # the 'study' extra is optional; the CSV stands alone
    pq.write_table(pacsv.read_csv(csv_path), pq_path)


def _plot(csv_path: Path, out: Path) -> None:
    """Per-GPU throughput against scale, one line per (model, GPU, topology)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[tuple, list[tuple[int, float]]] = {}
    with csv_path.open() as f:
        for r in csv.DictReader(f):
            if r.get("fits") == "True" and r.get("tokens_per_s_per_gpu"):
                series.setdefault((r["model"], r["gpu"], r["topology"]), []).append(
                    (int(r["n_gpus"]), float(r["tokens_per_s_per_gpu"]))
                )
    if not series:
        return
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    for (m, g, t), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{m} / {g} / {t}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("accelerators")
    ax.set_ylabel("tokens/s per GPU (best strategy)")
    ax.legend(fontsize=7)
    ax.set_title("study: per-GPU throughput at the best strategy")
    fig.tight_layout()
    fig.savefig(out / "study_throughput.png")
    plt.close(fig)
