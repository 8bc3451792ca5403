"""Graph import: torch.fx of our torch modules equals the built-in graphs; ONNX and YAML
graphs; unsupported ops are listed, not dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.accel.graph_yaml import graph_from_yaml, load_workload
from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.training import lower_training
from hwtune.errors import HwtuneInputError


def test_fx_resnet18_matches_builtin():
    torch = pytest.importorskip("torch")
    from hwtune.accel.fx_import import graph_from_torch
    from hwtune.accel.torch_models import ResNet18

    g = graph_from_torch(ResNet18(), (torch.randn(2, 3, 64, 64),))
    r = resnet18(batch=2, image=64)
    assert [x.macs for x in g.layers] == [x.macs for x in r.layers]
    assert (
        g.weight_elements()
        == r.weight_elements()
        == sum(p.numel() for p in ResNet18().parameters())
    )
    assert lower_training(g).macs == lower_training(r).macs


def test_fx_gpt2_matches_builtin():
    torch = pytest.importorskip("torch")
    from hwtune.accel.fx_import import graph_from_torch
    from hwtune.accel.torch_models import GPT2

    cfg = GPT2Config(n_layer=2)
    m = GPT2(cfg)
    g = graph_from_torch(m, (torch.zeros(1, 32, dtype=torch.long),))
    r = gpt2(seq=32, config=cfg)
    assert g.macs == r.macs
    assert g.weight_elements() == r.weight_elements() == sum(p.numel() for p in m.parameters())


def test_fx_unsupported_ops_are_listed():
    torch = pytest.importorskip("torch")
    from torch import nn

    from hwtune.accel.fx_import import graph_from_torch

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.conv3 = nn.Conv3d(1, 1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.sort(self.fc(x), dim=-1).values
            return torch.cumsum(y, dim=-1)

    with pytest.raises(HwtuneInputError) as e:
        graph_from_torch(M(), (torch.randn(4, 8),))
    msg = str(e.value)
    assert "sort" in msg and "cumsum" in msg and "2 unsupported" in msg
    g = graph_from_torch(M(), (torch.randn(4, 8),), strict=False)
    assert len(g.unsupported) == 2 and any("sort" in u for u in g.unsupported)

    class N(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(x, dim=-1)

    g = graph_from_torch(N(), (torch.randn(4, 8),), strict=False)
    assert [x.kind for x in g.layers] == ["unsupported", "loss"] and g.unsupported


def _onnx_model(tmp_path: Path, extra_unsupported: bool = False) -> Path:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((16, 3, 3, 3), np.float32), "w")
    fw = numpy_helper.from_array(np.zeros((10, 16 * 8 * 8), np.float32), "fw")
    fb = numpy_helper.from_array(np.zeros((10,), np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    if extra_unsupported:
        nodes.append(helper.make_node("Erf", ["y"], ["z"], name="erf"))
    out = "z" if extra_unsupported else "y"
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 10])],
        [w, fw, fb],
    )  # fmt: skip
    p = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(p))
    return p


def test_onnx_import_exact(tmp_path):
    g = load_workload(str(_onnx_model(tmp_path)))
    L = {x.name: x for x in g.layers}
    assert L["conv"].macs == 2 * 16 * 8 * 8 * 3 * 9
    assert L["fc"].macs == 2 * 1024 * 10
    assert g.weight_elements() == 16 * 27 + 10 * 1024 + 10


def test_onnx_unsupported_listed(tmp_path):
    with pytest.raises(HwtuneInputError, match=r"erf \(Erf\)"):
        load_workload(str(_onnx_model(tmp_path, extra_unsupported=True)))


TINY = """
name: tiny-cnn
input: {name: image, shape: [4, 3, 16, 16]}
layers:
  - {name: c1, op: conv, input: image, out_channels: 8, kernel: 3, padding: 1}
  - {name: r1, op: relu, input: c1}
  - {name: c2, op: conv, input: r1, out_channels: 8, kernel: 3, padding: 1}
  - {name: s, op: add, input: [c2, r1]}
  - {name: flat, op: view, input: s, shape: [4, 2048]}
  - {name: fc, op: linear, input: flat, out_features: 10}
"""


def test_yaml_graph(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text(TINY)
    g = graph_from_yaml(p)
    assert g.macs == 4 * 8 * 256 * 3 * 9 + 4 * 8 * 256 * 8 * 9 + 4 * 2048 * 10
    bad = tmp_path / "b.yaml"
    bad.write_text(TINY.replace("input: r1, out", "input: nope, out"))
    with pytest.raises(HwtuneInputError, match="layers\\[2\\].input"):
        graph_from_yaml(bad)
