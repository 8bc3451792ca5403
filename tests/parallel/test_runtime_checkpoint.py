"""Checkpoints of the real runtime (`runtime/checkpoint.py`): a run saves a layout-free file
(the full tiny model's weights and AdamW moments) under one layout and another layout resumes
it; the resumed steps' losses equal an uninterrupted run's; the file's tensors equal the
single-process run's after the same steps (the gathering, not only a round trip); a rank that
dies is restarted from the latest checkpoint; bad options are refused in one line, exit 2.

Each layout pair saves after 2 steps under A and runs steps 2-3 under B. All A's of one world
size run in one launch, all B's of one world size in another (torch's start-up dominates)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from typer.testing import CliRunner  # noqa: E402

from hwtune.cli.main import app  # noqa: E402
from hwtune.errors import HwtuneInputError  # noqa: E402
from hwtune.parallel.runtime import checkpoint as ck  # noqa: E402
from hwtune.parallel.runtime.__main__ import main as runtime_main  # noqa: E402
from hwtune.parallel.runtime.launch import (  # noqa: E402
    LOSS_TOL,
    launch_named,
    run_config,
    wants_moe,
    with_checkpoints,
)
from hwtune.parallel.runtime.models import build  # noqa: E402
from hwtune.parallel.runtime.train import reference_losses, reference_run  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402

K, N = 2, 4  # saved after K steps; the resumed run goes on to N
# name: (layout A that saves, layout B that resumes); one global batch per pair (the same data)
PAIRS = {
    "dp2-zero0->tp2": (
        make_spec(dp=2, zero=0, global_batch=4, micro_batch=2),
        make_spec(tp=2, global_batch=4, micro_batch=2),
    ),
    "pp2-1f1b-dp2-zero1->dp4-zero3": (
        make_spec(pp=2, dp=2, zero=1, global_batch=8, micro_batch=2),
        make_spec(dp=4, zero=3, global_batch=8, micro_batch=2),
    ),
    "tp2-dp2-zero1->pp2-interleaved": (
        make_spec(tp=2, dp=2, zero=1, global_batch=8, micro_batch=2),
        make_spec(pp=2, global_batch=8, micro_batch=2, schedule={"name": "interleaved", "vpp": 2}),
    ),
    "moe-dp4-ep2->moe-dp2-ep2": (
        make_spec(dp=4, ep=2, zero=0, global_batch=8, micro_batch=2),
        make_spec(dp=2, ep=2, zero=0, global_batch=8, micro_batch=2),
    ),
    "pp2-dualpipe->dp2-zero1": (
        make_spec(pp=2, global_batch=8, micro_batch=2, schedule="dualpipe"),
        make_spec(dp=2, zero=1, global_batch=8, micro_batch=2),
    ),
    # expert parallelism under FSDP2: the experts sharded over their edp replicas, their
    # gradients / dp (the saved AdamW moments check that scale, which the losses cannot see:
    # AdamW's step is invariant to a gradient's scale)
    "moe-dp4-ep2-zero3->moe-dp2-ep2-zero2": (
        make_spec(dp=4, ep=2, zero=3, global_batch=8, micro_batch=2),
        make_spec(dp=2, ep=2, zero=2, global_batch=8, micro_batch=2),
    ),
    "moe-pp2-dp2-ep2-zero2->moe-dp4-ep2-zero3": (
        make_spec(pp=2, dp=2, ep=2, zero=2, global_batch=8, micro_batch=2),
        make_spec(dp=4, ep=2, zero=3, global_batch=8, micro_batch=2),
    ),
}

# more pairs, measured for VALIDATION.md by running this file as a script (not in the tests:
# two more launches): uneven FSDP2 shards (dp 3), context parallelism, an I/W-split schedule at
# ZeRO-2, experts folded over tp, MoE DualPipe
EXTRA = {
    "dp3-zero3->dp1": (
        make_spec(dp=3, zero=3, global_batch=6, micro_batch=2),
        make_spec(global_batch=6, micro_batch=2),
    ),
    "dp3-zero1->dp2-zero2": (
        make_spec(dp=3, zero=1, global_batch=12, micro_batch=2),
        make_spec(dp=2, zero=2, global_batch=12, micro_batch=2),
    ),
    "cp2-zero3->dp2-cp2-zero1": (
        make_spec(cp=2, zero=3, global_batch=4, micro_batch=2),
        make_spec(cp=2, dp=2, zero=1, global_batch=4, micro_batch=2),
    ),
    "pp2-zb-h1-dp2-zero2->pp2-dualpipev": (
        make_spec(pp=2, dp=2, zero=2, global_batch=8, micro_batch=2, schedule="zb-h1"),
        make_spec(pp=2, global_batch=8, micro_batch=2, schedule="dualpipev"),
    ),
    "moe-tp2-experts-folded->moe-pp2-dp2-ep2-zero1": (
        make_spec(tp=2, global_batch=8, micro_batch=2,
                  modules=[{"match": "layers.*.experts", "tp": 1, "ep": 2}]),
        make_spec(pp=2, dp=2, ep=2, global_batch=8, micro_batch=2),
    ),
    "moe-pp2-dp2-ep2-dualpipe->moe-dp4-ep4-zero1": (
        make_spec(pp=2, dp=2, ep=2, zero=0, global_batch=16, micro_batch=2, schedule="dualpipe"),
        make_spec(dp=4, ep=4, zero=1, global_batch=16, micro_batch=2),
    ),
}  # fmt: skip


def _cfg(spec, steps):  # noqa: ANN001, ANN202
    return run_config(spec, steps, moe=wants_moe(spec))


def _save_and_resume(pairs: dict, root) -> tuple[dict, dict, dict, dict]:  # noqa: ANN001
    """Each pair's A saves after K steps (in ``root``), its B resumes that directory to N."""
    saves = {
        n: with_checkpoints(_cfg(a, K), save=root / n.replace(">", ""))
        for n, (a, _) in pairs.items()
    }
    saved = launch_named(saves)
    resumes = {
        n: with_checkpoints(_cfg(b, N), resume=root / n.replace(">", ""))
        for n, (_, b) in pairs.items()
    }
    return saves, saved, resumes, launch_named(resumes)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return _save_and_resume(PAIRS, tmp_path_factory.mktemp("ckpt"))


@pytest.mark.parametrize("name", list(PAIRS))
def test_resumed_in_another_layout_continues_the_uninterrupted_run(pairs, name):
    saves, saved, resumes, resumed = pairs
    assert resumes[name].first_step == K
    assert resumes[name].resume.endswith(f"step-{K}.pt")
    # the uninterrupted run: the same model, data and AdamW in one process for N steps (every
    # layout matches it within LOSS_TOL: tests/parallel/test_runtime.py)
    whole = reference_losses(replace(saves[name], steps=N))
    res = resumed[name]
    assert res["first_step"] == K and len(res["losses"]) == N - K
    assert res["losses"] == pytest.approx(whole[K:], rel=LOSS_TOL, abs=LOSS_TOL)
    # the saving run's own steps too, and the resumed run's reference starts from the file
    assert saved[name]["losses"] == pytest.approx(whole[:K], rel=LOSS_TOL, abs=LOSS_TOL)
    assert res["reference"] == pytest.approx(whole[K:], rel=LOSS_TOL, abs=LOSS_TOL)
    assert res["agrees"]


@pytest.mark.parametrize("name", list(PAIRS))
def test_saved_tensors_equal_the_single_process_state_after_k_steps(pairs, name):
    saves, saved, _, _ = pairs
    (path,) = saved[name]["saved"]
    doc = torch.load(path, weights_only=True)  # plain torch reads it
    assert doc["format"] == ck.FORMAT and doc["step"] == K
    cfg = saves[name]
    assert doc["meta"]["layout"]["dp"] == cfg.dp and doc["meta"]["layout"]["pp"] == cfg.pp
    assert doc["meta"]["global_batch"] == cfg.global_batch
    _, model, opt = reference_run(replace(cfg, steps=K))
    names = [n for n, _ in model.named_parameters()]
    assert list(doc["model"]) == names  # the full model's names, none missing or extra
    for n, p in model.named_parameters():
        assert doc["model"][n].shape == p.shape
        # float32 sums in another order: AdamW's m / sqrt(v) magnifies them where a gradient
        # is tiny (measured, VALIDATION.md: at most 5.6e-4 on a weight over 11 layout pairs,
        # 1.3e-3 relative on a moment, a handful of elements; the norm of the difference within
        # 1e-4 of the tensor's); an element in the wrong place differs by O(0.1), O(1) relative
        _close(doc["model"][n], p.detach(), 1e-3, n)
        st = opt.state[p]
        for k in ("exp_avg", "exp_avg_sq"):
            _close(doc[k][n], st[k], 1e-2 * float(st[k].abs().max()), f"{k} {n}")
    # not the initial weights: the file holds the trained state
    init = dict(build(cfg.model, cfg.seed).named_parameters())
    assert not torch.allclose(doc["model"]["output.weight"], init["output.weight"])


def _close(got: torch.Tensor, want: torch.Tensor, atol: float, what: str) -> None:
    assert float((got - want).abs().max()) <= atol, what
    assert float((got - want).norm()) <= 1e-4 * float(want.norm()), what


def test_a_dead_rank_is_restarted_from_the_latest_checkpoint(tmp_path):
    d = tmp_path / "ck"
    r = CliRunner().invoke(app, [
        "compile", "--dp", "2", "--zero", "1", "--global-batch", "4", "--micro-batch", "2",
        "--run", "--steps", "4", "--save", str(d), "--save-every", "1", "--max-restarts", "1",
        "--fail-at", "2:1", "--json",
    ])  # fmt: skip
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)["run"]
    (restart,) = run["restarts"]
    # rank 1 exited at the start of step 2 (0-based), after step-2.pt was whole (a barrier
    # follows each save): the second attempt runs steps 2 and 3
    assert restart["failed_at_step"] == 2
    assert restart["resumed_from_step"] == 2
    assert restart["resumed_from"].endswith("step-2.pt")
    assert "exit code 3" in restart["error"]
    assert run["first_step"] == 2
    whole = reference_losses(_cfg(make_spec(dp=2, zero=1, global_batch=4, micro_batch=2), 4))
    assert run["losses"] == pytest.approx(whole[2:], rel=LOSS_TOL, abs=LOSS_TOL)
    assert run["agrees"]
    assert sorted(p.name for p in d.iterdir()) == [f"step-{k}.pt" for k in (1, 2, 3, 4)]


def test_a_dead_rank_without_restarts_fails_the_run_in_one_line(tmp_path):
    r = CliRunner().invoke(app, [
        "compile", "--dp", "2", "--zero", "0", "--global-batch", "4", "--micro-batch", "2",
        "--run", "--steps", "2", "--save", str(tmp_path / "ck"), "--fail-at", "1",
    ])  # fmt: skip
    assert r.exit_code == 1
    err = r.stderr.strip()
    assert "\n" not in err and "failed at step 1" in err and "exit code 3" in err, err
    # step 0 ran, no save was due: nothing written
    assert not (tmp_path / "ck").exists() or not list((tmp_path / "ck").iterdir())


@pytest.fixture(scope="module")
def gpt_checkpoint(pairs):
    _, saved, _, _ = pairs
    return saved["dp2-zero0->tp2"]["saved"][0]


def _spec_file(tmp_path, text: str) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--save-every", "1"], "--save-every: got 1; expected --save DIR beside it"),
        (["--save", "{d}", "--save-every", "0"], "expected a positive number of steps"),
        (["--resume", "{missing}"], "expected a checkpoint file or a directory"),
        (["--resume", "{text}"], "expected a checkpoint written by --save"),
        (["--resume", "{notckpt}"], "expected a checkpoint of format hwtune-runtime-checkpoint/1"),
        (["--steps", "2", "--resume", "{gpt}"], "--steps: got 2; expected more than the 2 steps"),
        (["--moe", "--steps", "4", "--resume", "{gpt}"], "(n_experts 0 there, 8 here)"),
        (["--max-restarts", "-1"], "--max-restarts: got -1; expected 0 or more"),
        (["--max-restarts", "1"], "--max-restarts: got 1; expected --save DIR beside it"),
        (["--steps", "3", "--fail-at", "3"], "--fail-at: got '3'; expected a step the run runs"),
        (["--fail-at", "1:2"], "--fail-at: got '1:2'; expected a rank of the run's 2"),
        (["--fail-at", "x"], "--fail-at: got 'x'; expected STEP or STEP:RANK"),
        (["--steps", "4", "--resume", "{gpt}", "--fail-at", "1"], "expected a step the run runs, 2..3"),
    ],
)  # fmt: skip
def test_bad_checkpoint_options_exit_2_in_one_line(
    tmp_path, capsys, gpt_checkpoint, extra, message
):
    spec = _spec_file(tmp_path, "mesh: {dp: 2}\nzero: 0\nglobal_batch: 4\nmicro_batch: 2\n")
    (tmp_path / "t.pt").write_text("not a checkpoint\n")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "w.pt")
    subs = {"d": str(tmp_path / "d"), "missing": str(tmp_path / "nope.pt"),
            "text": str(tmp_path / "t.pt"), "notckpt": str(tmp_path / "w.pt"),
            "gpt": gpt_checkpoint}  # fmt: skip
    argv = ["--spec", spec, *(a.format(**subs) for a in extra)]
    assert runtime_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert message in err, err
    if err.startswith("error: --resume"):  # the file is named
        key = next(k for k in ("gpt", "missing", "text", "notckpt") if "{" + k + "}" in extra)
        assert subs[key] in err, err


def test_a_checkpoint_of_another_global_batch_is_refused(gpt_checkpoint):
    cfg = _cfg(make_spec(tp=2, global_batch=8, micro_batch=2), 4)
    with pytest.raises(HwtuneInputError, match=r"global_batch 4 there, 8 here"):
        with_checkpoints(cfg, resume=gpt_checkpoint)


def test_compile_refuses_checkpoint_options_without_run(tmp_path):
    r = CliRunner().invoke(app, ["compile", "--dp", "2", "--save", str(tmp_path)])
    assert r.exit_code == 2 and "--run beside it" in r.output


def test_resume_picks_the_latest_step_file_and_starts_fresh_without_one(tmp_path, gpt_checkpoint):
    import shutil

    cfg = _cfg(make_spec(dp=2, zero=0, global_batch=4, micro_batch=2), 4)
    d = tmp_path / "ck"
    # --save and --resume the same directory, not made yet: the first attempt under torchrun
    fresh = with_checkpoints(cfg, save=d, resume=d)
    assert fresh.resume is None and fresh.first_step == 0 and fresh.save_dir == str(d)
    d.mkdir()
    (d / ".step-3.pt.tmp123").write_text("a partial write")  # not a step file
    assert with_checkpoints(cfg, resume=d).resume is None  # an empty directory: from scratch
    shutil.copy(gpt_checkpoint, d / "step-2.pt")
    doc = torch.load(gpt_checkpoint, weights_only=True)
    doc["step"] = 1
    torch.save(doc, d / "step-1.pt")
    got = with_checkpoints(cfg, resume=d)
    assert got.resume == str(d / "step-2.pt") and got.first_step == 2  # 2 > 1, not by name order


def test_a_bad_id_map_is_caught_when_saving():
    """`assemble` refuses a checkpoint with elements no rank held (the test can fail: a layout
    the id map missed)."""
    cfg = _cfg(make_spec(dp=2, zero=0, global_batch=4, micro_batch=2), 2)
    model = build(cfg.model, 0)
    params = list(model.parameters())
    ck.mark_ids(model)
    w = torch.arange(sum(p.numel() for p in params), dtype=torch.float32)
    ids_of = ck.place(params, w)
    opt = torch.optim.AdamW(params, lr=0.0)  # states made, weights kept
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    part = ck.pieces(params, opt, ids_of)
    doc = ck.assemble([part], replace(cfg, steps=1), 1)
    assert torch.equal(doc["model"]["output.weight"].reshape(-1), w[-96 * 32 :])  # the last
    part["weights"].pop()  # the last parameter held by no rank
    with pytest.raises(RuntimeError, match="held by no rank"):
        ck.assemble([part], replace(cfg, steps=1), 1)


def _table() -> None:
    """VALIDATION.md's table: per pair, the resumed steps' largest |loss difference| from the
    uninterrupted single-process run, and the saved weights' from its weights after K steps."""
    import tempfile
    from pathlib import Path

    every = {**PAIRS, **EXTRA}
    with tempfile.TemporaryDirectory() as d:
        saves, saved, _, resumed = _save_and_resume(every, Path(d))
        print(f"| layout A (saves after {K} steps) -> B (runs steps {K}-{N - 1}) "
              "| max abs loss diff vs uninterrupted | saved weights vs single process (max abs) "
              "| the same, largest norm of a difference / the tensor's norm |")  # fmt: skip
        print("|---|---|---|---|")
        for n in every:
            whole = reference_losses(replace(saves[n], steps=N))
            diff = max(abs(a - b) for a, b in zip(resumed[n]["losses"], whole[K:], strict=True))
            doc = torch.load(saved[n]["saved"][0], weights_only=True)
            _, model, _ = reference_run(replace(saves[n], steps=K))
            params = list(model.named_parameters())
            w = max(float((doc["model"][k] - p.detach()).abs().max()) for k, p in params)
            rel = max(float((doc["model"][k] - p.detach()).norm() / p.detach().norm())
                      for k, p in params)  # fmt: skip
            print(f"| {n.replace('->', ' -> ')} | {diff:.1e} | {w:.1e} | {rel:.1e} |")


if __name__ == "__main__":  # python tests/parallel/test_runtime_checkpoint.py
    _table()
