"""One training step as ops: forward, backward (input- and weight-gradient ops), recomputation
of dropped activations, optimizer update.

Backward MAC counts follow the usual identities (e.g. Narayanan et al. SC'21, Sec. 5.1: the
backward pass costs twice the forward): every forward MAC of a conv/linear/bmm appears exactly
once in the input-gradient op (dX = dY * W^T) and once in the weight-gradient op
(dW = X^T * dY), over the same loop nest. The operands differ:

=========  =========================  ==========  ====================
phase      reads (role A, role B)     writes      reduction loops
=========  =========================  ==========  ====================
fwd        X {G,N,C}, W {G,K,C}       Y {G,N,K}   C, R
bwd_x      dY {G,N,K}, W {G,K,C}      dX {G,N,C}  K, R
bwd_w      X {G,N,C}, dY {G,N,K}      dW {G,K,C}  N
=========  =========================  ==========  ====================

For a bmm the "weight" is the second activation, and its gradient is an activation gradient.
Elementwise layers get one vector op that reads dY and the saved tensors and writes dX; an add
passes dY through to both inputs without an op. A gradient reaching a tensor a second time is
accumulated in place (one extra read). Recomputation (activation checkpointing, Chen et al.
2016) re-runs the forward producer of each dropped tensor just before its first backward use,
recursively through dropped inputs.

Optimizer update (one vector op per parameter tensor): SGD reads W and dW and writes W (2 ops
per element); Adam (Kingma & Ba 2015, Alg. 1) also reads and writes fp32 moments m and v
(8 bytes per parameter) and costs ~12 ops per element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hwtune.accel.workload import MAC_KINDS, Graph, Layer, LoopNest, Tensor
from hwtune.errors import HwtuneInputError

Phase = Literal["fwd", "bwd_x", "bwd_w", "bwd", "recompute", "opt"]
OPTIMIZERS = {"sgd": (0, 2), "adam": (8, 12)}  # state bytes per parameter, ops per parameter


@dataclass(frozen=True)
class Op:
    """A training op. MAC ops read ``reads[0]`` (role A) and ``reads[1]`` (role B) and write
    ``write``; ``accumulate`` means ``write`` already holds a partial gradient (read + write)."""

    name: str
    layer: str
    kind: str
    phase: Phase
    reads: tuple[str, ...]
    write: str | None
    loops: LoopNest | None = None
    vector_ops: int = 0
    accumulate: bool = False

    @property
    def macs(self) -> int:
        return self.loops.macs if self.loops else 0


@dataclass
class TrainingGraph:
    graph: Graph
    ops: list[Op]
    tensors: dict[str, Tensor]
    saved: set[str] = field(default_factory=set)
    dropped: frozenset[str] = frozenset()
    optimizer: str = "adam"

    def root(self, name: str) -> str:
        t = self.tensors[name]
        return t.alias_of or t.name

    @property
    def macs(self) -> int:
        return sum(o.macs for o in self.ops)

    def phase_macs(self, phase: str) -> int:
        return sum(o.macs for o in self.ops if o.phase == phase)


def saved_roots(g: Graph) -> set[str]:
    """Storage roots of the activations some backward op reads (checkpointing candidates)."""
    out = set()
    for x in g.layers:
        for t in g.saved_tensors(x):
            if g.tensors[t].kind == "activation":
                out.add(g.root(t))
    return out


def lower_training(
    g: Graph, optimizer: str = "adam", dropped: frozenset[str] | set[str] = frozenset()
) -> TrainingGraph:
    """The ops of one training step of ``g``; ``dropped`` activations (storage roots) are
    recomputed in the backward pass instead of kept."""
    if optimizer not in OPTIMIZERS:
        raise HwtuneInputError("optimizer", optimizer, "one of " + ", ".join(OPTIMIZERS))
    saved = saved_roots(g)
    bad = set(dropped) - saved
    if bad:
        raise HwtuneInputError("dropped", sorted(bad)[0], "an activation saved for backward")
    tensors = dict(g.tensors)
    ops: list[Op] = []
    for x in g.layers:
        ops.append(
            Op(f"{x.name}", x.name, x.kind, "fwd", _fwd_reads(x), x.output, x.loops, x.vector_ops)
        )

    producer = g.producer()
    grad: dict[str, str] = {}  # storage root of an activation -> storage root of its gradient
    recomputed: dict[str, str] = {}  # dropped root -> name of its recomputed tensor

    def new_tensor(name: str, like: str, kind: str = "activation") -> str:
        t = tensors[like]
        tensors[name] = Tensor(name, t.shape, t.elem_bytes, kind)  # type: ignore[arg-type]
        return name

    def avail(name: str) -> str:
        """The tensor to read for forward value ``name`` in the backward pass."""
        root = g.root(name)
        if tensors[root].kind != "activation" or (root in saved and root not in dropped):
            return name  # kept (or an input/weight)
        if root not in recomputed:
            x = producer[root]
            for t in x.inputs:  # recursively rebuild dropped inputs first
                avail(t)
            rn = new_tensor(f"{root}@re", root)
            recomputed[root] = rn
            ops.append(
                Op(
                    f"{x.name}@re",
                    x.name,
                    x.kind,
                    "recompute",
                    tuple(_re(t) for t in _fwd_reads(x)),
                    rn,
                    x.loops,
                    x.vector_ops,
                )
            )
        r = recomputed[root]
        if name == root:
            return r
        t = tensors[name]
        vn = f"{name}@re"
        if vn not in tensors:
            tensors[vn] = Tensor(vn, t.shape, t.elem_bytes, t.kind, r)
        return vn

    def _re(t: str) -> str:
        return avail(t) if tensors[t].kind == "activation" else t

    def grad_of(name: str) -> str:
        """Gradient tensor (view-shaped like ``name``) for forward tensor ``name``."""
        root = g.root(name)
        gr = grad[root]
        if name == root:
            return gr
        vn = f"d:{name}"
        if vn not in tensors:
            t = tensors[name]
            tensors[vn] = Tensor(
                vn, t.shape, t.elem_bytes, "activation", tensors[gr].alias_of or gr
            )
        return vn

    def contribute(name: str, op_name: str, layer: Layer, kind: str, reads: tuple[str, ...], phase: Phase,
                   loops: LoopNest | None, vops: int) -> None:  # fmt: skip
        root = g.root(name)
        acc = root in grad
        if not acc:
            grad[root] = new_tensor(f"d:{root}", root)
        ops.append(Op(op_name, layer.name, kind, phase, reads, grad_of(name), loops, vops, acc))

    last = g.layers[-1]
    wgrad: dict[str, str] = {}
    for x in reversed(g.layers):
        out_root = g.root(x.output)
        if x is last:
            saved_reads = tuple(_re(t) for t in g.saved_tensors(x))
            acts = [t for t in x.inputs if tensors[t].kind == "activation"]
            for t in acts:
                contribute(t, f"{x.name}.bwd", x, x.kind, saved_reads, "bwd", None, x.vector_ops)
            continue
        if out_root not in grad:
            continue  # output never used: no gradient flows back
        dy = grad_of(x.output)
        acts = [t for t in x.inputs if tensors[t].kind == "activation"]
        if x.kind in MAC_KINDS:
            w = x.weight if x.kind != "bmm" else x.inputs[1]
            a_in = x.inputs[0]
            if tensors[a_in].kind == "activation":
                wr = _re(w) if x.kind == "bmm" else w
                contribute(a_in, f"{x.name}.bwd_x", x, x.kind, (dy, wr), "bwd_x", x.loops, 0)
            if x.kind == "bmm":
                if tensors[w].kind == "activation":
                    contribute(
                        w, f"{x.name}.bwd_w", x, x.kind, (_re(a_in), dy), "bwd_w", x.loops, 0
                    )
            else:
                _weight_grad(
                    x,
                    dy,
                    _re(a_in) if tensors[a_in].kind == "activation" else a_in,
                    ops,
                    tensors,
                    wgrad,
                )
        elif x.kind == "add":
            for t in acts:
                r = g.root(t)
                if r not in grad:
                    grad[r] = grad[out_root]  # pass-through: share dY's storage
                else:
                    ops.append(
                        Op(
                            f"{x.name}.bwd.{t}",
                            x.name,
                            "add",
                            "bwd",
                            (grad_of(t), dy),
                            grad_of(t),
                            None,
                            tensors[t].elements,
                            True,
                        )
                    )
        elif x.kind == "embedding":
            if x.weight:
                _weight_grad(x, dy, x.inputs[0], ops, tensors, wgrad)
        else:
            saved_reads = tuple(_re(t) for t in g.saved_tensors(x))
            for t in acts:
                contribute(
                    t, f"{x.name}.bwd", x, x.kind, (dy, *saved_reads), "bwd", None, x.vector_ops
                )
            if x.weight:
                _weight_grad(x, dy, saved_reads[0] if saved_reads else dy, ops, tensors, wgrad)

    state_bytes, ops_per = OPTIMIZERS[optimizer]
    for w, dw in wgrad.items():
        t = tensors[w]
        reads: tuple[str, ...] = (w, dw)
        if state_bytes:
            st = f"{w}@adam"
            tensors[st] = Tensor(st, (t.elements, 2), 4, "weight")  # fp32 m and v
            reads = (w, dw, st)
        ops.append(
            Op(f"{w}.update", w, "optimizer", "opt", reads, w, None, ops_per * t.elements, False)
        )
    return TrainingGraph(g, ops, tensors, saved, frozenset(dropped), optimizer)


def _fwd_reads(x: Layer) -> tuple[str, ...]:
    if x.kind in MAC_KINDS:
        return (x.inputs[0], x.weight if x.kind != "bmm" else x.inputs[1])  # type: ignore[return-value]
    return (*x.inputs, *((x.weight,) if x.weight else ()))


def _weight_grad(
    x: Layer, dy: str, a_in: str, ops: list[Op], tensors: dict[str, Tensor], wgrad: dict[str, str]
) -> None:
    """dW for layer x (MAC op for conv/linear, a vector reduction for norm/embedding)."""
    w = x.weight
    assert w is not None
    acc = w in wgrad
    if not acc:
        t = tensors[w]
        wgrad[w] = f"d:{w}"
        tensors[wgrad[w]] = Tensor(wgrad[w], t.shape, t.elem_bytes, "weight")
    if x.kind in MAC_KINDS:
        ops.append(
            Op(f"{x.name}.bwd_w", x.name, x.kind, "bwd_w", (a_in, dy), wgrad[w], x.loops, 0, acc)
        )
    else:
        n = tensors[dy].elements
        ops.append(
            Op(f"{x.name}.bwd_w", x.name, x.kind, "bwd_w", (a_in, dy), wgrad[w], None, 2 * n, acc)
        )
