"""Side by side with Zeus (You, Chung & Chowdhury, NSDI'23) on the same simulated devices:
Zeus's own trace-driven recurring-job simulator against hwtune's `co_optimize` and
`OnlineTuner`, all minimizing Zeus's cost η·E + (1 − η)·MAXPOWER·T. Everything is SIMULATED
from hwtune's step-time, power and critical-batch models, which are the "true" device for both
tools; nothing here is measured.

    python3 -m venv /tmp/zeus-venv && /tmp/zeus-venv/bin/pip install zeus==0.16.0
    .venv/bin/python benchmarks/energy_vs_zeus.py --zeus-python /tmp/zeus-venv/bin/python
    .venv/bin/python benchmarks/energy_vs_zeus.py --zeus-python ... --quick   # A100 only

Zeus runs in its own environment (hwtune does not depend on it): this script writes the
traces Zeus's simulator reads to a temporary directory and runs
`benchmarks/energy_vs_zeus_runner.py` with ``--zeus-python``.

The traces, per device and scenario (noise scale B_noise, the user's batch B0):

- train trace, per batch size: epochs to the target = S(B)·B / D with S(B) = S_min(1 +
  B_noise/B), D = 50,000 samples per epoch, S_min set so that the fewest samples any batch
  needs, E_min = S_min·B_noise, is 10 epochs (B = B_noise needs 20). Zeus's traces hold
  several seeds per batch (``run``) and its simulator samples one per launch, so each batch
  gets 4 runs: the model's epochs times seeded lognormal factors (σ = 0.1, ``--run-sigma``)
  rescaled to mean 1, so the 4-run mean is the model exactly. Epochs are not rounded to
  whole epochs (Zeus's measured traces are); ``max_epochs`` is set above every run, so only
  Zeus's own early stopping ends a run unconverged.
- power trace, per (batch size, power limit): under a power limit the GPU runs the highest
  table clock whose power fits (else its lowest clock), as `SimulatedDevice` plays a power
  limit and as the frequency-only baseline of `energy_joint_vs_frequency.py` throttles;
  ``time_per_epoch`` = (D/B)·T(B, f), ``average_power`` = P(B, f).

Zeus: `PruningGTSBatchSizeOptimizer` + `JITPowerLimitOptimizer` in `Simulator.
simulate_one_job`, η = 0.5 and β = 2 (the defaults of Zeus's NSDI'23 reproduction script),
N recurrences, seeds 1..5. hwtune: `co_optimize(objective="mix")` on the true models, and the
`OnlineTuner` (objective mix) on `SimulatedDevice` (2% step-time noise), whose fitted models
are kept across recurrences (it profiles once). MAXPOWER is the largest power limit of the
grid for both (Zeus's simulator takes the largest power limit in its trace); hwtune's power
cap is that same limit, i.e. no cap beyond the device's own.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.cooptimizer import OperatingPoint, co_optimize, cost, evaluate
from hwtune.energy.cooptimizer import power_of_two_batches as pow2
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.power_model import PowerModel
from hwtune.energy.profiles import get_profile
from hwtune.energy.step_model import StepTimeModel, step_model_from_estimator
from hwtune.energy.tuner import OnlineTuner
from hwtune.energy.workloads import GPT2_SMALL, HOST_DC_S, HOST_S, edge_step_model
from hwtune.hardware.catalog import get_device
from hwtune.hardware.device import STATIC_FRACTION, device_power_figures

ETA, BETA = 0.5, 2.0  # Zeus's defaults (run_single.py: --eta_knob 0.5, --beta_knob 2.0)
ZEUS_SEEDS = (1, 2, 3, 4, 5)  # run_single.py's default seed is 1
SAMPLES_PER_EPOCH = 50_000
MIN_EPOCHS = 10.0
RUNS_PER_BATCH, RUN_SIGMA, TRACE_SEED = 4, 0.10, 0
SEQ = 256
A100_V_FLOOR = 0.6  # ASSUMPTION: the edge profiles' default voltage floor


@dataclass(frozen=True)
class Setup:
    """One simulated device: the true models, its knobs, Zeus's power-limit grid."""

    name: str
    note: str
    step: StepTimeModel
    power: PowerModel
    clocks_hz: tuple[float, ...]
    batches: tuple[int, ...]
    power_limits: tuple[int, ...]
    scenarios: tuple[tuple[float, int], ...]  # (B_noise, B0)

    @property
    def max_power_w(self) -> float:
        return float(max(self.power_limits))


def a100() -> Setup:
    """A100 SXM4 80GB from the catalog. hwtune has no data-center energy profile: the clock
    table (210..1410 MHz in 15 MHz steps) and the power model (static = STATIC_FRACTION of the
    400 W board power, the rest dynamic at 1410 MHz) are assumptions made here."""
    dev = get_device("a100-sxm4-80gb")
    static, dynamic = device_power_figures(dev)
    clocks = tuple(float(mhz) * 1e6 for mhz in range(210, 1411, 15))
    step = step_model_from_estimator(
        GPT2_SMALL, dev, SEQ, batches=(1, 2, 4, 8, 16), host_s=HOST_DC_S, f_ref_hz=clocks[-1]
    )
    power = PowerModel(static, dynamic, clocks[-1], v_floor=A100_V_FLOOR)
    return Setup(
        name="a100-sxm4-80gb",
        note=(
            f"catalog A100 SXM4 80GB; clocks 210-1410 MHz / 15 MHz (assumed); power: static "
            f"{static:.0f} W ({STATIC_FRACTION:.0%} of {dev.tdp_w:.0f} W, assumed) + {dynamic:.0f} W "
            f"dynamic, V floor {A100_V_FLOOR}; host {HOST_DC_S[0] * 1e3:.0f} ms + "
            f"{HOST_DC_S[1] * 1e3:.1f} ms/sample (assumed)"
        ),
        step=step,
        power=power,
        clocks_hz=clocks,
        batches=tuple(pow2(4, 256)),  # the estimator puts B = 256 at 41 of 80 GiB
        # the A100 SXM4's NVML limit range as nvidia-smi reports it (not re-read on
        # hardware here), in Zeus's default 25 W stride
        power_limits=tuple(range(100, 401, 25)),
        scenarios=((16.0, 64), (64.0, 256), (256.0, 256), (1024.0, 256)),
    )


def agx_orin() -> Setup:
    prof = get_profile("jetson-agx-orin-64gb")
    lo, hi = prof.module_power_w
    return Setup(
        name=prof.name,
        note=(
            f"hwtune's edge profile; host {HOST_S[0] * 1e3:.0f} ms + {HOST_S[1] * 1e3:.1f} "
            f"ms/sample (assumed); no NVML power limit on a Jetson: a limit is emulated as "
            f"the highest clock that fits, {lo:.0f}-{hi:.0f} W (module range) in 5 W steps"
        ),
        step=edge_step_model(prof),
        power=prof.default_power_model(),
        clocks_hz=prof.frequencies_hz,
        batches=tuple(pow2(1, 256)),
        power_limits=tuple(range(int(lo), int(hi) + 1, 5)),
        scenarios=((8.0, 64), (32.0, 256), (128.0, 256), (512.0, 256)),
    )


SETUPS = {"a100": a100, "agx-orin": agx_orin}


# --- the true models -------------------------------------------------------------------------
def convergence_for(b_noise: float) -> CriticalBatch:
    """S(B) with S_min set so that E_min = S_min·B_noise is ``MIN_EPOCHS`` epochs."""
    return CriticalBatch(b_noise, MIN_EPOCHS * SAMPLES_PER_EPOCH / b_noise)


def clock_under_limit(setup: Setup, batch: int, limit_w: float) -> float:
    """The clock the GPU runs at ``batch`` under ``limit_w``: `SimulatedDevice`'s rule (the
    highest table clock whose power fits, else the lowest)."""
    sim = SimulatedDevice(setup.step, setup.power, setup.clocks_hz, supports_power_limit=True)
    sim.set_power_limit_w(limit_w)
    return sim.effective_frequency_hz(batch)


def point(setup: Setup, conv: CriticalBatch, batch: int, f_hz: float) -> OperatingPoint:
    return evaluate(batch, f_hz, setup.step, setup.power, conv, setup.max_power_w)


def zeus_cost(p: OperatingPoint, setup: Setup) -> float:
    return cost(p, "mix", setup.max_power_w, ETA)


# --- traces for Zeus's simulator -------------------------------------------------------------
JOB = {"dataset": "synthetic", "network": "gpt2-124m", "optimizer": "adamw", "target_metric": 1.0}


def write_traces(
    setup: Setup, si: int, conv: CriticalBatch, folder: Path, sigma: float = RUN_SIGMA
) -> tuple[Path, Path, int]:
    """The train and power traces as CSV; returns their paths and the job's max_epochs."""
    rng = np.random.default_rng([TRACE_SEED, list(SETUPS).index(setup_key(setup)), si])
    train = ["dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch"]
    worst = 0.0
    for b in setup.batches:
        epochs = conv.steps(b) * b / SAMPLES_PER_EPOCH
        z = rng.lognormal(0.0, sigma, RUNS_PER_BATCH)
        for run, k in enumerate(z / z.mean(), start=1):
            worst = max(worst, epochs * k)
            train.append(f"{JOB['dataset']},{JOB['network']},{b},{JOB['optimizer']},0.0001,"
                         f"{run},{JOB['target_metric']},{float(epochs * k)!r}")  # fmt: skip
    power = ["dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power"]
    for b in setup.batches:
        for pl in setup.power_limits:
            p = point(setup, conv, b, clock_under_limit(setup, b, pl))
            t_epoch = SAMPLES_PER_EPOCH / b * p.step_time_s
            power.append(f"{JOB['dataset']},{JOB['network']},{b},{JOB['optimizer']},{pl},"
                         f"{t_epoch!r},{p.power_w!r}")  # fmt: skip
    tp, pp = (
        folder / f"{setup_key(setup)}-{si}-train.csv",
        folder / f"{setup_key(setup)}-{si}-power.csv",
    )
    tp.write_text("\n".join(train) + "\n")
    pp.write_text("\n".join(power) + "\n")
    return tp, pp, math.ceil(worst) + 1


def setup_key(setup: Setup) -> str:
    return "a100" if setup.name.startswith("a100") else "agx-orin"


# --- hwtune's online tuner over one recurrence -----------------------------------------------
@dataclass(frozen=True)
class TunerRun:
    batch: int
    f_hz: float
    first_cost: float  # the whole first recurrence: profiling, then the chosen point
    profile_s: float


def run_tuner(setup: Setup, conv: CriticalBatch, b0: int, settle_steps: int = 200) -> TunerRun:
    """The `OnlineTuner` (objective mix) on `SimulatedDevice` for one recurrence: stepped until
    it has committed and run ``settle_steps`` more steps, then the rest of the job (progress
    counted as sum over steps of 1/S(B)) priced at its final point on the true models."""
    sim = SimulatedDevice(setup.step, setup.power, setup.clocks_hz, seed=0, time_noise=0.02)
    tuner = OnlineTuner(
        sim, setup.max_power_w, list(setup.batches), base_batch=b0, convergence=conv,
        objective="mix", eta=ETA, max_power_w=setup.max_power_w, control_interval_s=2.0,
    )  # fmt: skip
    progress, t_profile, after = 0.0, None, 0
    while progress < 1.0 and after < settle_steps:
        plan = tuner.step_begin()
        sim.run_step(plan.batch_size)
        tuner.step_end()
        progress += 1.0 / conv.steps(plan.batch_size)
        if tuner.phase == "run":
            if t_profile is None:
                t_profile = sim.now_s()
            after += 1
    so_far = ETA * sim.energy_j() + (1 - ETA) * setup.max_power_w * sim.now_s()
    final = point(setup, conv, tuner.batch_size, tuner.frequency_hz)
    rest = max(0.0, 1.0 - progress) * zeus_cost(final, setup)
    return TunerRun(tuner.batch_size, tuner.frequency_hz, so_far + rest, t_profile or math.nan)


# --- Zeus's results --------------------------------------------------------------------------
LAST = 10  # recurrences that define Zeus's converged point and its cost after convergence


@dataclass(frozen=True)
class ZeusRun:
    converged: tuple[int, int]  # (batch, power limit) most run in the last LAST recurrences
    per_recurrence: tuple[float, ...]  # cost of each recurrence, early-stopped launches included
    launches: int


def read_zeus(history: list[list[object]], max_power_w: float) -> ZeusRun:
    """Split Zeus's launch history into recurrences (each ends with the launch that reached
    the target) and price every launch with Zeus's cost."""
    recs: list[list[tuple[int, int, float]]] = [[]]
    for bs, pl, energy, t, reached in history:
        recs[-1].append((int(bs), int(pl), ETA * energy + (1 - ETA) * max_power_w * t))
        if reached:
            recs.append([])
    recs = [r for r in recs if r]
    last = collections.Counter(r[-1][:2] for r in recs[-LAST:])
    return ZeusRun(
        converged=last.most_common(1)[0][0],  # type: ignore[arg-type]
        per_recurrence=tuple(sum(c for *_, c in r) for r in recs),
        launches=sum(len(r) for r in recs),
    )


def check_zeus_python(path: str | None) -> str:
    how = ("python3 -m venv /tmp/zeus-venv && /tmp/zeus-venv/bin/pip install zeus==0.16.0, "
           "then --zeus-python /tmp/zeus-venv/bin/python")  # fmt: skip
    if not path:
        sys.exit(f"energy_vs_zeus: no Zeus python given; create one ({how})")
    try:
        r = subprocess.run([path, "-c", "import zeus._legacy.simulate, zeus; print(zeus.__version__)"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"energy_vs_zeus: cannot run --zeus-python {path} ({e}); {how}")
    if r.returncode != 0:
        sys.exit(f"energy_vs_zeus: {path} cannot import zeus._legacy.simulate; {how}")
    return r.stdout.strip()


# --- the table -------------------------------------------------------------------------------
def mhz(f: float) -> str:
    return f"{f / 1e6:.0f}"


def med_range(xs: list[float], fmt: str = "{:.3f}") -> str:
    lo, mid, hi = min(xs), statistics.median(xs), max(xs)
    if hi - lo < 5e-4:
        return fmt.format(mid)
    return f"{fmt.format(mid)} ({fmt.format(lo)}-{fmt.format(hi)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--zeus-python", help="a Python with zeus==0.16.0 (e.g. /tmp/zeus-venv/bin/python)"
    )
    ap.add_argument("--recurrences", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="the A100 only")
    ap.add_argument(
        "--run-sigma",
        type=float,
        default=RUN_SIGMA,
        help="seed-to-seed spread of epochs to target (lognormal sigma)",
    )
    args = ap.parse_args()
    zeus_version = check_zeus_python(args.zeus_python)
    t_start = time.perf_counter()
    n = args.recurrences
    setups = [a100()] if args.quick else [a100(), agx_orin()]

    with tempfile.TemporaryDirectory(prefix="hwtune-zeus-") as tmp:
        folder = Path(tmp)
        cases, context = [], {}
        for setup in setups:
            for si, (b_noise, b0) in enumerate(setup.scenarios):
                conv = convergence_for(b_noise)
                tp, pp, max_epochs = write_traces(setup, si, conv, folder, args.run_sigma)
                key = f"{setup_key(setup)}/{si}"
                cases.append({
                    "key": key, "train_csv": str(tp), "power_csv": str(pp), **JOB,
                    "max_epochs": max_epochs, "default_bs": b0, "recurrences": n,
                    "eta": ETA, "beta": BETA, "seeds": list(ZEUS_SEEDS),
                })  # fmt: skip
                context[key] = (setup, b_noise, b0, conv)
        (folder / "cases.json").write_text(json.dumps({"cases": cases}))
        runner = Path(__file__).with_name("energy_vs_zeus_runner.py")
        t0 = time.perf_counter()
        r = subprocess.run([args.zeus_python, str(runner), str(folder / "cases.json"),
                            str(folder / "out.json")], capture_output=True, text=True)  # fmt: skip
        if r.returncode != 0:
            sys.exit(f"energy_vs_zeus: Zeus's simulator failed:\n{r.stderr[-3000:]}")
        zeus_s = time.perf_counter() - t0
        runs = json.loads((folder / "out.json").read_text())["runs"]

    print(f"Zeus {zeus_version} simulator (via {args.zeus_python}), {n} recurrences, "
          f"eta {ETA}, beta {BETA}, run sigma {args.run_sigma:g}, seeds {ZEUS_SEEDS[0]}-{ZEUS_SEEDS[-1]}; all SIMULATED "
          f"from hwtune's models")  # fmt: skip
    current = None
    for key, (setup, b_noise, b0, conv) in context.items():
        if setup.name != current:
            current = setup.name
            print(f"\n### {setup.name}: GPT-2 124M, seq {SEQ}, bf16; batches "
                  f"{setup.batches[0]}-{setup.batches[-1]}; power limits "
                  f"{setup.power_limits[0]}-{setup.power_limits[-1]} W "
                  f"({len(setup.power_limits)}); MAXPOWER {setup.max_power_w:.0f} W\n")  # fmt: skip
            print(f"({setup.note})\n")
            print(HEADER.format(n=n, last=LAST))
            print("|---" * (HEADER.count("|") - 1) + "|")
        print(row(setup, b_noise, b0, conv, runs[key], n))
    print(f"\ncosts per recurrence relative to the optimum's (1.000 = the exhaustive optimum "
          f"over batches x clocks); Zeus columns: median over seeds (min-max); Zeus's "
          f"simulator took {zeus_s:.1f} s, the whole script "
          f"{time.perf_counter() - t_start:.1f} s")  # fmt: skip


HEADER = (
    "| B_noise | B0 | optimum (B, MHz, W) | B0 @ max limit | best on limit grid "
    "| Zeus converged (B, W -> MHz) | Zeus converged | Zeus last {last} rec. | Zeus cum. {n} "
    "| co_optimize (B, MHz) | co_optimize, B_noise /4, /2, x2, x4 | tuner (B, MHz) | tuner 1st rec. "
    "| tuner cum. {n} | tuner profiling s |"
)


def row(setup: Setup, b_noise: float, b0: int, conv: CriticalBatch,
        runs: dict[str, list[list[object]]], n: int) -> str:  # fmt: skip
    """One table row: the reference points, Zeus's runs, hwtune's picks, all as cost per
    recurrence over the optimum's."""
    grid = [point(setup, conv, b, f) for b in setup.batches for f in setup.clocks_hz]
    opt = min((p for p in grid if p.feasible), key=lambda p: zeus_cost(p, setup))
    c_opt = zeus_cost(opt, setup)

    def rel(b: int, f: float) -> float:
        return zeus_cost(point(setup, conv, b, f), setup) / c_opt

    def under(b: int, pl: int) -> float:
        return clock_under_limit(setup, b, pl)

    default = rel(b0, under(b0, int(setup.max_power_w)))
    pl_best = min(
        ((b, pl) for b in setup.batches for pl in setup.power_limits),
        key=lambda x: rel(x[0], under(*x)),
    )

    def pick(k: float) -> OperatingPoint:
        guess = CriticalBatch(b_noise * k, conv.s_min)
        return co_optimize(setup.step, setup.power, guess, setup.batches, setup.clocks_hz,
                           setup.max_power_w, user_batch=b0, objective="mix", eta=ETA,
                           max_power_w=setup.max_power_w).best  # fmt: skip

    co = pick(1.0)
    off = ", ".join(f"{rel(p.batch, p.frequency_hz):.3f}" for p in map(pick, (0.25, 0.5, 2.0, 4.0)))
    tr = run_tuner(setup, conv, b0)
    tr_final = rel(tr.batch, tr.f_hz)
    tr_cum = (tr.first_cost + (n - 1) * tr_final * c_opt) / (n * c_opt)

    zr = [read_zeus(runs[str(s)], setup.max_power_w) for s in ZEUS_SEEDS]
    (fb, fpl), count = collections.Counter(z.converged for z in zr).most_common(1)[0]
    conv_cost = [rel(z.converged[0], under(*z.converged)) for z in zr]
    last = [statistics.fmean(z.per_recurrence[-LAST:]) / c_opt for z in zr]
    cum = [sum(z.per_recurrence) / (n * c_opt) for z in zr]
    final_s = f"{fb}, {fpl} -> {mhz(under(fb, fpl))}"
    if count < len(zr):
        final_s += f" ({count}/{len(zr)} seeds)"
    return (
        f"| {b_noise:g} | {b0} | {opt.batch}, {mhz(opt.frequency_hz)}, {opt.power_w:.0f} "
        f"| {default:.3f} | {pl_best[0]}, {pl_best[1]} -> {mhz(under(*pl_best))}: "
        f"{rel(pl_best[0], under(*pl_best)):.3f} "
        f"| {final_s} | {med_range(conv_cost)} | {med_range(last)} | **{med_range(cum)}** "
        f"| {co.batch}, {mhz(co.frequency_hz)}: {zeus_cost(co, setup) / c_opt:.3f} "
        f"| {off} "
        f"| {tr.batch}, {mhz(tr.f_hz)}: {tr_final:.3f} | {tr.first_cost / c_opt:.3f} "
        f"| **{tr_cum:.3f}** | {tr.profile_s:.0f} |"
    )


if __name__ == "__main__":
    main()
