"""Layer graphs from ONNX files (``onnx`` package, an optional dependency), with shapes from
ONNX shape inference. Unsupported ops are listed in the error, never dropped silently."""

from __future__ import annotations

from pathlib import Path

from hwtune.accel.workload import Graph, bmm, conv2d, linear, vector, view
from hwtune.errors import HwtuneInputError

_VIEWS = {"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
_VECTOR = {"Relu": "relu", "Gelu": "gelu", "Softmax": "softmax", "MaxPool": "maxpool",
           "GlobalAveragePool": "avgpool", "AveragePool": "avgpool"}  # fmt: skip


def graph_from_onnx(path: str | Path, elem_bytes: int = 2) -> Graph:
    try:
        import onnx
        from onnx import numpy_helper, shape_inference
    except ImportError:
        raise HwtuneInputError(
            "workload", str(path), "the onnx package installed (pip install onnx)"
        ) from None
    try:
        model = shape_inference.infer_shapes(onnx.load(str(path)))
    except Exception as e:  # noqa: BLE001
        raise HwtuneInputError(
            "workload", str(path), f"a readable ONNX model ({type(e).__name__})"
        ) from None
    gr = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in gr.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in list(gr.value_info) + list(gr.input) + list(gr.output):
        dims = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if dims and all(d > 0 for d in dims):
            shapes[vi.name] = dims
    g = Graph(Path(path).stem)
    env: dict[str, str] = {}
    for vi in gr.input:
        if vi.name not in inits:
            if vi.name not in shapes:
                raise HwtuneInputError(f"input {vi.name}.shape", None, "static positive dimensions")
            env[vi.name] = g.tensor(vi.name, shapes[vi.name], "input", elem_bytes)
    unsupported: list[str] = []
    for i, node in enumerate(gr.node):
        name = node.name or f"{node.op_type}_{i}"
        out = node.output[0]
        ins = [env[x] for x in node.input if x in env]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        sh = shapes.get(out)
        op = node.op_type
        if op == "Conv" and ins:
            w = inits[node.input[1]]
            k = int(w.shape[2])
            s = int(attrs.get("strides", [1])[0])
            p = int(attrs.get("pads", [0])[0])
            env[out] = conv2d(
                g,
                name,
                ins[0],
                int(w.shape[0]),
                k,
                s,
                p,
                int(attrs.get("group", 1)),
                bias=len(node.input) > 2,
            )
        elif op in ("Gemm", "MatMul") and ins and node.input[1] in inits:
            w = inits[node.input[1]]
            n_out = int(w.shape[0] if attrs.get("transB", 0) else w.shape[-1])
            env[out] = linear(g, name, ins[0], n_out, bias=len(node.input) > 2)
        elif op == "MatMul" and len(ins) == 2:
            env[out] = bmm(g, name, ins[0], ins[1])
        elif op in ("Add", "Mul", "Sub", "Div") and ins:
            env[out] = vector(g, name, "add" if len(ins) == 2 else "scale", tuple(ins), sh)
        elif op == "BatchNormalization" and ins:
            env[out] = vector(
                g, name, "batchnorm", (ins[0],), sh, 2 * int(inits[node.input[1]].size)
            )
        elif op == "LayerNormalization" and ins:
            n_aff = sum(int(inits[x].size) for x in node.input[1:] if x in inits)
            env[out] = vector(g, name, "layernorm", (ins[0],), sh, n_aff)
        elif op in _VECTOR and ins:
            env[out] = vector(g, name, _VECTOR[op], (ins[0],), sh)
        elif op in _VIEWS and ins and sh:
            env[out] = view(g, name, ins[0], sh)
        else:
            unsupported.append(f"{name} ({op})")
    if unsupported:
        raise HwtuneInputError("graph", f"{len(unsupported)} unsupported op(s): " + ", ".join(unsupported),
                               "ONNX ops with a mapping (Conv, Gemm, MatMul, norms, activations, pooling, views)")  # fmt: skip
    last = env.get(gr.output[0].name)
    if last is None:
        raise HwtuneInputError(
            "graph output", gr.output[0].name, "a tensor computed by supported ops"
        )
    vector(g, "loss", "loss", (last,), (1,))
    return g
