"""The runtime's device: CPU/gloo by default, CUDA/NCCL by option. No GPU here: the selection
(backend, local rank, the refusal) is tested as pure logic, cuda is refused in one line before
any process starts, and the torchrun entry point runs on CPU/gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hwtune.cli.compile import compile_cmd  # noqa: E402
from hwtune.errors import HwtuneInputError  # noqa: E402
from hwtune.parallel.actions import parse_action  # noqa: E402
from hwtune.parallel.runtime import launch as launch_mod  # noqa: E402
from hwtune.parallel.runtime.device import backend_for, check_device, local_rank  # noqa: E402
from hwtune.parallel.runtime.dualpipe import in_posting_order  # noqa: E402
from hwtune.parallel.runtime.launch import launch, run_config, under_torchrun  # noqa: E402
from hwtune.parallel.runtime.train import RunConfig  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def test_backend_and_device_selection():
    assert backend_for("cpu") == "gloo"
    assert backend_for("cuda") == "nccl"
    with pytest.raises(HwtuneInputError, match="device: got 'tpu'; expected cpu or cuda"):
        backend_for("tpu")
    assert RunConfig().device == "cpu"
    assert run_config(make_spec(dp=2)).device == "cpu"
    assert run_config(make_spec(dp=2), device="cuda").device == "cuda"


def test_local_rank_from_torchrun_or_the_spawn_rank():
    assert local_rank(5, 8, {"LOCAL_RANK": "3"}) == 3  # torchrun's, whatever the global rank
    assert local_rank(5, 4, {}) == 1  # spawned: rank modulo the visible GPUs
    assert local_rank(2, 4, None) == 2
    with pytest.raises(HwtuneInputError, match="device"):
        local_rank(0, 0, {})


def test_cuda_is_refused_with_fewer_gpus_than_ranks():
    check_device("cpu", 8, 0)
    check_device("cuda", 2, 2)
    check_device("cuda", 2, 8)
    for seen in (0, 1):
        with pytest.raises(HwtuneInputError) as e:
            check_device("cuda", 2, seen)
        msg = str(e.value)
        assert e.value.field == "device" and e.value.value == "cuda" and "\n" not in msg
        assert "expected cpu, or cuda on a machine with N >= 2 GPUs" in msg


@NO_GPU
def test_cuda_is_refused_here_before_any_process_starts(monkeypatch):
    import torch.multiprocessing as mp

    def no_spawn(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a process was started")

    monkeypatch.setattr(mp, "spawn", no_spawn)
    with pytest.raises(HwtuneInputError, match="^device: got 'cuda'; expected cpu, or cuda on"):
        launch(RunConfig(dp=2, device="cuda"))


@NO_GPU
def test_compile_run_device_cuda_exits_2_with_one_line():
    app = typer.Typer()
    app.command("compile")(compile_cmd)
    app.callback()(lambda: None)
    r = CliRunner().invoke(app, ["compile", "--dp", "2", "--run", "--device", "cuda"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1
    assert "device: got 'cuda'; expected cpu, or cuda on a machine with N >= 2 GPUs" in lines[0]


def test_dualpipe_orders_nccl_cannot_match_are_refused_for_cuda():
    """NCCL ignores tags: a DualPipe order runs on cuda only when each rank receives its
    peer's messages in the order they were sent (pp 2 and 4 here; pp 8 not)."""
    for pp, ok in ((2, True), (4, True), (8, False)):
        spec = make_spec(pp=pp, global_batch=4 * pp, micro_batch=2, schedule="dualpipe")
        cfg = run_config(spec)
        orders = {int(r): [parse_action(a) for a in v] for r, v in cfg.orders.items()}
        assert in_posting_order(orders, pp) is ok
        if ok:
            assert run_config(spec, device="cuda").bidirectional
        else:
            with pytest.raises(HwtuneInputError, match="schedule.name: got 'dualpipe'"):
                run_config(spec, device="cuda")


def test_torchrun_environment_is_recognised():
    assert not under_torchrun({})
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert under_torchrun(env)
    with pytest.raises(HwtuneInputError, match="WORLD_SIZE: got 2"):
        launch_mod.launch_env(run_config(make_spec(dp=4)), env)  # before any group is made


def test_torchrun_runs_the_spec_on_cpu_gloo(tmp_path: Path):
    """``torchrun -m hwtune.parallel.runtime``: two ranks from the environment (no spawn), the
    default device, rank 0 prints the run's JSON matching the single-process losses."""
    spec = tmp_path / "s.yaml"
    spec.write_text("mesh: {dp: 2}\nmicro_batch: 2\nglobal_batch: 4\n")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("no torchrun next to the interpreter")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m",
           "hwtune.parallel.runtime", "--spec", str(spec), "--steps", "2"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout[r.stdout.index("{") :])
    assert doc["device"] == "cpu" and doc["backend"] == "gloo" and doc["world"] == 2
    assert len(doc["losses"]) == 2 and doc["max_abs_diff"] <= 1e-6
    assert sorted(doc["memory"]) == ["0", "1"]  # JSON keys
