"""Checkpoints: compressed state dicts resume bit-identically, fp32 export/import round-trips, the
checkpoint is <= 45% of torch.optim.AdamW's, and a foreign state dict gets a clear error."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from tiny_models import GPT, CharData, corpus

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion, export_fp32_state_dict, load_fp32_state_dict
from hwtune.optim import master_weights as mw


def setup(cls, seed=0, **kw):
    torch.manual_seed(seed)
    data = CharData(corpus(20_000), 16)
    model = GPT(data.vocab, 16, d=32).to(torch.bfloat16)
    return model, cls(model.parameters(), compile=False, **kw), data


def train(model, opt, data, gen, steps, sched=None):
    for _ in range(steps):
        model.loss(*data.batch(gen, 4)).backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf


@pytest.mark.parametrize(("cls", "kw"), [(AdamW, {}), (SGD, {"momentum": 0.9}), (Lion, {})])
def test_round_trip_resumes_bit_identically(cls, kw):
    model, opt, data = setup(cls, **kw)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    gen = torch.Generator().manual_seed(0)
    train(model, opt, data, gen, 3, sched)
    blob = saved(
        {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    )
    gen_state = gen.get_state()
    train(model, opt, data, gen, 3, sched)  # the uninterrupted run

    model2, opt2, _ = setup(cls, seed=1, **kw)  # different initial weights, overwritten
    sched2 = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=10)
    blob.seek(0)
    ckpt = torch.load(blob, weights_only=True)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    sched2.load_state_dict(ckpt["sched"])
    gen2 = torch.Generator()
    gen2.set_state(gen_state)
    train(model2, opt2, data, gen2, 3, sched2)
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)
        for key, value in opt.state[p].items():
            assert torch.equal(value, opt2.state[q][key]), key


def test_state_dict_keeps_the_compressed_dtypes():
    model, opt, data = setup(AdamW)
    train(model, opt, data, torch.Generator().manual_seed(0), 1)
    state = opt.state_dict()["state"][0]
    assert state["exp_avg"].dtype == torch.int8 and state["exp_avg_sq"].dtype == torch.uint8
    assert state["master_correction"].dtype == torch.int8
    assert state["exp_avg_scale"].dtype == torch.float16


def test_checkpoint_is_under_45_percent_of_torch_adamw():
    torch.manual_seed(0)
    big = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 512))
    ref = copy.deepcopy(big)
    ref_opt = torch.optim.AdamW(ref.parameters())
    ours = big.to(torch.bfloat16)
    opt = AdamW(ours.parameters(), compile=False)
    for m, o in ((ref, ref_opt), (ours, opt)):
        x = torch.randn(4, 512, dtype=next(m.parameters()).dtype)
        m(x).float().sum().backward()
        o.step()
    size = lambda m, o: len(saved({"m": m.state_dict(), "o": o.state_dict()}).getvalue())  # noqa: E731
    ratio = size(ours, opt) / size(ref, ref_opt)
    assert ratio <= 0.45
    assert ratio == pytest.approx((2 + 1 + 1 + 1 + 4 / 32) / 12, abs=0.005)  # 5.125 / 12 bytes


def test_fp32_export_import_round_trip():
    model, opt, data = setup(AdamW)
    train(model, opt, data, torch.Generator().manual_seed(0), 3)
    exported = export_fp32_state_dict(model, opt)
    assert all(v.dtype == torch.float32 for v in exported.values())
    # the exported master rounds to the bf16 parameter, and is within half a bf16 ULP of it
    for name, p in model.named_parameters():
        assert torch.equal(mw.split_bf16(exported[name], torch.int8)[0], p.detach())
        assert ((exported[name] - p.float()).abs() <= p.float().abs() * 2.0**-8 + 1e-38).all()
    # into a fresh optimizer: same masters, moments start at zero
    model2, opt2, _ = setup(AdamW, seed=1)
    load_fp32_state_dict(model2, opt2, exported)
    again = export_fp32_state_dict(model2, opt2)
    for name in exported:
        assert torch.equal(again[name], exported[name])
    # and into plain fp32 torch
    plain = GPT(model.tok.num_embeddings, 16, d=32)
    plain.load_state_dict(exported, strict=False)
    assert torch.equal(plain.head.weight, exported["head.weight"])


def test_loading_a_torch_adamw_state_dict_is_refused():
    model, opt, data = setup(AdamW)
    ref = torch.optim.AdamW(model.parameters())
    model.loss(*data.batch(torch.Generator().manual_seed(0), 2)).backward()
    ref.step()
    with pytest.raises(HwtuneInputError, match=r"param_groups'\]\[0\].*hwtune\.optim\.AdamW"):
        opt.load_state_dict(ref.state_dict())


def test_import_checks_names_and_shapes():
    model, opt, _ = setup(AdamW)
    good = {k: v.float() for k, v in model.state_dict().items()}
    with pytest.raises(HwtuneInputError, match="missing"):
        load_fp32_state_dict(model, opt, {k: v for k, v in good.items() if k != "head.weight"})
    bad = dict(good, **{"head.weight": torch.zeros(3, 3)})
    with pytest.raises(HwtuneInputError, match=r"head\.weight.*shape"):
        load_fp32_state_dict(model, opt, bad)
