"""Layer graphs from a small YAML format (no torch needed):

    name: tiny-cnn
    elem_bytes: 2
    input: {name: image, shape: [8, 3, 32, 32]}
    layers:
      - {name: c1, op: conv, input: image, out_channels: 16, kernel: 3, stride: 1, padding: 1}
      - {name: r1, op: relu, input: c1}
      - {name: r1_flat, op: view, input: r1, shape: [8, 16384]}
      - {name: fc, op: linear, input: r1_flat, out_features: 10}

ops (one input each unless stated):

- ``conv`` (an NCHW input): ``out_channels``, ``kernel`` (positive), ``stride`` (positive,
  default 1), ``padding`` (non-negative, default 0), ``groups`` (default 1), ``bias`` (false)
- ``linear`` (over the last dimension): ``out_features``, ``bias`` (true)
- ``matmul``: two inputs (..., M, C) and (..., C, K)
- ``view``: a reshape to ``shape``, with the input's number of elements
- ``add``: two inputs of the same shape, or a second that broadcasts to the first (NumPy's
  rule: sizes aligned from the last, each equal or 1); the output has the first's shape
- ``relu``, ``gelu``, ``scale``, ``softmax``, ``layernorm`` (``affine``, true), ``batchnorm``
  (an (N, C, ...) input; ``affine``, true): the output has the input's shape
- ``maxpool``, ``avgpool``: the output ``shape`` (default the input's): the input's rank,
  batch and channels, and spatial sizes a pooling window over the input gives (PyTorch:
  floor((H + 2p - k) / s) + 1 with p <= k/2, so at most H + 1)

Sizes are positive integers (3.5 is refused, not cut to 3); a key an op does not take, or one
given twice, is refused, not ignored. A loss is appended.
"""

from __future__ import annotations

import math
from pathlib import Path

from hwtune.accel.workload import Graph, bmm, conv2d, linear, vector, view
from hwtune.errors import HwtuneInputError
from hwtune.structured_file import read_structured

_ELEMENTWISE = {"relu", "gelu", "scale", "softmax", "layernorm", "batchnorm"}
_POOLS = {"maxpool", "avgpool"}
_VEC = _ELEMENTWISE | _POOLS | {"add"}
# the keys each op takes besides name, op and input
_KEYS: dict[str, set[str]] = {
    "conv": {"out_channels", "kernel", "stride", "padding", "groups", "bias"},
    "linear": {"out_features", "bias"},
    "matmul": set(),
    "view": {"shape"},
    "add": set(),
    **{op: {"shape"} for op in sorted(_ELEMENTWISE | _POOLS)},
}
_KEYS["batchnorm"] = _KEYS["layernorm"] = {"shape", "affine"}
_TWO_INPUTS = {"matmul", "add"}


def _shape(v: object, field: str) -> tuple[int, ...]:
    """A shape from the YAML: a non-empty list of positive integers."""
    if not isinstance(v, list) or not v:
        raise HwtuneInputError(field, v, "a non-empty list of positive integers")
    for j, d in enumerate(v):
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:  # 3.5 would be cut to 3
            raise HwtuneInputError(f"{field}[{j}]", d, "a positive integer")
    return tuple(v)


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def graph_from_yaml(path: str | Path) -> Graph:
    # the shared reader: a key given twice is refused (yaml.safe_load kept the last silently)
    doc = read_structured(path, "workload")
    if not isinstance(doc, dict) or "input" not in doc or "layers" not in doc:
        raise HwtuneInputError("workload", str(path), "a mapping with input and layers")
    file = Path(path).name
    for k in doc:
        if k not in ("name", "elem_bytes", "input", "layers"):
            raise HwtuneInputError(f"{file}.{k}", doc[k], "no such key (a graph has name, "
                                   "elem_bytes, input and layers)")  # fmt: skip
    if not isinstance(doc["layers"], list) or not doc["layers"]:
        raise HwtuneInputError(f"{file}.layers", doc["layers"], "a non-empty list")
    eb = doc.get("elem_bytes", 2)
    if not isinstance(eb, int) or isinstance(eb, bool) or eb < 1:
        raise HwtuneInputError(f"{file}.elem_bytes", eb, "a positive integer")
    g = Graph(str(doc.get("name", Path(path).stem)))
    inp = doc["input"]
    if (
        not isinstance(inp, dict)
        or set(inp) != {"name", "shape"}
        or not isinstance(inp["name"], str)
    ):
        raise HwtuneInputError(f"{file}.input", inp, "a mapping with name and shape")
    g.tensor(inp["name"], _shape(inp["shape"], f"{file}.input.shape"), "input", eb)
    for i, ly in enumerate(doc["layers"]):
        where = f"{file}.layers[{i}]"
        try:
            name, op = ly["name"], ly["op"]
            ins = ly["input"] if isinstance(ly["input"], list) else [ly["input"]]
        except (KeyError, TypeError):
            raise HwtuneInputError(where, ly, "name, op and input") from None
        if op not in _KEYS:
            raise HwtuneInputError(f"{where}.op", op, "one of " + ", ".join(_KEYS))
        if not isinstance(name, str) or not name:
            raise HwtuneInputError(f"{where}.name", name, "a non-empty string")
        if name in g.tensors:
            raise HwtuneInputError(f"{where}.name", name, "a name not used above")
        for k in ly:
            if k not in ("name", "op", "input") and k not in _KEYS[op]:
                takes = ", ".join(sorted(_KEYS[op])) or "none"
                raise HwtuneInputError(f"{where}.{k}", ly[k], f"no such key for {op} (it "
                                       f"takes {takes} besides name, op and input)")  # fmt: skip
        n_in = 2 if op in _TWO_INPUTS else 1
        if len(ins) != n_in:
            raise HwtuneInputError(f"{where}.input", ly["input"], f"{n_in} tensor name"
                                   f"{'s' if n_in > 1 else ''} for {op}")  # fmt: skip
        for t in ins:
            if not isinstance(t, str) or t not in g.tensors:
                raise HwtuneInputError(f"{where}.input", t, "a tensor defined above")
        try:
            _layer(g, ly, name, op, ins, where)
        except HwtuneInputError as e:  # a builder's check ("layer c1.kernel"): name the YAML
            at = f"layer {name}"
            if not (e.field == at or e.field.startswith(at + ".")):
                raise
            raise HwtuneInputError(where + e.field[len(at) :], e.value, e.expected) from None
        except KeyError as e:  # a field the op needs
            raise HwtuneInputError(
                f"{where}.{e.args[0]}", None, f"a value (required by {op})"
            ) from None
        except (TypeError, ValueError, IndexError) as e:  # a case the checks above missed
            raise HwtuneInputError(where, ly, f"a layer {op} can build ({e})") from None
    vector(g, "loss", "loss", (g.layers[-1].output,), (1,))
    return g


def _layer(g: Graph, ly: dict, name: str, op: str, ins: list[str], where: str) -> None:
    """Add layer ``ly`` (a mapping from the YAML, keys and inputs checked) to ``g``."""

    def num(key: str, default: int | None = None, least: int = 1) -> int:
        v = ly[key] if default is None else ly.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < least:  # 3.7 would be cut to 3
            raise HwtuneInputError(
                f"{where}.{key}", v, "a positive integer" if least else "a non-negative integer"
            )
        return v

    def flag(key: str, default: bool) -> bool:
        v = ly.get(key, default)
        if not isinstance(v, bool):
            raise HwtuneInputError(f"{where}.{key}", v, "true or false")
        return v

    def rank(t: str, least: int, exactly: bool = False, what: str = "") -> tuple[int, ...]:
        s = g.tensors[t].shape
        if len(s) < least or (exactly and len(s) != least):
            want = f"rank {least}" if exactly else f"rank {least} or more"
            raise HwtuneInputError(f"{where}.input", t, f"a tensor of {want}{what} for {op}; "
                                   f"{t} has rank {len(s)} (shape {_dims(s)})")  # fmt: skip
        return s

    if op == "conv":
        rank(ins[0], 4, exactly=True, what=" (N, C, H, W)")
        conv2d(g, name, ins[0], num("out_channels"), num("kernel"), num("stride", 1),
               num("padding", 0, least=0), num("groups", 1), flag("bias", False))  # fmt: skip
    elif op == "linear":
        linear(g, name, ins[0], num("out_features"), flag("bias", True))
    elif op == "matmul":
        rank(ins[0], 2, what=" (..., M, C)")
        rank(ins[1], 2, what=" (..., C, K)")
        bmm(g, name, ins[0], ins[1])
    elif op == "view":
        src = g.tensors[ins[0]]
        shape = _shape(ly["shape"], f"{where}.shape")
        if math.prod(shape) != src.elements:
            raise HwtuneInputError(f"{where}.shape", list(shape), f"a shape of {src.elements} "
                                   f"elements, as {ins[0]} {_dims(src.shape)} has (a view "
                                   "reshapes: it neither drops nor adds elements)")  # fmt: skip
        view(g, name, ins[0], shape)
    else:  # _VEC
        s = g.tensors[ins[0]].shape
        n_aff = 0
        if op == "batchnorm":
            s = rank(ins[0], 2, what=" (N, C, ...)")
        if op in ("batchnorm", "layernorm") and flag("affine", True):
            n_aff = 2 * s[1 if op == "batchnorm" else -1]
        if op == "add":
            _broadcasts(g, ins, where)
        out = _shape(ly["shape"], f"{where}.shape") if "shape" in ly else s
        if op in _POOLS:
            rank(ins[0], 3, what=" (N, C, spatial...)")
            _pool_shape(g, ins[0], out, where, op)
        elif out != s:
            raise HwtuneInputError(f"{where}.shape", list(out), f"{ins[0]}'s shape {_dims(s)} "
                                   f"(an elementwise {op} keeps its input's shape)")  # fmt: skip
        vector(g, name, op, tuple(ins), out, n_aff)


def _broadcasts(g: Graph, ins: list[str], where: str) -> None:
    """``add``'s second input has the first's shape or broadcasts to it (NumPy's rule)."""
    a, b = (g.tensors[t].shape for t in ins)
    if len(b) > len(a) or any(y not in (x, 1) for x, y in zip(a[::-1], b[::-1], strict=False)):
        raise HwtuneInputError(f"{where}.input", ins, "two tensors of the same shape, or a second "
                               "that broadcasts to the first (sizes aligned from the last, each "
                               f"equal or 1); {ins[0]} is {_dims(a)}, {ins[1]} is {_dims(b)}")  # fmt: skip


def _pool_shape(g: Graph, x: str, out: tuple[int, ...], where: str, op: str) -> None:
    """A pooling output keeps the input's rank, batch and channels; each spatial size is one a
    window of at least one element gives over the input padded by at most half a window (PyTorch:
    floor((H + 2p - k) / s) + 1 with k >= 1, s >= 1, p <= k/2: at most H + 1)."""
    s = g.tensors[x].shape  # of rank 3 or more (checked by the caller)
    if (
        len(out) != len(s)
        or out[:2] != s[:2]
        or any(o > h + 1 for o, h in zip(out[2:], s[2:], strict=True))
    ):
        most = "x".join(str(h + 1) for h in s[2:])
        raise HwtuneInputError(
            f"{where}.shape", list(out), f"an output of rank {len(s)} with {x}'s batch and "
            f"channels {_dims(s[:2])} and spatial sizes at most {most} (a {op} window over the "
            f"{'x'.join(map(str, s[2:]))} input, padded by at most half the window)",
        )  # fmt: skip


def load_workload(spec: str, batch: int = 1, image: int = 224, seq: int = 1024) -> Graph:
    """A built-in name (resnet18, gpt2), or a .yaml/.onnx graph file."""
    from hwtune.accel.models import WORKLOADS, gpt2, resnet18

    if spec in WORKLOADS:
        return (
            resnet18(batch=batch, image=image) if spec == "resnet18" else gpt2(batch=batch, seq=seq)
        )
    p = Path(spec)
    if p.suffix in (".yaml", ".yml"):
        return graph_from_yaml(p)
    if p.suffix == ".onnx":
        from hwtune.accel.onnx_import import graph_from_onnx

        return graph_from_onnx(p)
    raise HwtuneInputError("workload", spec, "resnet18, gpt2, or a .yaml/.onnx graph file")
