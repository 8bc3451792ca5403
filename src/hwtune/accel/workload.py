"""Forward layer graphs: tensors and layers with exact loop bounds.

Every MAC layer is a loop nest over five generic dimensions (after Stream/ZigZag's layer
representation, Mei et al. IEEE TC 2021, Sec. III-B, reduced to the loops that matter here):

- ``G``: independent groups (conv groups, attention heads x batch); every operand depends on it
- ``N``: output positions: batch x output rows x output cols (conv) or tokens (linear)
- ``K``: output channels / features
- ``C``: input channels / features per group (reduction)
- ``R``: filter taps FY x FX (reduction; 1 for linear layers)

MACs = G * N * K * C * R. Tensors carry their exact shape and element size; a view
(``alias_of``) shares its parent's storage but has its own shape (the bytes an op reads).
Vector (elementwise) layers have no MACs and count ``vector_ops`` element operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from hwtune.errors import HwtuneInputError

TensorKind = Literal["input", "activation", "weight"]

MAC_KINDS = ("conv", "linear", "bmm")
VECTOR_KINDS = (
    "relu", "gelu", "add", "scale", "mask", "batchnorm", "layernorm", "softmax", "maxpool",
    "avgpool", "embedding", "loss", "unsupported",
)  # fmt: skip
KINDS = MAC_KINDS + VECTOR_KINDS

# Vector operations per output element of each elementwise kind (order-of-magnitude counts:
# compare/select, exp + sum + divide, mean/var/normalize/affine; used for compute cycles only).
VECTOR_OPS_PER_ELEMENT = {
    "relu": 1, "gelu": 8, "add": 1, "scale": 1, "mask": 1, "batchnorm": 5, "layernorm": 7,
    "softmax": 4, "maxpool": 9, "avgpool": 1, "embedding": 1, "loss": 5, "unsupported": 0,
}  # fmt: skip

# What each kind keeps for its backward pass (PyTorch autograd's saved tensors):
# "in" = its first activation input, "out" = its output, "all" = all activation inputs.
SAVED_FOR_BACKWARD = {
    "conv": "in", "linear": "in", "bmm": "all", "relu": "out", "gelu": "in", "add": "none",
    "scale": "none", "mask": "none", "batchnorm": "in", "layernorm": "in", "softmax": "out",
    "maxpool": "in", "avgpool": "none", "embedding": "none", "loss": "in", "unsupported": "none",
}  # fmt: skip


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    elem_bytes: int
    kind: TensorKind
    alias_of: str | None = None

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * self.elem_bytes


@dataclass(frozen=True)
class LoopNest:
    G: int
    N: int
    K: int
    C: int
    R: int

    @property
    def macs(self) -> int:
        return self.G * self.N * self.K * self.C * self.R


@dataclass(frozen=True)
class Layer:
    """One forward op. ``inputs`` are activation/input tensors (in order), ``weight`` the
    trainable parameter tensor (None if none; bias and norm affine parameters are part of it)."""

    name: str
    kind: str
    inputs: tuple[str, ...]
    output: str
    weight: str | None = None
    loops: LoopNest | None = None
    vector_ops: int = 0
    source: str = ""  # the op it came from in an imported graph

    @property
    def macs(self) -> int:
        return self.loops.macs if self.loops else 0


@dataclass
class Graph:
    """A forward graph in topological order."""

    name: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    _layer_names: set[str] = field(default_factory=set, repr=False)
    _roots_produced: set[str] = field(default_factory=set, repr=False)

    # ---- building -------------------------------------------------------------------------
    def tensor(
        self,
        name: str,
        shape: tuple[int, ...],
        kind: TensorKind,
        elem_bytes: int = 2,
        alias_of: str | None = None,
    ) -> str:
        if name in self.tensors:
            raise HwtuneInputError("tensor", name, "a unique tensor name")
        if any(int(d) <= 0 for d in shape):
            raise HwtuneInputError(f"tensor {name}.shape", shape, "positive dimensions")
        root = self.root(alias_of) if alias_of else None
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), elem_bytes, kind, root)
        return name

    def add(self, layer: Layer) -> Layer:
        if layer.kind not in KINDS:
            raise HwtuneInputError(
                f"layer {layer.name}.kind", layer.kind, "one of " + ", ".join(KINDS)
            )
        if layer.name in self._layer_names:
            raise HwtuneInputError("layer", layer.name, "a unique layer name")
        for t in (*layer.inputs, layer.output, *([layer.weight] if layer.weight else [])):
            if t not in self.tensors:
                raise HwtuneInputError(f"layer {layer.name}", t, "a tensor defined before use")
        for t in layer.inputs:
            if self.tensors[t].kind == "activation" and self.root(t) not in self._roots_produced:
                raise HwtuneInputError(
                    f"layer {layer.name}.inputs", t, "an activation produced earlier"
                )
        self.layers.append(layer)
        self._layer_names.add(layer.name)
        self._roots_produced.add(self.root(layer.output))
        return layer

    def root(self, name: str) -> str:
        t = self.tensors[name]
        return t.alias_of or t.name

    # ---- queries --------------------------------------------------------------------------
    @property
    def macs(self) -> int:
        return sum(x.macs for x in self.layers)

    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values() if t.kind == "weight")

    def weight_elements(self) -> int:
        return sum(t.elements for t in self.tensors.values() if t.kind == "weight")

    def producer(self) -> dict[str, Layer]:
        """Storage root -> the layer that writes it."""
        return {self.root(x.output): x for x in self.layers}

    def consumers(self) -> dict[str, list[Layer]]:
        """Storage root -> layers that read it (as activation input)."""
        out: dict[str, list[Layer]] = {}
        for x in self.layers:
            for t in x.inputs:
                out.setdefault(self.root(t), []).append(x)
        return out

    def saved_tensors(self, layer: Layer) -> tuple[str, ...]:
        """Activation tensors `layer`'s backward pass reads (see ``SAVED_FOR_BACKWARD``)."""
        rule = SAVED_FOR_BACKWARD[layer.kind]
        acts = [t for t in layer.inputs if self.tensors[t].kind in ("activation", "input")]
        if rule == "in":
            return tuple(acts[:1])
        if rule == "all":
            return tuple(acts)
        if rule == "out":
            return (layer.output,)
        return ()

    def is_chain(self) -> bool:
        """Each layer reads only the previous layer's output (and the graph input)."""
        prev = None
        for x in self.layers:
            acts = [self.root(t) for t in x.inputs if self.tensors[t].kind == "activation"]
            if prev is None:
                if acts:
                    return False
            elif acts != [prev]:
                return False
            prev = self.root(x.output)
        cons = self.consumers()
        return all(len(v) <= 1 for v in cons.values())


# ---- layer builders (exact shapes) -----------------------------------------------------------


def conv2d(
    g: Graph,
    name: str,
    x: str,
    out_channels: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    bias: bool = False,
) -> str:
    """2-D convolution on an NCHW tensor; output size per PyTorch's Conv2d formula
    (floor((H + 2p - k) / s) + 1)."""
    b, c, h, w = g.tensors[x].shape
    if c % groups or out_channels % groups:
        raise HwtuneInputError(
            f"layer {name}.groups", groups, f"a divisor of {c} and {out_channels}"
        )
    oh = (h + 2 * padding - kernel) // stride + 1
    ow = (w + 2 * padding - kernel) // stride + 1
    if oh <= 0 or ow <= 0:
        raise HwtuneInputError(
            f"layer {name}.kernel",
            kernel,
            f"a kernel that fits the {h}x{w} input padded by "
            f"{padding} ({h + 2 * padding}x{w + 2 * padding})",
        )
    eb = g.tensors[x].elem_bytes
    n_w = out_channels * (c // groups) * kernel * kernel + (out_channels if bias else 0)
    wt = g.tensor(f"{name}.weight", (n_w,), "weight", eb)  # bias joins the layer's parameters
    y = g.tensor(name, (b, out_channels, oh, ow), "activation", eb)
    loops = LoopNest(
        G=groups, N=b * oh * ow, K=out_channels // groups, C=c // groups, R=kernel * kernel
    )
    g.add(Layer(name, "conv", (x,), y, wt, loops))
    return y


def linear(
    g: Graph, name: str, x: str, out_features: int, bias: bool = True, weight: str | None = None
) -> str:
    """y = x W^T (+ b) over the last dimension; ``weight`` reuses an existing (tied) tensor."""
    shape = g.tensors[x].shape
    fin = shape[-1]
    tokens = math.prod(shape[:-1])
    eb = g.tensors[x].elem_bytes
    if weight is None:
        n = out_features * fin + (out_features if bias else 0)
        weight = g.tensor(f"{name}.weight", (n,) if bias else (out_features, fin), "weight", eb)
    y = g.tensor(name, (*shape[:-1], out_features), "activation", eb)
    g.add(Layer(name, "linear", (x,), y, weight, LoopNest(1, tokens, out_features, fin, 1)))
    return y


def bmm(g: Graph, name: str, a: str, b: str) -> str:
    """Batched matmul of two activations: a (..., M, C) x b (..., C, K) -> (..., M, K)."""
    sa, sb = g.tensors[a].shape, g.tensors[b].shape
    if sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
        raise HwtuneInputError(f"layer {name}", (sa, sb), "shapes (..., M, C) and (..., C, K)")
    groups = math.prod(sa[:-2])
    y = g.tensor(name, (*sa[:-1], sb[-1]), "activation", g.tensors[a].elem_bytes)
    g.add(Layer(name, "bmm", (a, b), y, None, LoopNest(groups, sa[-2], sb[-1], sa[-1], 1)))
    return y


def view(g: Graph, name: str, x: str, shape: tuple[int, ...]) -> str:
    """A reshape/transpose/slice: a new shape over (part of) x's storage, no op."""
    src = g.tensors[x]
    if math.prod(shape) > src.elements:
        raise HwtuneInputError(f"view {name}.shape", shape, f"at most {src.elements} elements")
    return g.tensor(name, shape, src.kind, src.elem_bytes, alias_of=x)


def vector(
    g: Graph,
    name: str,
    kind: str,
    inputs: tuple[str, ...],
    out_shape: tuple[int, ...] | None = None,
    weight_elems: int = 0,
    source: str = "",
) -> str:
    """An elementwise/normalization/pooling layer; ``weight_elems`` affine parameters."""
    first = g.tensors[inputs[0]]
    shape = out_shape or first.shape
    wt = (
        g.tensor(f"{name}.weight", (weight_elems,), "weight", first.elem_bytes)
        if weight_elems
        else None
    )
    y = g.tensor(name, shape, "activation", first.elem_bytes)
    ops = math.prod(shape) * VECTOR_OPS_PER_ELEMENT[kind]
    if kind == "maxpool" or kind == "avgpool":
        ops = max(ops, first.elements)
    g.add(Layer(name, kind, inputs, y, wt, None, ops, source))
    return y
