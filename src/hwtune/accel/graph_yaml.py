"""Layer graphs from a small YAML format (no torch needed):

    name: tiny-cnn
    elem_bytes: 2
    input: {name: image, shape: [8, 3, 32, 32]}
    layers:
      - {name: c1, op: conv, input: image, out_channels: 16, kernel: 3, stride: 1, padding: 1}
      - {name: r1, op: relu, input: c1}
      - {name: fc, op: linear, input: r1_flat, out_features: 10}   # after a view:
      - {name: r1_flat, op: view, input: r1, shape: [8, 16384]}    # (views are listed in order)

ops: conv, linear, matmul (two inputs), view, add (two inputs), relu, gelu, batchnorm,
layernorm, softmax, maxpool/avgpool (with ``shape``). A loss is appended.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from hwtune.accel.workload import Graph, bmm, conv2d, linear, vector, view
from hwtune.errors import HwtuneInputError

_VEC = {"relu", "gelu", "batchnorm", "layernorm", "softmax", "maxpool", "avgpool", "add", "scale"}


def graph_from_yaml(path: str | Path) -> Graph:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise HwtuneInputError(
            "workload", str(path), f"a readable UTF-8 YAML graph ({type(e).__name__})"
        ) from None
    if not isinstance(doc, dict) or "input" not in doc or "layers" not in doc:
        raise HwtuneInputError("workload", str(path), "a mapping with input and layers")
    if not isinstance(doc["layers"], list) or not doc["layers"]:
        raise HwtuneInputError(f"{Path(path).name}.layers", doc["layers"], "a non-empty list")
    eb = doc.get("elem_bytes", 2)
    if not isinstance(eb, int) or isinstance(eb, bool) or eb < 1:
        raise HwtuneInputError(f"{Path(path).name}.elem_bytes", eb, "a positive integer")
    g = Graph(str(doc.get("name", Path(path).stem)))
    inp = doc["input"]
    try:
        g.tensor(inp["name"], tuple(inp["shape"]), "input", eb)
    except (KeyError, TypeError):
        raise HwtuneInputError(
            f"{Path(path).name}.input", inp, "a mapping with name and shape"
        ) from None
    for i, ly in enumerate(doc["layers"]):
        where = f"layers[{i}]"
        try:
            name, op = ly["name"], ly["op"]
            ins = ly["input"] if isinstance(ly["input"], list) else [ly["input"]]
        except (KeyError, TypeError):
            raise HwtuneInputError(where, ly, "name, op and input") from None
        for t in ins:
            if not isinstance(t, str) or t not in g.tensors:
                raise HwtuneInputError(f"{where}.input", t, "a tensor defined above")
        try:
            _layer(g, ly, name, op, ins, where)
        except HwtuneInputError:
            raise
        except KeyError as e:  # a field the op needs
            raise HwtuneInputError(
                f"{where}.{e.args[0]}", None, f"a value (required by {op})"
            ) from None
        except (TypeError, ValueError, IndexError) as e:  # a size that is not an integer, ...
            raise HwtuneInputError(where, ly, f"integer sizes and list shapes ({e})") from None
    vector(g, "loss", "loss", (g.layers[-1].output,), (1,))
    return g


def _layer(g: Graph, ly: dict, name: str, op: object, ins: list[str], where: str) -> None:
    """Add layer ``ly`` (a mapping from the YAML) to ``g``."""

    def num(key: str, default: int | None = None) -> int:
        v = ly[key] if default is None else ly.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool):  # 3.7 would be cut to 3
            raise HwtuneInputError(f"{where}.{key}", v, "an integer")
        return v

    if op == "conv":
        conv2d(g, name, ins[0], num("out_channels"), num("kernel"), num("stride", 1),
               num("padding", 0), num("groups", 1), bool(ly.get("bias", False)))  # fmt: skip
    elif op == "linear":
        linear(g, name, ins[0], num("out_features"), bool(ly.get("bias", True)))
    elif op == "matmul":
        bmm(g, name, ins[0], ins[1])
    elif op == "view":
        view(g, name, ins[0], tuple(ly["shape"]))
    elif op in _VEC:
        n_aff = 0
        if op in ("batchnorm", "layernorm") and ly.get("affine", True):
            n_aff = 2 * int(g.tensors[ins[0]].shape[1 if op == "batchnorm" else -1])
        vector(g, name, op, tuple(ins), tuple(ly["shape"]) if "shape" in ly else None, n_aff)
    else:
        raise HwtuneInputError(
            f"{where}.op", op, "one of conv, linear, matmul, view, " + ", ".join(sorted(_VEC))
        )


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
