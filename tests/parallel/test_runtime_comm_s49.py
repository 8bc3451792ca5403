"""The real run communicates what the compiled plan prices (review s49).

Each rank counts the collectives it issues per step (`runtime.comm.CommCounter`: calls and
bytes by kind, DDP's buckets routed through ``dist.all_reduce`` by torch's default comm hook);
the tests set those beside the plan's communication ops for the same spec, on the tiny model:

- ZeRO-0 (DDP) with 4 micro-batches: one gradient all-reduce per step (``no_sync`` on the
  first three), not four;
- ZeRO-2 (FSDP2): the parameters gathered once per step, the gradients reduce-scattered after
  every micro-batch (ZeRO-2 holds only its gradient shard), as the plan now prices it;
- ZeRO-3: gather before each forward and backward, reduce-scatter after each backward;
- pp = dp = 2 at ZeRO-3 (torch.distributed.pipelining drives the FSDP2 stages): one
  reduce-scatter per stage per step and the gathers FSDP2 issues there, as the plan now prices
  it; at ZeRO-0 the hand reduction is one flat all-reduce per step;

and the losses still match the single-process run. Also: `--run` refuses more processes than
the machine's cap before any starts; ``python -m hwtune.parallel.runtime`` exits 2 with one
line on bad input and 1 when the losses disagree."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from hwtune.errors import HwtuneInputError  # noqa: E402
from hwtune.hardware.cluster import make_cluster  # noqa: E402
from hwtune.parallel.compiler import compile_plan  # noqa: E402
from hwtune.parallel.runtime import launch as L  # noqa: E402
from hwtune.parallel.runtime.launch import launch_many, losses_agree, run_config  # noqa: E402
from hwtune.parallel.runtime.models import build, model_spec  # noqa: E402
from hwtune.parallel.runtime.pipeline import split_stage  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402

AR, AG, RS = "all_reduce", "all_gather_single", "reduce_scatter_single"


def _plan_counts(spec, cfg) -> dict[int, Counter]:
    """The plan's communication ops per pipeline rank, by kind (AR, AG, RS)."""
    plan = compile_plan(spec, model_spec(cfg.model), make_cluster("h100-sxm-80gb", cfg.world))
    out: dict[int, Counter] = {r: Counter() for r in range(plan.pp)}
    for o in plan.ops:
        if o.stream == "comm":
            out[o.rank][o.kind] += 1
    return out


def _bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _specs(**kw):
    # micro_batch 1 in the spec: n_micro = 4 per dp rank; the run's micro-batch is 2 sequences
    return make_spec(global_batch=8, micro_batch=1, **kw)


@pytest.fixture(scope="module")
def dp2():
    specs = {z: _specs(dp=2, zero=z) for z in (0, 2, 3)}
    cfgs = {z: run_config(s, steps=2) for z, s in specs.items()}
    runs = dict(zip(cfgs, launch_many(list(cfgs.values())), strict=True))
    return specs, cfgs, runs


@pytest.fixture(scope="module")
def pp2dp2():
    specs = {z: _specs(pp=2, dp=2, zero=z, schedule="1f1b") for z in (0, 3)}
    cfgs = {z: run_config(s, steps=2) for z, s in specs.items()}
    runs = dict(zip(cfgs, launch_many(list(cfgs.values())), strict=True))
    return specs, cfgs, runs


def test_ddp_all_reduces_once_per_step_not_once_per_micro_batch(dp2):
    specs, cfgs, runs = dp2
    cfg, res = cfgs[0], runs[0]
    assert cfg.n_micro == 4 and cfg.zero == 0
    full = _bytes(build(cfg.model, 0))
    # the tiny model fits DDP's first bucket (1 MiB): one bucket, so one all-reduce per round
    assert full < 2**20
    for steps in res["collectives"].values():
        assert len(steps) == 2
        for step in steps:
            assert step == {AR: {"calls": 1, "bytes": full}}  # was 4 calls, 4x the bytes
    assert _plan_counts(specs[0], cfg)[0] == Counter(AR=1)
    assert losses_agree(res["losses"], res["reference"]), res


@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp2_gathers_and_reduce_scatters_as_the_plan_prices(dp2, zero):
    """Bytes moved per step over the whole parameters' bytes = the plan's op count: ZeRO-2 one
    gather (was one per micro-batch) and one reduce-scatter per micro-batch; ZeRO-3 two gathers
    and one reduce-scatter per micro-batch."""
    specs, cfgs, runs = dp2
    cfg, res = cfgs[zero], runs[zero]
    full = _bytes(build(cfg.model, 0))
    plan = _plan_counts(specs[zero], cfg)[0]
    m = cfg.n_micro
    assert plan == (Counter(AG=1, RS=m) if zero == 2 else Counter(AG=2 * m, RS=m))
    for steps in res["collectives"].values():
        for step in steps:
            assert set(step) == {AG, RS}
            assert step[AG]["bytes"] == plan["AG"] * full
            assert step[RS]["bytes"] == plan["RS"] * full
    assert losses_agree(res["losses"], res["reference"]), res


def test_pipeline_with_dp_communicates_as_the_plan_prices(pp2dp2):
    """pp = dp = 2, 1F1B, 4 micro-batches. ZeRO-3: torch's schedule keeps an FSDP2 stage's
    gradients unsharded over the step and reduce-scatters them once (REDUCE_GRAD); a stage is
    gathered for a forward or backward that finds it sharded (a forward reshards it, a backward
    keeps it): 5 gathers, 1 reduce-scatter per stage; the plan used to price 8 and 4. ZeRO-0:
    the hand reduction is one flat all-reduce per step (was one per tensor)."""
    specs, cfgs, runs = pp2dp2
    for zero in (0, 3):
        cfg, res = cfgs[zero], runs[zero]
        plan = _plan_counts(specs[zero], cfg)
        assert plan[0] == plan[1] == (Counter(AR=1) if zero == 0 else Counter(AG=5, RS=1))
        model = build(cfg.model, 0)
        n = len(cfg.stage_layers)
        for rank, steps in res["collectives"].items():
            s = int(rank) // cfg.dp  # mesh (pp, dp, tp): ranks 0-1 hold stage 0
            full = _bytes(split_stage(model, cfg.stage_layers[s], s == 0, s == n - 1))
            # the steady step (the first one, FSDP2's lazy initialisation, gathers once more)
            step = steps[-1]
            got = {k: v["bytes"] / full for k, v in step.items()}
            want = {AR: 1.0} if zero == 0 else {AG: 5.0, RS: 1.0}
            assert got == want, (zero, rank, step)
            assert steps[0][RS if zero else AR] == step[RS if zero else AR]
            if zero == 0:
                assert step[AR]["calls"] == 1
        assert losses_agree(res["losses"], res["reference"]), res


def test_zero2_plan_reduce_scatters_every_micro_batch_without_a_pipeline():
    """ZeRO-2 keeps only its gradient shard: the plan reduce-scatters after every backward, as
    the estimator (`rounds = m`) and the runtime do; with a pipeline torch's schedule reduces
    each stage once per step, and so does the plan."""
    spec = _specs(dp=2, zero=2)
    cfg = run_config(spec, steps=1)
    assert _plan_counts(spec, cfg)[0] == Counter(AG=1, RS=4)
    spec = _specs(pp=2, dp=2, zero=2)
    cfg = run_config(spec, steps=1)
    assert all(c == Counter(AG=1, RS=1) for c in _plan_counts(spec, cfg).values())


def test_run_refuses_more_processes_than_the_cap_before_any_starts(monkeypatch):
    import torch.multiprocessing as mp

    def no_spawn(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(mp, "spawn", no_spawn)
    monkeypatch.setattr(L, "_cpus", lambda: 2)  # the CPUs this process may run on
    assert L.max_processes() == 8
    with pytest.raises(HwtuneInputError) as e:
        L.run_spec(make_spec(dp=16))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("--dp x --tp x --pp x --cp (--run): got 16; expected at most 8"), msg
    with pytest.raises(HwtuneInputError, match=r"^dp\*tp\*pp\*cp: got 16; expected at most 8"):
        L.launch(run_config(make_spec(dp=16)))
    monkeypatch.setattr(L, "_cpus", lambda: 64)
    assert L.max_processes() == 16
    L.check_processes(16)  # at the cap: allowed
    with pytest.raises(HwtuneInputError, match="at most 16 processes"):
        L.check_processes(32)


def test_compile_run_refuses_too_many_processes_in_one_line(monkeypatch, rejects):
    import torch.multiprocessing as mp

    monkeypatch.setattr(mp, "spawn", lambda *a, **k: pytest.fail("a process was started"))
    monkeypatch.setattr(L, "_cpus", lambda: 2)
    rejects(["compile", "--dp", "16", "--run"], "--dp x --tp x --pp x --cp (--run)", "16",
            "at most 8 processes")  # fmt: skip


def _main(argv, capsys):
    from hwtune.parallel.runtime.__main__ import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_main_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    ok = tmp_path / "s.yaml"
    ok.write_text("mesh: {dp: 2}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("mesh: {dp: 0}\n")
    cases = [
        (["--spec", str(tmp_path / "missing.yaml")], "readable file"),
        (["--spec", str(bad)], "mesh.dp: got 0"),
        (["--spec", str(ok), "--steps", "0"], "--steps: got 0"),  # was a traceback (mem)
        (["--spec", str(ok), "--steps", "x"], "--steps"),  # argparse: was usage + error
        (["--spec", str(ok), "--device", "tpu"], "device: got 'tpu'"),
    ]
    for argv, words in cases:
        rc, out, err = _main(argv, capsys)
        assert rc == 2, (argv, err)
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
        assert words in err, (argv, err)


def test_main_exits_1_when_the_losses_disagree(tmp_path, capsys, monkeypatch):
    ok = tmp_path / "s.yaml"
    ok.write_text("mesh: {dp: 2}\n")
    doc = {"losses": [1.0], "reference": [2.0], "max_abs_diff": 1.0, "tolerance": 1e-5}
    monkeypatch.setattr(L, "launch", lambda cfg: {**doc, "agrees": False})
    rc, out, err = _main(["--spec", str(ok), "--steps", "1"], capsys)
    assert rc == 1
    assert json.loads(out)["agrees"] is False  # the document still printed
    assert err.count("\n") == 1 and "losses differ from the single-process run" in err
    monkeypatch.setattr(L, "launch", lambda cfg: {**doc, "agrees": True})
    rc, out, err = _main(["--spec", str(ok), "--steps", "1"], capsys)
    assert rc == 0 and err == ""


def test_main_as_a_process_missing_spec_exits_2_without_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "hwtune.parallel.runtime", "--spec", str(tmp_path / "no.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
