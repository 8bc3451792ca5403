"""Built-in workloads as layer graphs, from their published configurations (no downloads).

- ResNet-18: He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Table 1
  (7x7/2 conv, 3x3/2 max pool, four stages of two basic blocks with 64/128/256/512 channels,
  1x1/2 projection shortcuts where the shape changes, global average pool, 1000-way FC).
- GPT-2 small: Radford et al. 2019, the released configuration (12 layers, 12 heads, width 768,
  vocabulary 50257, context 1024, GELU MLP of width 3072, pre-LayerNorm, final LayerNorm,
  LM head tied to the token embedding).

The same networks written as torch modules are in `torch_models.py`; importing those through
torch.fx (`fx_import.py`) must give the same MACs and parameter counts (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.accel.workload import Graph, Layer, LoopNest, bmm, conv2d, linear, vector, view
from hwtune.errors import HwtuneInputError


def _conv_bn(g: Graph, name: str, x: str, c: int, k: int, s: int, p: int, relu: bool) -> str:
    y = conv2d(g, f"{name}.conv", x, c, k, s, p)
    y = vector(g, f"{name}.bn", "batchnorm", (y,), weight_elems=2 * c)
    return vector(g, f"{name}.relu", "relu", (y,)) if relu else y


def resnet18(batch: int = 1, image: int = 224, classes: int = 1000, elem_bytes: int = 2) -> Graph:
    """ResNet-18 forward graph for ``batch`` images of ``image`` x ``image`` pixels."""
    _positive(batch=batch, image=image, classes=classes)
    g = Graph(f"resnet18-b{batch}-{image}px")
    x = g.tensor("image", (batch, 3, image, image), "input", elem_bytes)
    x = _conv_bn(g, "stem", x, 64, 7, 2, 3, relu=True)
    _, _, h, w = g.tensors[x].shape
    oh, ow = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1
    x = vector(g, "maxpool", "maxpool", (x,), (batch, 64, oh, ow))
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            n = f"layer{stage}.{block}"
            y = _conv_bn(g, f"{n}.a", x, cout, 3, stride, 1, relu=True)
            y = _conv_bn(g, f"{n}.b", y, cout, 3, 1, 1, relu=False)
            short = (
                x
                if stride == 1 and cin == cout
                else _conv_bn(g, f"{n}.down", x, cout, 1, stride, 0, relu=False)
            )
            y = vector(g, f"{n}.add", "add", (y, short))
            x = vector(g, f"{n}.relu", "relu", (y,))
            cin = cout
    x = vector(g, "avgpool", "avgpool", (x,), (batch, 512))
    x = linear(g, "fc", x, classes)
    vector(g, "loss", "loss", (x,), (1,))
    return g


@dataclass(frozen=True)
class GPT2Config:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab: int = 50257
    n_ctx: int = 1024


def gpt2(
    batch: int = 1, seq: int = 1024, config: GPT2Config | None = None, elem_bytes: int = 2
) -> Graph:
    """GPT-2 forward graph (default: small, 124M parameters) on ``batch`` x ``seq`` tokens."""
    cfg = config or GPT2Config()
    _positive(batch=batch, seq=seq)
    if seq > cfg.n_ctx:
        raise HwtuneInputError("seq", seq, f"at most the context length {cfg.n_ctx}")
    if cfg.n_embd % cfg.n_head:
        raise HwtuneInputError("n_head", cfg.n_head, f"a divisor of n_embd={cfg.n_embd}")
    d, h = cfg.n_embd, cfg.n_head
    hd = d // h
    g = Graph(f"gpt2-{cfg.n_layer}l{d}d-b{batch}-s{seq}")
    tok = g.tensor("tokens", (batch, seq), "input", 4)
    wte = g.tensor("wte.weight", (cfg.vocab, d), "weight", elem_bytes)
    wpe = g.tensor("wpe.weight", (cfg.n_ctx, d), "weight", elem_bytes)
    te = g.tensor("embed.tok", (batch, seq, d), "activation", elem_bytes)
    g.add(Layer("embed.tok", "embedding", (tok,), te, wte, None, batch * seq * d))
    pe = g.tensor("embed.pos", (batch, seq, d), "activation", elem_bytes)
    g.add(Layer("embed.pos", "embedding", (tok,), pe, wpe, None, batch * seq * d))
    x = vector(g, "embed", "add", (te, pe))
    for i in range(cfg.n_layer):
        n = f"h{i}"
        a = vector(g, f"{n}.ln1", "layernorm", (x,), weight_elems=2 * d)
        q = linear(g, f"{n}.attn.q", a, d)
        k = linear(g, f"{n}.attn.k", a, d)
        v = linear(g, f"{n}.attn.v", a, d)
        qh = view(g, f"{n}.attn.qh", q, (batch, h, seq, hd))
        kt = view(g, f"{n}.attn.kt", k, (batch, h, hd, seq))
        vh = view(g, f"{n}.attn.vh", v, (batch, h, seq, hd))
        s = bmm(g, f"{n}.attn.scores", qh, kt)
        s = vector(g, f"{n}.attn.scale", "scale", (s,))
        s = vector(g, f"{n}.attn.mask", "mask", (s,))
        p = vector(g, f"{n}.attn.softmax", "softmax", (s,))
        o = bmm(g, f"{n}.attn.pv", p, vh)
        o = view(g, f"{n}.attn.merge", o, (batch, seq, d))
        o = linear(g, f"{n}.attn.proj", o, d)
        x = vector(g, f"{n}.add1", "add", (x, o))
        m = vector(g, f"{n}.ln2", "layernorm", (x,), weight_elems=2 * d)
        m = linear(g, f"{n}.mlp.fc", m, 4 * d)
        m = vector(g, f"{n}.mlp.gelu", "gelu", (m,))
        m = linear(g, f"{n}.mlp.proj", m, d)
        x = vector(g, f"{n}.add2", "add", (x, m))
    x = vector(g, "ln_f", "layernorm", (x,), weight_elems=2 * d)
    logits = linear(g, "lm_head", x, cfg.vocab, bias=False, weight=wte)
    vector(g, "loss", "loss", (logits,), (1,))
    return g


def _positive(**kw: int) -> None:
    for k, v in kw.items():
        if not isinstance(v, int) or v <= 0:
            raise HwtuneInputError(k, v, "a positive integer")


WORKLOADS = {"resnet18": resnet18, "gpt2": gpt2}


def build_workload(name: str, batch: int = 1, **kw: int) -> Graph:
    """A built-in workload by name (``resnet18`` takes ``image``, ``gpt2`` takes ``seq``)."""
    if name not in WORKLOADS:
        raise HwtuneInputError(
            "workload", name, "one of " + ", ".join(WORKLOADS) + " (or a .yaml/.onnx file)"
        )
    return WORKLOADS[name](batch=batch, **kw)


__all__ = ["GPT2Config", "LoopNest", "build_workload", "gpt2", "resnet18"]
