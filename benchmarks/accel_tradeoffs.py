"""The trade-offs of issue 9, as plots (PNG) and printed rows:
fusion lowers DRAM traffic; checkpointing trades memory for recomputation; the Pareto front
moves as the area budget grows.

    .venv/bin/python benchmarks/accel_tradeoffs.py --out /tmp/accel --evaluations 1000 --workers 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwtune.accel.architecture import catalog_names, load_accelerator
from hwtune.accel.checkpointing import _Units
from hwtune.accel.evaluate import evaluate
from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.search import Budget, search
from hwtune.accel.training import lower_training
from hwtune.report.accel_plots import checkpoint_plot, fronts_plot, fusion_plot, pareto_plot


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("accel-plots"))
    ap.add_argument("--evaluations", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    res = resnet18(batch=1)
    small_gpt = gpt2(batch=1, seq=256, config=GPT2Config(n_layer=4))

    rows = []
    for g, tag in ((res, "ResNet-18"), (small_gpt, "GPT-2 4L s256")):
        tg = lower_training(g)
        for arch in catalog_names():
            acc = load_accelerator(arch)
            for depth in (1, 2, 3, 4, 6, 8):
                r = schedule(tg, acc, depth)
                rows.append(
                    {
                        "label": f"{tag} / {arch}",
                        "depth": depth,
                        "dram_bytes": r.dram_traffic_bytes,
                        "latency_s": r.latency_s,
                    }
                )
    for r in rows:
        print(
            f"fusion  {r['label']:34s} depth {r['depth']}: DRAM {r['dram_bytes'] / 2**20:8.1f} MiB, {r['latency_s'] * 1e3:8.2f} ms"
        )
    fusion_plot(rows, a.out / "accel_fusion_dram.png")

    crow = []
    acc = load_accelerator("edge-hetero")
    for g, tag in ((resnet18(batch=4), "ResNet-18 b4"), (small_gpt, "GPT-2 4L s256")):
        u = _Units(g, {})
        total = sum(u.bytes[r] for r in u.saved)
        for frac in (1.0, 0.8, 0.6, 0.5, 0.4, 0.3):
            ev = evaluate(g, acc, activation_limit_bytes=frac * total)
            p = ev.plan
            crow.append({"label": tag, "peak_bytes": p.predicted_peak_bytes, "latency_s": ev.result.latency_s,
                         "recompute_macs": ev.result.recompute_macs, "feasible": p.feasible, "frac": frac})  # fmt: skip
    for r in crow:
        print(f"ckpt    {r['label']:16s} limit {r['frac']:.1f}x: activations {r['peak_bytes'] / 2**20:7.1f} MiB, "
              f"recompute {r['recompute_macs'] / 1e9:6.2f} GMAC, step {r['latency_s'] * 1e3:7.2f} ms{'' if r['feasible'] else ' (limit not met)'}")  # fmt: skip
    checkpoint_plot(crow, a.out / "accel_checkpointing.png")

    fronts = []
    tg = lower_training(res)
    for budget in (2.0, 5.0, 10.0, 20.0):
        s = search(
            tg,
            acc,
            evaluations=a.evaluations,
            pop_size=50,
            workers=a.workers,
            seed=0,
            budget=Budget(area_mm2=budget),
        )
        fronts.append((budget, s.F))
        best = s.F[:, 0].min() * 1e3 if len(s.F) else float("nan")
        print(
            f"front   area <= {budget:5.1f} mm2: {len(s.F)} points, fastest {best:.2f} ms, {s.seconds:.1f} s"
        )
        if budget == 20.0:
            pareto_plot(
                s.F,
                a.out / "accel_pareto.png",
                "area",
                s.all_F,
                f"ResNet-18 training, {s.evaluations} evaluations",
            )
    fronts_plot(fronts, a.out / "accel_fronts_vs_area.png")


if __name__ == "__main__":
    main()
