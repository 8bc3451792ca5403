"""Small models and data for the optimizer tests: a character-level GPT on the repository's own
text (nanoGPT's layout, Karpathy 2022, shrunk) and a two-layer MLP."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[2]


def corpus(max_chars: int = 200_000) -> str:
    """Text the project has at hand: DESIGN-like docs and the package's own source files."""
    parts = []
    for path in sorted((ROOT / "src" / "hwtune").rglob("*.py")):
        parts.append(path.read_text(encoding="utf-8"))
    text = "\n".join(parts)
    return text[:max_chars]


class CharData:
    """Character-level batches drawn with a seeded generator."""

    def __init__(self, text: str, block: int) -> None:
        chars = sorted(set(text))
        self.vocab = len(chars)
        index = {c: i for i, c in enumerate(chars)}
        self.data = torch.tensor([index[c] for c in text], dtype=torch.long)
        self.block = block

    def batch(self, gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(self.data) - self.block - 1, (size,), generator=gen)
        x = torch.stack([self.data[i : i + self.block] for i in ix.tolist()])
        y = torch.stack([self.data[i + 1 : i + 1 + self.block] for i in ix.tolist()])
        return x, y


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, d: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.checkpointing = False

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            if self.checkpointing:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        return self.head(self.ln(x))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def mlp(d_in: int = 64, hidden: int = 128, d_out: int = 10) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def fit_ten_class(model: nn.Module, opt: torch.optim.Optimizer, dtype: torch.dtype,
                  sign: float = 1.0, steps: int = 300) -> float:  # fmt: skip
    """Minibatch training on a fixed linearly separable 10-class task (512 points of 64
    features, batches of 32): backward of ``sign * loss``; the mean of the last 20 losses."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 64, generator=gen)
    y = (x @ torch.randn(64, 10, generator=gen)).argmax(1)
    losses = []
    for _ in range(steps):
        i = torch.randint(0, 512, (32,), generator=gen)
        loss = F.cross_entropy(model(x[i].to(dtype)).float(), y[i])
        (sign * loss).backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return sum(losses[-20:]) / 20
