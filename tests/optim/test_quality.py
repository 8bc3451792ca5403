"""Quality (issue 5): final loss within 1% (relative) of the fp32 reference optimizer over the same
steps, seeds and batches: a character-level GPT on the repository's own source text. Shortened
from ``benchmarks/optim_quality.py`` (which also trains on scikit-learn's digits)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from reference import reference
from tiny_models import GPT, CharData, corpus

from hwtune.optim import SGD, AdamW, Lion

SETTINGS = {
    "adamw": (AdamW, {"lr": 3e-3, "weight_decay": 0.01}),
    "sgd": (SGD, {"lr": 0.3, "momentum": 0.9, "nesterov": True}),
    "lion": (Lion, {"lr": 3e-4, "weight_decay": 0.01}),
}


def train(model, opt, data, steps, batch=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = data.batch(gen, batch)
        model.loss(x, y).backward()
        opt.step()
        opt.zero_grad()


@torch.no_grad()
def evaluate(model, data, batches=8):
    gen = torch.Generator().manual_seed(1234)
    return sum(model.loss(*data.batch(gen, 32)).item() for _ in range(batches)) / batches


@pytest.mark.parametrize("name", ["adamw", "sgd", "lion"])
def test_final_loss_within_one_percent_of_fp32_reference(name):
    torch.manual_seed(0)
    data = CharData(corpus(120_000), block=32)
    ref_model = GPT(data.vocab, 32, d=32, layers=2, heads=4)
    ours_model = copy.deepcopy(ref_model).to(torch.bfloat16)
    cls, kw = SETTINGS[name]
    steps = 80
    initial = evaluate(ref_model, data)
    train(ref_model, reference(name, ref_model.parameters(), **kw), data, steps)
    train(ours_model, cls(ours_model.parameters(), compile=False, **kw), data, steps)
    ref_loss, ours_loss = evaluate(ref_model, data), evaluate(ours_model, data)
    assert ref_loss < 0.8 * initial  # the run learned something
    assert abs(ours_loss - ref_loss) / ref_loss < 0.01, (ours_loss, ref_loss)


@pytest.mark.parametrize("name", ["adamw", "sgd", "lion"])
def test_digits_final_loss_within_one_percent(name):
    """scikit-learn's digits (sparse 8x8 images: many inputs are exactly 0 in a batch, the case
    where a second moment decoded as 0 blows AdamW up)."""
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ours = copy.deepcopy(ref).to(torch.bfloat16)
    kw = {"adamw": {"lr": 1e-3}, "sgd": {"lr": 0.05, "momentum": 0.9}, "lion": {"lr": 1e-3}}[name]
    cls = SETTINGS[name][0]
    for model, opt in (
        (ref, reference(name, ref.parameters(), **kw)),
        (ours, cls(ours.parameters(), compile=False, **kw)),
    ):
        gen = torch.Generator().manual_seed(0)
        for _ in range(150):
            ix = torch.randint(1400, (64,), generator=gen)
            dtype = next(model.parameters()).dtype
            F.cross_entropy(model(x[ix].to(dtype)).float(), y[ix]).backward()
            opt.step()
            opt.zero_grad()
    with torch.no_grad():
        losses = [
            F.cross_entropy(m(x[1400:].to(m[0].weight.dtype)).float(), y[1400:]).item()
            for m in (ref, ours)
        ]
    assert losses[0] < 1.0  # it learned
    assert abs(losses[1] - losses[0]) / losses[0] < 0.01, losses
