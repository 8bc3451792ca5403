"""DDP and FSDP2 with 2 processes on gloo (CPU, 127.0.0.1 only): the compact optimizers train the
same weights as one process on the whole batch, keep replicas identical, resume bit-identically
from per-rank checkpoints, export and import full fp32 weights, and refuse gradient release."""

from __future__ import annotations

import gc
import io
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hwtune.errors import HwtuneInputError
from hwtune.optim import AdamW, export_fp32_state_dict, load_fp32_state_dict

STEPS, BATCH = 4, 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    ).to(torch.bfloat16)


def batch(step, rank=None):
    """The global batch of a step, or one rank's half of it."""
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(2 * BATCH, 64, generator=gen).to(torch.bfloat16)
    y = torch.randint(0, 10, (2 * BATCH,), generator=gen)
    if rank is None:
        return x, y
    return x[rank * BATCH : (rank + 1) * BATCH], y[rank * BATCH : (rank + 1) * BATCH]


def loss_fn(model, x, y):
    return torch.nn.functional.cross_entropy(model(x).float(), y)


def train(model, opt, steps, rank=None, start=0):
    for s in range(start, start + steps):
        loss_fn(model, *batch(s, rank)).backward()
        opt.step()
        opt.zero_grad()


def single_process_reference():
    model = make_model()
    train(model, AdamW(model.parameters(), lr=1e-2, compile=False), STEPS)
    return {k: v.float() for k, v in model.state_dict().items()}


def close_to(got, ref, start):
    for name, r in ref.items():
        moved = (r - start[name]).norm()
        assert (got[name] - r).norm() < 0.05 * moved, name


def init(rank, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)


def ddp_worker(rank, port):
    init(rank, port)
    try:
        start = {k: v.float() for k, v in make_model().state_dict().items()}
        ref = single_process_reference()
        model = torch.nn.parallel.DistributedDataParallel(make_model())
        with pytest.raises(HwtuneInputError, match="gradient_release.*2 processes"):
            AdamW(model.parameters(), gradient_release=True)
        opt = AdamW(model.parameters(), lr=1e-2, compile=False)
        train(model, opt, STEPS, rank)
        got = {k.removeprefix("module."): v.float() for k, v in model.state_dict().items()}
        close_to(got, ref, start)
        for v in got.values():  # replicas identical, bit for bit
            other = [torch.empty_like(v) for _ in range(2)]
            dist.all_gather(other, v)
            assert torch.equal(other[0], other[1])
        # release DDP's reducer (it holds gloo work) on both ranks before the group goes away:
        # tearing the group down under a live reducer can abort the process at exit
        del opt, model
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def fsdp_worker(rank, port):
    from torch.distributed.fsdp import fully_shard

    init(rank, port)
    try:
        start = {k: v.float() for k, v in make_model().state_dict().items()}
        ref = single_process_reference()

        def sharded():
            model = make_model()
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            return fully_shard(model)

        model = sharded()
        opt = AdamW(model.parameters(), lr=1e-2, compile=False)
        train(model, opt, STEPS, rank)
        full = export_fp32_state_dict(model, opt)  # gathered on every rank
        close_to(full, ref, start)
        # the master weights, not only their bf16 rounding: same on both ranks
        for v in full.values():
            other = [torch.empty_like(v) for _ in range(2)]
            dist.all_gather(other, v)
            assert torch.equal(other[0], other[1])
        # fp32 import into a fresh sharded model: each rank takes its shard
        fresh = sharded()
        fresh_opt = AdamW(fresh.parameters(), lr=1e-2, compile=False)
        load_fp32_state_dict(fresh, fresh_opt, full)
        again = export_fp32_state_dict(fresh, fresh_opt)
        assert all(torch.equal(again[k], full[k]) for k in full)
        # per-rank compressed checkpoint, then 2 more steps, against a fresh resumed copy
        buf = io.BytesIO()
        local = {k: v.to_local().clone() for k, v in model.state_dict().items()}
        torch.save({"opt": opt.state_dict(), "model": local}, buf)
        train(model, opt, 2, rank, start=STEPS)
        model2 = sharded()
        opt2 = AdamW(model2.parameters(), lr=1e-2, compile=False)
        buf.seek(0)
        ckpt = torch.load(buf, weights_only=True)
        with torch.no_grad():
            for k, v in model2.state_dict().items():
                v.to_local().copy_(ckpt["model"][k])
        opt2.load_state_dict(ckpt["opt"])
        train(model2, opt2, 2, rank, start=STEPS)
        for p, q in zip(model.parameters(), model2.parameters(), strict=True):
            assert torch.equal(p.to_local(), q.to_local())
            for key, value in opt.state[p].items():
                assert torch.equal(value, opt2.state[q][key]), key
        # as in ddp_worker: drop the sharded models (their hooks and gathered buffers) on both
        # ranks and meet at a barrier before the group goes away, so neither rank tears gloo
        # down while the other still has work in flight
        del opt, opt2, fresh_opt, model, model2, fresh, p, q, value
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("worker", [ddp_worker, fsdp_worker], ids=["ddp", "fsdp2"])
def test_two_processes_on_gloo(worker):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(free_port(),), nprocs=2, join=True)


def test_reference_is_deterministic():
    a, b = single_process_reference(), single_process_reference()
    assert all(torch.equal(a[k], b[k]) for k in a)
