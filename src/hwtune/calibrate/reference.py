"""A reference training loop: a GPT-2-style model in torch, shapes from a config, random
weights, AdamW, optional data parallelism over N local gloo (CPU) or NCCL (GPU) processes, and
its measured step time (warm-up steps, then the median of N steps).

The model is what `to_model_spec` describes to the estimator, op for op: pre-LayerNorm blocks
(Radford et al. 2019, GPT-2 §2.3) with a fused QKV projection, causal
`scaled_dot_product_attention`, an output projection, a 4h GeLU MLP, learned positions, a final
LayerNorm and an LM head tied to the token embedding (nanoGPT's layout, bias-free linears);
loss is softmax cross-entropy; the optimizer is AdamW with the fused kernel (one pass over
weights, gradients and both moments, as `train.estimator.OPTIMIZER_BYTES_MOVED` assumes);
data parallelism is `DistributedDataParallel` with gradients as bucket views.

Run it as ``python -m hwtune.calibrate.reference --layers 4 --hidden 256 ...`` (``--json`` for
one JSON document); `predict` gives the estimator's step time for the same configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hwtune.calibrate.harness import cpu_count, resolve_clock
from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec


@dataclass(frozen=True)
class RefConfig:
    """Shapes and run settings of the reference loop."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    seq: int = 256
    micro_batch: int = 4
    vocab: int = 8192
    processes: int = 1
    threads: int | None = None  # torch threads per process; None: usable CPUs / processes
    steps: int = 5
    warmup: int = 2
    seed: int = 0
    clock: str = "auto"

    def validate(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "micro_batch", "vocab", "processes",
                     "steps"):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise HwtuneInputError(name, v, "a positive integer")
        if self.warmup < 0:
            raise HwtuneInputError("warmup", self.warmup, "a number of steps >= 0")
        if self.hidden % self.heads:
            raise HwtuneInputError("heads", self.heads, f"a divisor of hidden={self.hidden}")
        if self.threads is not None and self.threads < 1:
            raise HwtuneInputError("threads", self.threads, "a number of threads >= 1")
        if self.clock not in ("auto", "wall", "cpu"):
            raise HwtuneInputError("clock", self.clock, "auto, wall or cpu")

    @property
    def threads_per_process(self) -> int:
        return self.threads or max(1, cpu_count() // self.processes)


def to_model_spec(cfg: RefConfig) -> ModelSpec:
    """The `ModelSpec` of the reference model (what `model.lowering` lowers into ops)."""
    return ModelSpec(
        name=f"ref-gpt2-L{cfg.layers}-h{cfg.hidden}",
        family="gpt2",
        n_layers=cfg.layers,
        d_model=cfg.hidden,
        n_heads=cfg.heads,
        ffn_hidden=4 * cfg.hidden,
        ffn_act="gelu",
        vocab=cfg.vocab,
        tied_embeddings=True,
        norm="layernorm",
        pos_emb="learned",
        max_position=cfg.seq,
        source="hwtune.calibrate.reference (GPT-2 layout, bias-free linears)",
    )


# ---- the model ---------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden, bias=False)
        self.out = nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: RefConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg.hidden, cfg.heads) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied (GPT-2)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---- the loop ----------------------------------------------------------------------------------
@dataclass
class RefResult:
    """Measured step times (seconds) of one configuration; ``median_s`` by ``clock``."""

    config: dict
    clock: str
    median_s: float
    wall_median_s: float
    cpu_median_s: float | None
    steps_wall_s: list[float] = field(default_factory=list)
    steps_cpu_s: list[float] = field(default_factory=list)
    params: int = 0
    tokens_per_step: int = 0
    load_average: list[float] = field(default_factory=list)
    device: str = "cpu"

    def to_dict(self) -> dict:
        return asdict(self)


def _train(cfg: RefConfig, rank: int, world: int, dev: torch.device) -> tuple[list, list, int]:
    """(wall, cpu) seconds of each timed step on this rank, and the parameter count."""
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank (DDP broadcasts too)
    model = GPT(cfg).to(dev)
    n_params = count_params(model)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, gradient_as_bucket_view=True)
    fused = dev.type in ("cpu", "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=fused)
    g = torch.Generator(device="cpu").manual_seed(cfg.seed + 1000 * rank)
    shape = (cfg.micro_batch, cfg.seq)
    x = torch.randint(0, cfg.vocab, shape, generator=g).to(dev)
    y = torch.randint(0, cfg.vocab, shape, generator=g).to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    walls, cpus = [], []
    for i in range(cfg.warmup + cfg.steps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        sync()
        if i >= cfg.warmup:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    return walls, cpus, n_params


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_reference(cfg: RefConfig) -> RefResult:
    """Measure the configuration: in this process for one process, else in ``processes``
    local ranks on 127.0.0.1 (started the way torchrun's local launcher starts them)."""
    cfg.validate()
    threads = cfg.threads_per_process
    gpu = torch.cuda.is_available()
    try:
        clock = resolve_clock(cfg.clock, "cuda" if gpu else "cpu", threads)
    except ValueError as e:
        raise HwtuneInputError("clock", cfg.clock, str(e)) from None
    if cfg.processes == 1:
        torch.set_num_threads(threads)
        dev = torch.device("cuda") if gpu else torch.device("cpu")
        load0 = _load()
        walls, cpus, n_params = _train(cfg, 0, 1, dev)
        return _result(cfg, clock, [walls], [cpus], n_params, load0, dev.type)
    with tempfile.TemporaryDirectory(prefix="hwtune-ref-") as tmp:
        out = Path(tmp) / "result.json"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for r in range(cfg.processes):
            env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                   "WORLD_SIZE": str(cfg.processes), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads),
                   "PYTHONWARNINGS": "ignore"}  # fmt: skip
            args = {**asdict(cfg), "threads": threads, "clock": clock}
            cmd = [sys.executable, "-m", "hwtune.calibrate.reference", "--worker", str(out),
                   "--config", json.dumps(args)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
        errs = [p.communicate()[1] for p in procs]
        if not out.exists():
            tail = [ln for e in errs for ln in (e or "").splitlines() if ln.strip()][-1:]
            raise RuntimeError(f"reference ranks failed: {tail[0] if tail else 'no output'}")
        return RefResult(**json.loads(out.read_text()))


def _result(
    cfg: RefConfig,
    clock: str,
    walls: list[list[float]],
    cpus: list[list[float]],
    n_params: int,
    load: list[float],
    device: str,
) -> RefResult:
    """The slowest rank's medians (data-parallel steps wait for the slowest rank)."""
    wall = max(statistics.median(w) for w in walls)
    cpu = max(statistics.median(c) for c in cpus)
    return RefResult(
        config={**asdict(cfg), "threads": cfg.threads_per_process},
        clock=clock,
        median_s=cpu if clock == "cpu" else wall,
        wall_median_s=wall,
        cpu_median_s=cpu,
        steps_wall_s=walls[0],
        steps_cpu_s=cpus[0],
        params=n_params,
        tokens_per_step=cfg.micro_batch * cfg.seq * cfg.processes,
        load_average=load,
        device=device,
    )


def _worker(out: str, config: str) -> int:
    """One data-parallel rank (env RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, as torchrun sets)."""
    import torch.distributed as dist

    cfg = RefConfig(**json.loads(config))
    torch.set_num_threads(cfg.threads_per_process)
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if gpu else "gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    load0 = _load()
    try:
        walls, cpus, n_params = _train(cfg, rank, world, dev)
        every: list = [None] * world
        dist.all_gather_object(every, (walls, cpus))
        if rank == 0:
            res = _result(cfg, cfg.clock, [w for w, _ in every], [c for _, c in every], n_params,
                          load0, dev.type)  # fmt: skip
            tmp = Path(out).with_suffix(".part")
            tmp.write_text(json.dumps(res.to_dict()))
            tmp.replace(out)
    finally:
        dist.destroy_process_group()
    return 0


# ---- the estimator's view ----------------------------------------------------------------------
def predict(cfg: RefConfig, device: object, overlap_grad_reduce: bool = False) -> float:
    """The estimator's step time (seconds) for ``cfg`` on ``device``; see `predict_estimate`."""
    return predict_estimate(cfg, device, overlap_grad_reduce).step_time_s


def predict_estimate(cfg: RefConfig, device: object, overlap_grad_reduce: bool = False) -> Any:
    """The estimator's `Estimate` for ``cfg`` on ``device`` (a Device or a profile path).

    fp32 throughout; flash attention (torch's CPU and CUDA SDPA kernels are fused and never
    write the score matrix; a kernel that computes masked blocks anyway shows it as a lower
    measured attention rate); AdamW as one fused pass (``adam``); data parallelism as DDP
    (replicated states: ZeRO 0). ``overlap_grad_reduce`` is off by default: on a CPU the
    gloo all-reduce sums and copies on the same cores that run the backward, so nothing is
    hidden (on GPUs NCCL runs on its own SMs and DDP overlaps it with the backward)."""
    from hwtune.train.estimator import estimate

    est = estimate(
        to_model_spec(cfg), gpu=device, gpus=cfg.processes, dp=cfg.processes,
        precision="fp32", micro_batch=cfg.micro_batch, seq=cfg.seq, zero=0,
        flash_attention=True, optimizer="adam", overlap_grad_reduce=overlap_grad_reduce,
    )  # fmt: skip
    return est


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="hwtune reference training loop (GPT-2 style)")
    d = RefConfig()
    for f in ("layers", "hidden", "heads", "seq", "micro_batch", "vocab", "processes", "steps",
              "warmup", "seed"):  # fmt: skip
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", default="auto", choices=("auto", "wall", "cpu"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a.worker, a.config)
    cfg = RefConfig(layers=a.layers, hidden=a.hidden, heads=a.heads, seq=a.seq,
                    micro_batch=a.micro_batch, vocab=a.vocab, processes=a.processes,
                    threads=a.threads, steps=a.steps, warmup=a.warmup, seed=a.seed,
                    clock=a.clock)  # fmt: skip
    try:
        res = run_reference(cfg)
    except HwtuneInputError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if a.json:
        print(json.dumps(res.to_dict(), indent=1))
    else:
        print(f"{to_model_spec(cfg).name} x{cfg.processes} proc: median step {res.median_s:.4f} s "
              f"({res.clock} clock; wall {res.wall_median_s:.4f} s), {res.params:,} params")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
