"""ResNet-18 and GPT-2 written as torch modules (torchvision is not a dependency), the same
networks as `models.py` builds directly; used to check the torch.fx import. Requires torch."""

from __future__ import annotations

import math

import torch
from torch import nn

from hwtune.accel.models import GPT2Config


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        s = x if self.down is None else self.down(x)
        return self.relu2(y + s)


class ResNet18(nn.Module):
    """He et al. 2016, Table 1 (18-layer)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks = []
        cin = 64
        for i, cout in enumerate((64, 128, 256, 512)):
            for b in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if i > 0 and b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


class Attention(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.h = cfg.n_head
        self.n_embd = cfg.n_embd
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.size(0), x.size(1)
        c = self.n_embd
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.h
        q = q.view(b, t, self.h, hd).transpose(1, 2)
        k = k.view(b, t, self.h, hd).transpose(1, 2)
        v = v.view(b, t, self.h, hd).transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        s = s.masked_fill(torch.ones((t, t)).tril() == 0, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(o)


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019) with the LM head tied to the token embedding."""

    def __init__(self, cfg: GPT2Config | None = None) -> None:
        super().__init__()
        cfg = cfg or GPT2Config()
        self.wte = nn.Embedding(cfg.vocab, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.h = nn.Sequential(*[Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        return self.lm_head(self.ln_f(self.h(x)))
