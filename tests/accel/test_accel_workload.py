"""Predicted MACs, weight and activation bytes per layer match the layer shapes exactly
(computed here independently from the published configurations)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.workload import Graph, conv2d, linear
from hwtune.errors import HwtuneInputError


def _resnet18_convs(image: int) -> list[tuple[str, int, int, int, int, int, int]]:
    """(name, cin, cout, kernel, stride, pad, input size) from He et al. 2016, Table 1."""
    out = [("stem.conv", 3, 64, 7, 2, 3, image)]
    s = (image + 6 - 7) // 2 + 1  # after the stem conv
    s = (s + 2 - 3) // 2 + 1  # after the 3x3/2 max pool
    cin = 64
    for i, cout in enumerate((64, 128, 256, 512), start=1):
        for b in range(2):
            stride = 2 if i > 1 and b == 0 else 1
            n = f"layer{i}.{b}"
            out.append((f"{n}.a.conv", cin, cout, 3, stride, 1, s))
            so = (s + 2 - 3) // stride + 1
            out.append((f"{n}.b.conv", cout, cout, 3, 1, 1, so))
            if stride != 1 or cin != cout:
                out.append((f"{n}.down.conv", cin, cout, 1, stride, 0, s))
            s, cin = so, cout
    return out


def test_resnet18_conv_layers_exact():
    batch, image = 2, 224
    g = resnet18(batch=batch, image=image)
    layers = {x.name: x for x in g.layers}
    convs = _resnet18_convs(image)
    assert len(convs) == 20
    for name, cin, cout, k, s, p, hw in convs:
        o = (hw + 2 * p - k) // s + 1
        x = layers[name]
        assert x.macs == batch * cout * o * o * cin * k * k, name
        assert g.tensors[x.weight].nbytes == 2 * cout * cin * k * k, name
        assert g.tensors[x.output].nbytes == 2 * batch * cout * o * o, name
        assert g.tensors[x.inputs[0]].nbytes == 2 * batch * cin * hw * hw, name
    fc = layers["fc"]
    assert fc.macs == batch * 512 * 1000
    assert g.tensors[fc.weight].elements == 512 * 1000 + 1000


def test_published_totals():
    # torchvision resnet18: 11,689,512 parameters; ~1.82 GMAC per 224x224 image
    g = resnet18()
    assert g.weight_elements() == 11_689_512
    assert 1.80e9 < g.macs < 1.83e9
    # Hugging Face gpt2 (small): 124,439,808 parameters (LM head tied)
    assert gpt2().weight_elements() == 124_439_808


def test_gpt2_layers_exact():
    b, s, cfg = 2, 64, GPT2Config(n_layer=2)
    g = gpt2(batch=b, seq=s, config=cfg)
    d, h = cfg.n_embd, cfg.n_head
    L = {x.name: x for x in g.layers}
    for i in range(cfg.n_layer):
        for n in ("q", "k", "v", "proj"):
            assert L[f"h{i}.attn.{n}"].macs == b * s * d * d
        assert L[f"h{i}.mlp.fc"].macs == b * s * d * 4 * d
        assert L[f"h{i}.mlp.proj"].macs == b * s * 4 * d * d
        assert L[f"h{i}.attn.scores"].macs == b * h * s * s * (d // h)
        assert L[f"h{i}.attn.pv"].macs == b * h * s * s * (d // h)
        assert g.tensors[L[f"h{i}.attn.scores"].output].nbytes == 2 * b * h * s * s
    assert L["lm_head"].macs == b * s * d * cfg.vocab
    assert L["lm_head"].weight == "wte.weight"  # tied


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 4), c=st.integers(1, 64), k=st.integers(1, 64), hw=st.integers(4, 40),
    kern=st.sampled_from([1, 3, 5, 7]), stride=st.integers(1, 3), pad=st.integers(0, 3),
)  # fmt: skip
def test_conv_shapes_property(b, c, k, hw, kern, stride, pad):
    g = Graph("t")
    x = g.tensor("x", (b, c, hw, hw), "input", 2)
    o = (hw + 2 * pad - kern) // stride + 1
    if o <= 0:
        try:
            conv2d(g, "c", x, k, kern, stride, pad)
        except HwtuneInputError:
            return
        raise AssertionError("expected an error")
    y = conv2d(g, "c", x, k, kern, stride, pad)
    layer = g.layers[0]
    assert layer.macs == b * k * o * o * c * kern * kern
    assert g.tensors[y].shape == (b, k, o, o)
    assert g.tensors[layer.weight].nbytes == 2 * k * c * kern * kern


@settings(max_examples=40, deadline=None)
@given(t=st.integers(1, 512), fin=st.integers(1, 512), fout=st.integers(1, 512), bias=st.booleans())
def test_linear_property(t, fin, fout, bias):
    g = Graph("t")
    x = g.tensor("x", (t, fin), "input", 2)
    linear(g, "l", x, fout, bias)
    assert g.layers[0].macs == t * fin * fout
    assert g.tensors["l.weight"].elements == fin * fout + (fout if bias else 0)
