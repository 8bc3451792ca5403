"""Bidirectional DualPipe at run time (DeepSeek-V3 technical report §3.2.1; deepseek-ai/DualPipe).

Two pipelines run in opposite directions over the same p ranks: direction 0 runs model chunk c
on rank c (stage c), direction 1 runs chunk c on rank p-1-c (stage p+c); each direction takes
half of the micro-batches. Every rank therefore holds two chunks (c and p-1-c), and every chunk
exists twice (once per direction): after the step the two copies' gradients are summed, so both
copies take the same optimizer step and stay equal (DualPipe's "2x parameters").

torch.distributed.pipelining has no bidirectional schedule (its runtime drives one chain of
stages, stage i feeding stage i+1, with stage 0 reading the input and the last stage computing
the loss; DualPipeV is the V-shaped single chain it can run), so this executor walks our compiled
per-rank order by hand: ``F`` receives its input from the previous stage's rank (or takes the
micro-batch), runs the chunk and posts a non-blocking send of its output; ``B`` receives the
output gradient, runs the chunk's backward and sends the input gradient back; ``I`` / ``W`` are
the input-gradient and weight-gradient halves (``torch.autograd.backward`` with ``inputs=``
restricted to the stage input, then to the parameters, Qi et al. ICLR'24 §2); an overlapped
pair runs its forward and its backward in turn; ``R`` is folded into the backward (activation
checkpointing). Sends are posted as soon as their tensor exists and a rank blocks only on a
receive; since the compiler's checker refuses an order whose dependencies form a cycle
(`hwtune.parallel.ir.check`), every receive's send has been posted and the run cannot deadlock.
Messages carry a tag per (kind, direction, micro-batch), so two in flight between the same pair
of ranks cannot be confused.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from hwtune.parallel.actions import Action
from hwtune.parallel.runtime.pipeline import split_stage


def stage_rank(pp: int, stage: int) -> int:
    """Rank of stage ``stage`` (direction 0: stages 0..p-1 on ranks 0..p-1; direction 1:
    stages p..2p-1 on ranks p-1..0)."""
    return stage if stage < pp else 2 * pp - 1 - stage


class DualPipeRunner:
    """One pipeline rank of a bidirectional DualPipe step."""

    def __init__(
        self,
        model: nn.Module,
        stage_layers: list[list[int]],
        rank: int,
        group: dist.ProcessGroup,
        order: list[Action],
        n_micro: int,
        loss_fn: Callable,
    ) -> None:
        self.pp = len(stage_layers)
        self.rank, self.group, self.order = rank, group, order
        self.n_micro, self.loss_fn = n_micro, loss_fn
        p = self.pp
        self.mods: dict[int, nn.Module] = {}
        for s in (rank, 2 * p - 1 - rank):
            c = s % p
            self.mods[s] = split_stage(model, stage_layers[c], c == 0, c == p - 1)
        self.d_model = model.config.d_model

    def modules(self) -> list[nn.Module]:
        return [self.mods[s] for s in sorted(self.mods)]

    def _tag(self, kind: int, stage: int, mb: int) -> int:
        return (kind * 2 + stage // self.pp) * self.n_micro + mb

    def step(self, x: torch.Tensor, y: torch.Tensor, micro_batch: int) -> torch.Tensor:
        """Run this rank's order on the step's batch (``x``, ``y``: this data-parallel rank's
        sequences); returns the sum of the micro-batch losses computed here (each / n_micro)."""
        p, m = self.pp, self.n_micro
        saved: dict[tuple[int, int], tuple[torch.Tensor | None, torch.Tensor]] = {}
        grads: dict[tuple[int, int], torch.Tensor | None] = {}
        sends: list[tuple[dist.Work, torch.Tensor]] = []
        dev = x.device  # receive buffers and the loss on this rank's device (CPU or its GPU)
        total = torch.zeros((), device=dev)
        shape = (micro_batch, x.shape[1], self.d_model)

        def send(t: torch.Tensor, stage: int, kind: int, mb: int) -> None:
            t = t.detach().contiguous()
            peer = stage_rank(p, stage)
            w = dist.isend(t, group=self.group, group_dst=peer, tag=self._tag(kind, stage, mb))
            sends.append((w, t))

        def recv(stage: int, kind: int, mb: int) -> torch.Tensor:
            buf = torch.empty(shape, device=dev)
            peer = stage_rank(p, stage)
            dist.recv(buf, group=self.group, group_src=peer, tag=self._tag(kind, stage, mb))
            return buf

        def forward(s: int, mb: int) -> None:
            nonlocal total
            c = s % p
            sl = slice(mb * micro_batch, (mb + 1) * micro_batch)
            inp = None
            if c == 0:
                out = self.mods[s](x[sl])
            else:
                inp = recv(s - 1, 0, mb).requires_grad_()
                out = self.mods[s](inp)
            if c == p - 1:
                out = self.loss_fn(out, y[sl]) / m
                total = total + out.detach()
            else:
                send(out, s + 1, 0, mb)
            saved[(s, mb)] = (inp, out)

        def out_grad(s: int, mb: int) -> torch.Tensor | None:
            if (s, mb) not in grads:
                grads[(s, mb)] = None if s % p == p - 1 else recv(s + 1, 1, mb)
            return grads[(s, mb)]

        def backward(s: int, mb: int, kind: str) -> None:
            inp, out = saved[(s, mb)]
            g = out_grad(s, mb)
            params = [q for q in self.mods[s].parameters() if q.requires_grad]
            if kind == "B":
                torch.autograd.backward(out, g)
            elif kind == "I":
                if inp is not None:
                    torch.autograd.backward(out, g, inputs=[inp], retain_graph=True)
            else:  # W: the weight gradients, after the I of the same micro-batch
                torch.autograd.backward(out, g, inputs=params)
            if kind in ("B", "I") and inp is not None:
                send(inp.grad, s - 1, 1, mb)
            if kind in ("B", "W"):
                del saved[(s, mb)]
                grads.pop((s, mb), None)

        for a in self.order:
            for part in a.parts:
                if part.kind == "F":
                    forward(part.stage, part.mb)
                elif part.kind in ("B", "I", "W"):
                    backward(part.stage, part.mb, part.kind)
        for w, _ in sends:
            w.wait()
        self._sum_copies()
        return total

    def _sum_copies(self) -> None:
        """Sum the gradients of the two copies of every chunk (one all-reduce over the pipeline
        group of a buffer laid out by chunk: each rank fills the chunks it holds)."""
        p = self.pp
        # every rank must agree on each chunk's size: the parameter counts, exchanged (a chunk
        # this rank does not hold counts 0)
        dev = next(self.mods[min(self.mods)].parameters()).device
        n = torch.zeros(p, dtype=torch.int64, device=dev)
        for s, mod in self.mods.items():
            n[s % p] = sum(q.numel() for q in mod.parameters())
        dist.all_reduce(n, op=dist.ReduceOp.MAX, group=self.group)
        offs = [0] + torch.cumsum(n, 0).tolist()
        buf = torch.zeros(int(offs[-1]), device=dev)
        for s, mod in self.mods.items():
            o = int(offs[s % p])
            for q in mod.parameters():
                if q.grad is not None:
                    buf[o : o + q.numel()] += q.grad.reshape(-1)
                o += q.numel()
        dist.all_reduce(buf, group=self.group)
        for s, mod in self.mods.items():
            o = int(offs[s % p])
            for q in mod.parameters():
                q.grad = buf[o : o + q.numel()].view_as(q).clone()
                o += q.numel()


def messages(order: list[Action], rank: int, pp: int) -> tuple[list[tuple], list[tuple]]:
    """The point-to-point messages ``DualPipeRunner.step`` posts on pipeline rank ``rank``, in
    posting order: (sends, receives), each ``(peer, kind, sender stage, mb)`` (kind 0: an
    activation, 1: an input gradient)."""
    sends: list[tuple] = []
    recvs: list[tuple] = []
    got: set[tuple[int, int]] = set()
    for a in order:
        for part in a.parts:
            s, mb, c = part.stage, part.mb, part.stage % pp
            if part.kind == "F":
                if c != 0:
                    recvs.append((stage_rank(pp, s - 1), 0, s - 1, mb))
                if c != pp - 1:
                    sends.append((stage_rank(pp, s + 1), 0, s, mb))
            elif part.kind in ("B", "I", "W"):
                if c != pp - 1 and (s, mb) not in got:
                    got.add((s, mb))
                    recvs.append((stage_rank(pp, s + 1), 1, s + 1, mb))
                if part.kind in ("B", "I") and c != 0:
                    sends.append((stage_rank(pp, s - 1), 1, s, mb))
            if part.kind in ("B", "W"):
                got.discard((s, mb))
    return sends, recvs


def in_posting_order(orders: dict[int, list[Action]], pp: int) -> bool:
    """Whether every receive of the compiled orders matches, between each pair of ranks, the
    send posted in the same position: what NCCL needs, whose point-to-point calls ignore the
    tag and pair a rank's sends to a peer with the peer's receives in the order posted (gloo
    matches by tag, so any order runs on CPU)."""
    sent: dict[tuple[int, int], list[tuple]] = {}
    received: dict[tuple[int, int], list[tuple]] = {}
    for r in range(pp):
        sends, recvs = messages(orders[r], r, pp)
        for peer, *msg in sends:
            sent.setdefault((r, peer), []).append(tuple(msg))
        for peer, *msg in recvs:
            received.setdefault((peer, r), []).append(tuple(msg))
    return sent == received
