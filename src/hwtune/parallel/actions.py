"""Pipeline actions: the words of a per-rank schedule, in torch.distributed.pipelining's notation.

An action is ``<stage><kind><micro-batch>``: ``2F0`` (forward of stage 2, micro-batch 0), ``2B0``
(full backward), ``2I0`` / ``2W0`` (input-gradient and weight-gradient halves of the backward,
Qi et al. ICLR'24 §2), ``2R0`` (recompute the forward before its backward; our extension, folded
into the backward when lowered to torch), ``2SEND_F0`` / ``3RECV_F0`` / ``SEND_B`` / ``RECV_B``
(point-to-point), and ``(0F4;3B1)OVERLAP_F_B`` (a forward and a backward of two micro-batches run
as one overlapped unit, DeepSeek-V3 §3.2.1). The format is that of torch's ``_Action.__repr__``
(torch/distributed/pipelining/schedules.py), so our orders load into its schedule runtime.
Plain Python: no torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMPUTE_KINDS = ("F", "B", "I", "W", "R")
COMM_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
_RE = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W|R)(\d+)$")


@dataclass(frozen=True, slots=True)
class Action:
    """One action of a rank's order; ``sub`` holds the parts of an overlapped pair."""

    stage: int
    kind: str
    mb: int
    sub: tuple[Action, ...] = ()

    def __str__(self) -> str:
        if self.sub:
            return "(" + ";".join(str(a) for a in self.sub) + ")OVERLAP_F_B"
        return f"{self.stage}{self.kind}{self.mb}"

    @property
    def parts(self) -> tuple[Action, ...]:
        """The compute actions this action runs (itself, or an overlapped pair's two halves)."""
        return self.sub or (self,)

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS


def overlap(a: Action, b: Action) -> Action:
    """A forward and a backward run as one overlapped unit (DualPipe's F&B chunk pair)."""
    return Action(-1, "OVERLAP_F_B", -1, (a, b))


def parse_action(text: str, where: str = "action") -> Action:
    """Parse ``2F0`` / ``(0F4;3B1)OVERLAP_F_B``; one-line error naming ``where`` otherwise."""
    from hwtune.errors import HwtuneInputError

    s = str(text).strip()
    if s.startswith("("):
        inner, _, tail = s[1:].partition(")")
        if tail not in ("OVERLAP_F_B", ""):
            raise HwtuneInputError(where, s, "an overlapped pair written (0F4;3B1)OVERLAP_F_B")
        parts = tuple(parse_action(p, where) for p in inner.split(";") if p.strip())
        if len(parts) != 2 or any(p.kind not in COMPUTE_KINDS for p in parts):
            raise HwtuneInputError(where, s, "two compute actions inside an overlapped pair")
        return overlap(*parts)
    m = _RE.match(s)
    if not m:
        raise HwtuneInputError(
            where,
            s,
            "an action <stage><F|B|I|W|R|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>, e.g. 2F0",
        )
    return Action(int(m.group(1)), m.group(2), int(m.group(3)))


def format_orders(orders: dict[int, list[Action]]) -> str:
    """A step x rank grid of the orders (the layout of torch's ``_format_pipeline_order``)."""
    n = max((len(v) for v in orders.values()), default=0)
    ranks = sorted(orders)
    cols = [[str(a) for a in orders[r]] + [""] * (n - len(orders[r])) for r in ranks]
    width = [
        max([len(f"rank {r}")] + [len(c) for c in col]) for r, col in zip(ranks, cols, strict=False)
    ]
    lines = [
        "step  " + " ".join(f"{'rank ' + str(r):<{w}}" for r, w in zip(ranks, width, strict=False))
    ]
    for i in range(n):
        lines.append(
            f"{i:<5} " + " ".join(f"{col[i]:<{w}}" for col, w in zip(cols, width, strict=False))
        )
    return "\n".join(lines) + "\n"
