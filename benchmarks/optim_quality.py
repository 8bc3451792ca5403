"""Quality of hwtune.optim's compact AdamW, SGD and Lion against fp32 references over the same
steps, seeds and batches (issue 5: final loss within 1% relative), and what companding buys over
linear int8 states. The figures of BENCHMARKS.md.

    python benchmarks/optim_quality.py                 # both tasks, all optimizers (~30 min on a busy core)
    python benchmarks/optim_quality.py --task digits --steps 300

Tasks (no downloads): a character-level GPT (nanoGPT's layout, shrunk) on the text this repository
holds (its Python sources and Markdown files, read at run time), and an MLP on scikit-learn's
8x8 digits (1,797 images, shipped with the package; ``pip install scikit-learn``). References:
``torch.optim.AdamW`` / ``torch.optim.SGD`` with fp32 weights (fp32 master), and Lion in fp32
(Chen et al. 2023, Algorithm 2; torch has none). Ours: the same initial weights cast to bf16 (the
model computes in bf16), 8-bit companded states, 24-bit split master. Final loss = mean
cross-entropy of the trained model on fixed held-out batches. Ablations: "linear int8" uses
``companded=False`` (linear int8 / uint8 codes, same groups and scales); "v code 0 -> 0" decodes
the second moment's bottom bin as 0 instead of its centre (``companding.ZERO_BIN_CENTRE``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hwtune.optim import SGD, AdamW, Lion
from hwtune.optim import companding as cq

ROOT = Path(__file__).resolve().parents[1]


class RefLion(torch.optim.Optimizer):
    """Lion in fp32, the textbook rule (Chen et al. 2023, Algorithm 2)."""

    def __init__(self, params, lr, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                c = m.lerp(p.grad, 1 - b1)
                p.mul_(1 - g["lr"] * g["weight_decay"]).add_(c.sign(), alpha=-g["lr"])
                m.lerp_(p.grad, 1 - b2)


# name -> (ours, reference, hyperparameters); per task below
OPTIMIZERS = {
    "adamw": (AdamW, lambda ps, **kw: torch.optim.AdamW(ps, foreach=True, **kw)),
    "sgd": (SGD, lambda ps, **kw: torch.optim.SGD(ps, foreach=True, **kw)),
    "lion": (Lion, RefLion),
}


# --- the character-level GPT ----------------------------------------------------------------------
def corpus() -> str:
    files = sorted((ROOT / "src").rglob("*.py")) + sorted(ROOT.glob("*.md"))
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, d, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


class TextTask:
    name = "char-gpt"
    settings = {
        "adamw": {"lr": 3e-3, "weight_decay": 0.01},
        "sgd": {"lr": 0.1, "momentum": 0.9, "nesterov": True},  # 0.3: fp32 torch SGD diverges
        "lion": {"lr": 3e-4, "weight_decay": 0.01},
    }

    def __init__(self, block=64, batch=16, d=96, layers=3, heads=4):
        text = corpus()
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        data = torch.tensor([index[c] for c in text])
        split = int(0.9 * len(data))
        self.train_data, self.val_data = data[:split], data[split:]
        self.vocab, self.block, self.batch = len(chars), block, batch
        self.shape = (d, layers, heads)
        self.chars = len(text)

    def model(self):
        return GPT(self.vocab, self.block, *self.shape)

    def _batch(self, data, gen, size):
        ix = torch.randint(len(data) - self.block - 1, (size,), generator=gen).tolist()
        x = torch.stack([data[i : i + self.block] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + self.block] for i in ix])
        return x, y

    def loss(self, model, x, y):
        return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())

    def train_batch(self, gen):
        return self._batch(self.train_data, gen, self.batch)

    def eval_batches(self):
        gen = torch.Generator().manual_seed(1234)
        return [self._batch(self.val_data, gen, 64) for _ in range(16)]


# --- scikit-learn digits --------------------------------------------------------------------------
class DigitsTask:
    name = "digits-mlp"
    settings = {
        "adamw": {"lr": 1e-3, "weight_decay": 0.01},
        "sgd": {"lr": 0.05, "momentum": 0.9},
        "lion": {"lr": 1e-4, "weight_decay": 0.01},
    }

    def __init__(self, batch=64):
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x, dtype=torch.float32) / 16.0
        y = torch.tensor(y)
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        x, y = x[perm], y[perm]
        self.x_train, self.y_train = x[:1400], y[:1400]
        self.x_val, self.y_val = x[1400:], y[1400:]
        self.batch = batch

    def model(self):
        return nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def loss(self, model, x, y):
        dtype = next(model.parameters()).dtype
        return F.cross_entropy(model(x.to(dtype)).float(), y)

    def train_batch(self, gen):
        ix = torch.randint(len(self.x_train), (self.batch,), generator=gen)
        return self.x_train[ix], self.y_train[ix]

    def eval_batches(self):
        return [(self.x_val, self.y_val)]


# --- runs -----------------------------------------------------------------------------------------
def run(task, model, opt, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        task.loss(model, *task.train_batch(gen)).backward()
        opt.step()
        opt.zero_grad()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        batches = task.eval_batches()
        loss = sum(task.loss(model, x, y).item() for x, y in batches) / len(batches)
    return loss, seconds


def compare(task, name, steps, linear=False):
    torch.manual_seed(0)
    ref_model = task.model()
    ours_model = copy.deepcopy(ref_model).to(torch.bfloat16)
    ours_cls, ref_cls = OPTIMIZERS[name]
    kw = task.settings[name]
    with torch.no_grad():
        initial = sum(task.loss(ref_model, x, y).item() for x, y in task.eval_batches())
        initial /= len(task.eval_batches())
    ref_loss, ref_s = run(task, ref_model, ref_cls(ref_model.parameters(), **kw), steps)
    opt = ours_cls(ours_model.parameters(), compile=False, numerics_check_every=0, **kw)
    ours_loss, ours_s = run(task, ours_model, opt, steps)
    row = {
        "task": task.name,
        "optimizer": name,
        "steps": steps,
        "initial": initial,
        "reference": ref_loss,
        "ours": ours_loss,
        "rel_diff": (ours_loss - ref_loss) / ref_loss,
        "seconds": {"reference": ref_s, "ours": ours_s},
    }
    if linear:  # ablations: linear int8 codes, and code 0 of v decoded as 0 (not 1/4 step)
        for key, companded, centre in (
            ("linear_int8", False, 0.25),
            ("companded_zero_to_zero", True, 0.0),
            ("linear_int8_zero_to_zero", False, 0.0),
        ):
            torch.manual_seed(0)
            abl_model = task.model().to(torch.bfloat16)
            abl_opt = ours_cls(
                abl_model.parameters(),
                compile=False,
                companded=companded,
                numerics_check_every=0,
                **kw,
            )
            cq.ZERO_BIN_CENTRE = centre
            try:
                loss, _ = run(task, abl_model, abl_opt, steps)
            finally:
                cq.ZERO_BIN_CENTRE = 0.25
            row[key] = loss if math.isfinite(loss) else "diverged (nan)"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["all", "text", "digits"], default="all")
    ap.add_argument("--steps", type=int, default=0, help="0: 300 for text, 600 for digits")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizers", default="adamw,sgd,lion")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tasks = []
    if args.task in ("all", "text"):
        tasks.append((TextTask(), args.steps or 300))
    if args.task in ("all", "digits"):
        tasks.append((DigitsTask(), args.steps or 600))
    rows = []
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(
        "| task | optimizer | steps | initial | fp32 reference | ours | rel. diff | linear int8 "
        "| ours, v code 0 -> 0 | linear int8, v code 0 -> 0 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task, steps in tasks:
        for name in args.optimizers.split(","):
            row = compare(task, name, steps, linear=True)
            rows.append(row)
            abl = [
                row[k]
                for k in ("linear_int8", "companded_zero_to_zero", "linear_int8_zero_to_zero")
            ]
            abl = " | ".join(f"{a:.4f}" if isinstance(a, float) else a for a in abl)
            print(
                f"| {row['task']} | {name} | {steps} | {row['initial']:.4f} | "
                f"{row['reference']:.4f} | {row['ours']:.4f} | {100 * row['rel_diff']:+.2f}% | "
                f"{abl} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
