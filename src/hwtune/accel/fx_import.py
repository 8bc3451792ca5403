"""Layer graphs from PyTorch modules through torch.fx (symbolic trace + ShapeProp for exact
shapes). torch is imported here only. Ops without a mapping are listed in the error (or, with
``strict=False``, kept as zero-cost ``unsupported`` layers and listed in ``graph.unsupported``),
never dropped silently."""

from __future__ import annotations

import operator
from typing import Any

from hwtune.accel.workload import Graph, Layer, bmm, conv2d, linear, vector, view
from hwtune.errors import HwtuneInputError

_VIEW_METHODS = {
    "view", "reshape", "transpose", "permute", "contiguous", "flatten", "unsqueeze", "squeeze",
    "expand", "t", "unflatten",
}  # fmt: skip
_NON_TENSOR = {"size", "dim", "ones", "zeros", "tril", "getattr", "eq", "ne", "invert", "bool"}


def graph_from_torch(
    module: Any,
    example_inputs: tuple,
    name: str | None = None,
    elem_bytes: int = 2,
    strict: bool = True,
) -> Graph:
    """Trace ``module`` on ``example_inputs`` and lower it to a forward `Graph` ending in a
    loss. Floating-point tensors use ``elem_bytes`` per element (training precision)."""
    import torch
    import torch.nn.functional as F
    from torch import fx, nn
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        gm = fx.symbolic_trace(module)
    except Exception as e:  # noqa: BLE001 - fx raises many types; report one line
        raise HwtuneInputError(
            "module",
            type(module).__name__,
            f"a torch.fx-traceable module ({type(e).__name__}: {str(e).splitlines()[0]})",
        ) from None
    ShapeProp(gm).propagate(*example_inputs)
    g = Graph(name or type(module).__name__)
    env: dict[
        str, Any
    ] = {}  # fx node name -> tensor name | tuple marker | None (non-tensor/constant)
    weight_of: dict[int, str] = {}  # parameter id -> weight tensor name (tied weights share)
    unsupported: list[str] = []

    def shape(node: fx.Node) -> tuple[int, ...] | None:
        tm = node.meta.get("tensor_meta")
        return tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else None

    def ebytes(node: fx.Node) -> int:
        tm = node.meta.get("tensor_meta")
        if tm is not None and hasattr(tm, "dtype") and not tm.dtype.is_floating_point:
            return torch.empty((), dtype=tm.dtype).element_size()
        return elem_bytes

    def act(a: Any) -> str | None:
        return env.get(a.name) if isinstance(a, fx.Node) else None

    def check(node: fx.Node, t: str) -> str:
        want = shape(node)
        if want is not None and g.tensors[t].shape != want:
            raise HwtuneInputError(
                f"node {node.name}", g.tensors[t].shape, f"shape {want} (as traced)"
            )
        return t

    def tied(p: Any, n: str) -> str:
        if id(p) not in weight_of:
            weight_of[id(p)] = g.tensor(n, (p.numel(),), "weight", elem_bytes)
        return weight_of[id(p)]

    def bad(node: fx.Node, what: str) -> None:
        unsupported.append(f"{node.name} ({what})")
        if not strict:
            ins = tuple(x for x in (act(a) for a in node.args) if isinstance(x, str))
            sh = shape(node)
            if ins and sh:
                env[node.name] = vector(g, node.name, "unsupported", ins, sh, source=what)
                return
        env[node.name] = None

    for node in gm.graph.nodes:
        op, tgt, nm = node.op, node.target, node.name
        if op == "placeholder":
            env[nm] = g.tensor(nm, shape(node), "input", ebytes(node))
        elif op == "get_attr":
            env[nm] = None  # buffers/constants (e.g. a causal mask) are not activations
        elif op == "output":
            out = act(node.args[0] if not isinstance(node.args[0], tuple) else node.args[0][0])
            if out is None and unsupported:
                break
            if out is None:
                raise HwtuneInputError("module output", str(node.args[0]), "a tensor")
            vector(g, "loss", "loss", (out,), (1,))
        elif op == "call_module":
            m = gm.get_submodule(tgt)
            x = act(node.args[0]) if node.args else None
            sh = shape(node)
            if isinstance(m, nn.Conv2d) and x:
                k, s, p = m.kernel_size[0], m.stride[0], m.padding[0]
                if (
                    m.kernel_size[0] != m.kernel_size[1]
                    or m.stride[0] != m.stride[1]
                    or isinstance(m.padding, str)
                    or m.dilation != (1, 1)
                ):
                    bad(node, f"Conv2d {m.kernel_size} stride {m.stride} dilation {m.dilation}")
                    continue
                y = conv2d(g, nm, x, m.out_channels, k, s, p, m.groups, bias=m.bias is not None)
                env[nm] = check(node, y)
            elif isinstance(m, nn.Linear) and x:
                if id(m.weight) in weight_of:  # tied to an earlier parameter
                    env[nm] = check(
                        node,
                        linear(
                            g,
                            nm,
                            x,
                            m.out_features,
                            m.bias is not None,
                            weight=weight_of[id(m.weight)],
                        ),
                    )
                else:
                    y = linear(g, nm, x, m.out_features, m.bias is not None)
                    weight_of[id(m.weight)] = f"{nm}.weight"
                    env[nm] = check(node, y)
            elif isinstance(m, nn.Embedding) and x:
                w = tied(m.weight, f"{nm}.weight")
                y = g.tensor(nm, sh, "activation", elem_bytes)
                g.add(Layer(nm, "embedding", (x,), y, w, None, g.tensors[y].elements, "Embedding"))
                env[nm] = y
            elif isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)) and x:
                n_aff = 0
                if isinstance(m, nn.BatchNorm2d) and m.affine:
                    n_aff = 2 * m.num_features
                elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                    n_aff = sum(p.numel() for p in m.parameters())
                env[nm] = vector(
                    g,
                    nm,
                    "batchnorm" if isinstance(m, nn.BatchNorm2d) else "layernorm",
                    (x,),
                    sh,
                    n_aff,
                )
            elif isinstance(m, (nn.ReLU, nn.GELU)) and x:
                env[nm] = vector(g, nm, "relu" if isinstance(m, nn.ReLU) else "gelu", (x,), sh)
            elif isinstance(m, nn.MaxPool2d) and x:
                env[nm] = vector(g, nm, "maxpool", (x,), sh)
            elif isinstance(m, (nn.AdaptiveAvgPool2d, nn.AvgPool2d)) and x:
                env[nm] = vector(g, nm, "avgpool", (x,), sh)
            elif isinstance(m, (nn.Dropout, nn.Identity, nn.Flatten)) and x:
                env[nm] = view(g, nm, x, sh)
            else:
                bad(node, type(m).__name__)
        elif op in ("call_function", "call_method"):
            fname = tgt if isinstance(tgt, str) else getattr(tgt, "__name__", str(tgt))
            args = node.args
            sh = shape(node)
            tens = [act(a) for a in args if isinstance(a, fx.Node)]
            tens = [t for t in tens if isinstance(t, str)]
            if sh is None:  # ints, shapes, tuples (split)
                if fname in ("split", "chunk"):
                    env[nm] = ("tuple", act(args[0]))
                elif fname in _NON_TENSOR or not tens:
                    env[nm] = None
                else:
                    bad(node, fname)
                continue
            if fname == "arange":  # position ids: an input of the step, not an activation
                env[nm] = g.tensor(nm, sh, "input", ebytes(node))
                continue
            if fname in _NON_TENSOR and not tens:
                env[nm] = None
                continue
            if tgt is operator.getitem:
                src = env.get(args[0].name) if isinstance(args[0], fx.Node) else None
                if isinstance(src, tuple):
                    env[nm] = view(g, nm, src[1], sh)
                elif isinstance(src, str):
                    env[nm] = view(g, nm, src, sh)
                else:
                    env[nm] = None  # slicing a constant
                continue
            if fname in _VIEW_METHODS or tgt in (
                torch.flatten,
                torch.reshape,
                torch.transpose,
                torch.permute,
            ):
                env[nm] = view(g, nm, tens[0], sh) if tens else None
            elif fname in ("add", "iadd") or tgt in (operator.add, torch.add):
                if len(tens) == 2:
                    env[nm] = vector(g, nm, "add", tuple(tens), sh)
                elif tens:
                    env[nm] = vector(g, nm, "scale", (tens[0],), sh)
                else:
                    env[nm] = None
            elif fname in ("mul", "truediv", "div", "sub") or tgt in (
                operator.mul,
                operator.truediv,
                operator.sub,
            ):
                if len(tens) == 1:
                    env[nm] = vector(g, nm, "scale", (tens[0],), sh)
                elif len(tens) == 2:
                    env[nm] = vector(g, nm, "add", tuple(tens), sh)  # elementwise binary
                else:
                    env[nm] = None
            elif fname in ("relu", "gelu") or tgt in (F.relu, F.gelu, torch.relu):
                env[nm] = vector(g, nm, "relu" if "relu" in fname else "gelu", (tens[0],), sh)
            elif fname == "softmax" or tgt in (F.softmax, torch.softmax):
                env[nm] = vector(g, nm, "softmax", (tens[0],), sh)
            elif fname in ("masked_fill", "masked_fill_"):
                env[nm] = vector(g, nm, "mask", (tens[0],), sh)
            elif (
                fname in ("matmul", "bmm") or tgt in (operator.matmul, torch.matmul, torch.bmm)
            ) and len(tens) == 2:
                env[nm] = check(node, bmm(g, nm, tens[0], tens[1]))
            elif fname in _NON_TENSOR:
                env[nm] = None
            else:
                bad(node, fname)
        else:
            bad(node, op)
    if unsupported and strict:
        raise HwtuneInputError(
            "graph", f"{len(unsupported)} unsupported op(s): " + ", ".join(unsupported),
            "ops with a mapping (conv2d, linear, matmul, norms, activations, pooling, views); strict=False keeps them as zero-cost placeholders",
        )  # fmt: skip
    g.unsupported = unsupported
    return g
