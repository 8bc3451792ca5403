"""torch.optim options a ported training script passes: ``maximize`` (followed as torch does),
hyperparameters given as numpy scalars or 0-dim tensors (taken as the same Python float), and
torch's implementation selectors ``foreach`` / ``fused`` (accepted when they select nothing), and
AdamW's ``amsgrad`` (a third 8-bit state), each against torch.optim where torch has it."""

from __future__ import annotations

import copy

import pytest
import torch
from reference import ReferenceLion
from tiny_models import fit_ten_class
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion
from hwtune.optim.optimizer import CHUNK


def _start():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def _first_loss():
    """The untrained model's mean loss on the first 20 batches (lr 0: nothing moves)."""
    model = _start()
    return fit_ten_class(
        model, torch.optim.SGD(model.parameters(), lr=0.0), torch.float32, steps=20
    )


def _close(start, ref, ours, tol=0.10):
    """Every parameter within ``tol`` of the distance the reference moved it."""
    for p0, pr, po in zip(start.parameters(), ref.parameters(), ours.parameters(), strict=True):
        moved = (pr - p0).norm()
        assert moved > 0
        assert (po.float() - pr).norm() <= tol * moved


MAXIMIZE = {
    "adamw": (
        lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=0.1, maximize=True),
        lambda ps: AdamW(ps, lr=3e-3, weight_decay=0.1, maximize=True, compile=False),
    ),
    "sgd-momentum": (
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3, maximize=True),
        lambda ps: SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3, maximize=True, compile=False),
    ),
    "sgd-nesterov": (
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, maximize=True),
        lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True, maximize=True, compile=False),
    ),
    "sgd-plain": (
        lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=1e-2, maximize=True),
        lambda ps: SGD(ps, lr=0.05, weight_decay=1e-2, maximize=True, compile=False),
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(MAXIMIZE))
def test_maximize_tracks_torch_optim_over_300_steps(name, dtype):
    """Maximizing -loss with ``maximize=True`` (torch.optim.AdamW / SGD as the reference, both
    with weight decay, which is not negated): every parameter within 10% of the distance torch
    moved it and the final loss within 5% (the tolerance of test_optim_review's agreement
    tests), and the loss went down: the update climbs the objective it is given."""
    make_ref, make_ours = MAXIMIZE[name]
    start = _start()
    ref, ours = copy.deepcopy(start), copy.deepcopy(start).to(dtype)
    ref_loss = fit_ten_class(ref, make_ref(ref.parameters()), torch.float32, sign=-1.0)
    our_loss = fit_ten_class(ours, make_ours(ours.parameters()), dtype, sign=-1.0)
    exact = name == "sgd-plain" and dtype == torch.float32
    _close(start, ref, ours, tol=1e-5 if exact else 0.10)
    assert our_loss == pytest.approx(ref_loss, rel=0.05)
    assert our_loss < 0.5 * _first_loss()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lion_maximize_is_lion_on_the_negated_loss(dtype):
    """Lion(maximize=True) on -loss steps bit for bit as Lion on loss (negating a gradient is
    exact), and both track the fp32 textbook Lion on loss over 300 steps."""
    start = _start()
    ref, plain, maxi = (copy.deepcopy(start) for _ in range(3))
    plain, maxi = plain.to(dtype), maxi.to(dtype)
    kw = {"lr": 3e-4, "betas": (0.9, 0.99), "weight_decay": 0.1}
    ref_loss = fit_ten_class(ref, ReferenceLion(ref.parameters(), **kw), torch.float32)
    plain_loss = fit_ten_class(plain, Lion(plain.parameters(), compile=False, **kw), dtype)
    maxi_loss = fit_ten_class(
        maxi, Lion(maxi.parameters(), maximize=True, compile=False, **kw), dtype, -1
    )
    assert maxi_loss == plain_loss
    assert all(
        torch.equal(p, q) for p, q in zip(plain.parameters(), maxi.parameters(), strict=True)
    )
    _close(start, ref, maxi)
    assert maxi_loss == pytest.approx(ref_loss, rel=0.05)


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (AdamW, {"weight_decay": 0.1}),
        (SGD, {"momentum": 0.9, "weight_decay": 1e-2}),
        (SGD, {"weight_decay": 1e-2, "decoupled_weight_decay": True}),
        (Lion, {"weight_decay": 0.1}),
    ],
)
@pytest.mark.parametrize("path", ["alone", "buckets", "gradient_release"])
def test_maximize_on_g_is_minimize_on_minus_g_in_every_update_path(cls, kw, path):
    """Per group: a group with maximize=True fed g steps bit for bit as maximize=False fed -g,
    whether parameters are updated alone, in buckets (spans of several chunks) or inside
    backward (gradient release); the other group, maximize=False, is untouched by the flag."""
    opts = {"compile": False, "lr": 1e-2, **kw}
    if path == "buckets":
        opts["span_elements"] = 4 * CHUNK
    torch.manual_seed(0)
    w0 = [torch.randn(33, 7).to(torch.bfloat16), torch.randn(7), torch.randn(5).to(torch.bfloat16)]
    runs = []
    for maximize in (True, False):
        ps = [nn.Parameter(w.clone()) for w in w0]
        opt = cls(
            [{"params": ps[:2], "maximize": maximize}, {"params": ps[2:]}],
            gradient_release=path == "gradient_release",
            **opts,
        )
        assert opt.param_groups[0]["maximize"] is maximize
        assert opt.param_groups[1]["maximize"] is False
        gen = torch.Generator().manual_seed(1)
        for _ in range(4):
            dirs = [torch.randn(p.shape, generator=gen) for p in ps]
            signs = [1.0 if maximize else -1.0] * 2 + [1.0]
            loss = sum((s * d * p.float()).sum() for s, d, p in zip(signs, dirs, ps, strict=True))
            loss.backward()
            opt.step()
            opt.zero_grad()
        runs.append(ps)
    for p, q in zip(*runs, strict=True):
        assert torch.equal(p, q)
    assert not torch.equal(runs[0][0].float(), w0[0].float())


@pytest.mark.parametrize("cls", [AdamW, SGD, Lion])
def test_maximize_is_saved_loaded_and_defaults_false_for_older_state_dicts(cls):
    ps = [nn.Parameter(torch.zeros(4))]
    opt = cls([{"params": ps, "maximize": True}], compile=False)
    ps[0].grad = torch.ones(4)
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["maximize"] is True
    fresh = cls([nn.Parameter(torch.zeros(4))], compile=False)
    assert fresh.param_groups[0]["maximize"] is False
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["maximize"] is True
    # a state dict saved before the option existed: minimizing, as it was saved
    del sd["param_groups"][0]["maximize"]
    older = cls([nn.Parameter(torch.zeros(4))], maximize=True, compile=False)
    older.load_state_dict(sd)
    assert older.param_groups[0]["maximize"] is False
    assert "maximize" not in sd["param_groups"][0]  # the caller's dict is left as given
    # copies keep it
    assert copy.deepcopy(opt).param_groups[0]["maximize"] is True


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda ps: AdamW(ps, maximize="yes"), "maximize", "'yes'"),
        (lambda ps: SGD(ps, maximize=1), "maximize", "1"),
        (lambda ps: Lion(ps, maximize=None), "maximize", "None"),
        (lambda ps: AdamW([{"params": ps, "maximize": 0}]), "param_groups[0]['maximize']", "0"),
    ],
)
def test_maximize_must_be_a_bool(make, field, value):
    with pytest.raises(HwtuneInputError) as err:
        make([nn.Parameter(torch.zeros(2))])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == f"{field}: got {value}; expected True or False"


# --- hyperparameters as numpy scalars and 0-dim tensors -------------------------------------------
np = pytest.importorskip("numpy")

SCALARS = {
    "numpy": lambda x: np.float32(x),
    "numpy-float64": lambda x: np.float64(x),
    "tensor": lambda x: torch.tensor(x),
    "tensor-float64": lambda x: torch.tensor(x, dtype=torch.float64),
}
KINDS = [
    (AdamW, {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}),
    (SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-3}),
    (Lion, {"lr": 3e-4, "betas": (0.9, 0.99), "weight_decay": 0.1}),
]


def _as(kind, kw):
    """``kw`` with every number given as ``kind`` (betas element by element)."""
    to = SCALARS[kind]
    return {k: tuple(to(b) for b in v) if k == "betas" else to(v) for k, v in kw.items()}


def _same_value(kw, given):
    """The Python floats the given scalars stand for (np.float32(1e-3) is not 1e-3)."""
    return {k: tuple(float(b) for b in given[k]) if k == "betas" else float(given[k]) for k in kw}


def _steps(opt, ps, n=20):
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
        opt.step()


@pytest.mark.parametrize("kind", list(SCALARS))
@pytest.mark.parametrize(("cls", "kw"), KINDS, ids=["adamw", "sgd", "lion"])
def test_numpy_and_tensor_hyperparameters_step_as_the_same_floats(cls, kw, kind):
    """Every hyperparameter given as a numpy scalar or a 0-dim tensor: stored as the Python
    float it holds (betas a tuple of floats), in the constructor's defaults and in a group's own
    values, and 20 steps equal the run built from those floats bit for bit."""
    given = _as(kind, kw)
    floats = _same_value(kw, given)
    torch.manual_seed(0)
    w0 = [torch.randn(40, 3).to(torch.bfloat16), torch.randn(5)]
    a = [nn.Parameter(w.clone()) for w in w0]
    b = [nn.Parameter(w.clone()) for w in w0]
    ours = cls([{"params": a[:1]}, {"params": a[1:], **given}], compile=False, **given)
    ref = cls([{"params": b[:1]}, {"params": b[1:], **floats}], compile=False, **floats)
    for group in ours.param_groups:
        for key, value in floats.items():
            assert group[key] == value
            assert type(group[key]) is tuple if key == "betas" else type(group[key]) is float
        if "betas" in group:
            assert all(type(x) is float for x in group["betas"])
    _steps(ours, a)
    _steps(ref, b)
    for p, q in zip(a, b, strict=True):
        assert torch.equal(p, q)
    assert not torch.equal(a[0], w0[0])


def test_a_tensor_lr_is_read_once_not_shared():
    """torch.optim keeps a tensor lr by reference; these optimizers keep its value: changing
    the tensor later changes nothing (an LR scheduler sets the group's float instead)."""
    lr = torch.tensor(0.5)
    p = nn.Parameter(torch.zeros(4))
    opt = SGD([p], lr=lr, compile=False)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    lr.fill_(100.0)
    p.grad = torch.ones(4)
    opt.step()
    assert torch.equal(p.detach(), torch.full((4,), -0.5))
    schedule.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    opt.step()
    assert torch.allclose(p.detach(), torch.full((4,), -0.55))


def test_numpy_scalars_in_loaded_groups_and_max_grad_norm_become_floats():
    ps = [nn.Parameter(torch.zeros(4))]
    opt = AdamW(ps, max_grad_norm=np.float32(0.5), compile=False)
    assert type(opt.max_grad_norm) is float and opt.max_grad_norm == 0.5
    sd = opt.state_dict()
    sd["param_groups"][0]["lr"] = np.float64(0.25)
    sd["param_groups"][0]["betas"] = [torch.tensor(0.5), np.float32(0.75)]
    opt.load_state_dict(sd)
    assert type(opt.param_groups[0]["lr"]) is float and opt.param_groups[0]["lr"] == 0.25
    assert opt.param_groups[0]["betas"] == (0.5, 0.75)
    assert all(type(x) is float for x in opt.param_groups[0]["betas"])
    assert isinstance(sd["param_groups"][0]["lr"], np.float64)  # the caller's dict as given


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda ps: AdamW(ps, lr=np.bool_(True)), "lr", repr(np.bool_(True))),
        (lambda ps: AdamW(ps, lr=torch.tensor(True)), "lr", "tensor(True)"),
        (lambda ps: AdamW(ps, lr=np.float32("nan")), "lr", repr(np.float32("nan"))),
        (lambda ps: SGD(ps, lr=torch.tensor(float("nan"))), "lr", "tensor(nan)"),
        (lambda ps: AdamW(ps, eps=np.float64("inf")), "eps", repr(np.float64("inf"))),
        (lambda ps: Lion(ps, lr=torch.tensor(float("inf"))), "lr", "tensor(inf)"),
        (lambda ps: AdamW(ps, lr=np.float32(-1e-3)), "lr", repr(np.float32(-1e-3))),
        (lambda ps: AdamW(ps, eps=torch.tensor(0.0)), "eps", "tensor(0.)"),
        (lambda ps: SGD(ps, weight_decay=torch.tensor(-0.1)), "weight_decay", "tensor(-0.1000)"),
        (lambda ps: SGD(ps, momentum=np.float64(1.0)), "momentum", repr(np.float64(1.0))),
        (lambda ps: AdamW(ps, betas=(np.float32(0.9), torch.tensor(1.0))), "betas[1]", None),
        (lambda ps: AdamW(ps, lr=torch.tensor([1e-3])), "lr", "tensor([0.0010])"),
        (lambda ps: SGD(ps, lr=torch.ones(2, 2)), "lr", "tensor([[1., 1.], [1., 1.]])"),
        (lambda ps: Lion(ps, lr=torch.tensor(1e-3, requires_grad=True)), "lr", None),
        (lambda ps: AdamW(ps, lr=torch.tensor(1e-3 + 0j)), "lr", None),
        (lambda ps: AdamW(ps, lr=np.array(1e-3)), "lr", None),
        (lambda ps: AdamW(ps, lr="1e-3"), "lr", "'1e-3'"),
        (lambda ps: AdamW(ps, max_grad_norm=np.float32(0.0)), "max_grad_norm", None),
        (
            lambda ps: AdamW([{"params": ps, "lr": np.float32(-1.0)}]),
            "param_groups[0]['lr']",
            repr(np.float32(-1.0)),
        ),
    ],
)
def test_bad_scalars_are_still_refused_in_one_line(make, field, value):
    with pytest.raises(HwtuneInputError) as err:
        make([nn.Parameter(torch.zeros(2))])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{field}: got {'' if value is None else value}"), msg
    assert "; expected " in msg


# --- torch's implementation selectors (foreach, fused) and amsgrad ---------------------------------
TORCH_STYLE = [
    (AdamW, (3e-3, (0.9, 0.999), 1e-8, 0.1, False)),  # torch's positional order, amsgrad last
    (SGD, (0.05, 0.9, 0.0, 1e-3, True)),
    (Lion, (3e-4, (0.9, 0.99), 0.1)),
]


@pytest.mark.parametrize(("foreach", "fused"), [(None, None), (False, False), (None, False)])
@pytest.mark.parametrize(("cls", "args"), TORCH_STYLE, ids=["adamw", "sgd", "lion"])
def test_foreach_and_fused_none_or_false_are_taken_and_change_nothing(cls, args, foreach, fused):
    """A call written for torch.optim (its positional order, maximize, foreach, fused) builds
    the compact optimizer, which steps bit for bit as one built without the selectors; they
    are not stored in the groups (they select nothing here)."""
    torch.manual_seed(0)
    w0 = [torch.randn(40, 3).to(torch.bfloat16), torch.randn(5)]
    a = [nn.Parameter(w.clone()) for w in w0]
    b = [nn.Parameter(w.clone()) for w in w0]
    ours = cls(a, *args, maximize=False, foreach=foreach, fused=fused, compile=False)
    plain = cls(b, *args, compile=False)
    assert "foreach" not in ours.param_groups[0] and "fused" not in ours.param_groups[0]
    _steps(ours, a, 5)
    _steps(plain, b, 5)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    ours.add_param_group({"params": [nn.Parameter(torch.zeros(3))], "foreach": False})


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda ps: AdamW(ps, foreach=True), "foreach", "True"),
        (lambda ps: SGD(ps, fused=True), "fused", "True"),
        (lambda ps: Lion(ps, fused=True, foreach=False), "fused", "True"),
        (lambda ps: AdamW(ps, fused="yes"), "fused", "'yes'"),
        (lambda ps: SGD([{"params": ps, "fused": True}]), "param_groups[0]['fused']", "True"),
        (lambda ps: Lion([{"params": ps, "foreach": 1}]), "param_groups[0]['foreach']", "1"),
    ],
)
def test_foreach_or_fused_true_is_refused_in_one_line(make, field, value):
    with pytest.raises(ValueError) as err:  # HwtuneInputError is a ValueError
        make([nn.Parameter(torch.zeros(2))])
    assert isinstance(err.value, HwtuneInputError)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{field}: got {value}; expected None or False (hwtune.optim runs")
    assert "own update kernels" in msg


# --- AdamW(amsgrad=True) ----------------------------------------------------------------------------
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_amsgrad_tracks_torch_optim_over_300_steps(dtype, maximize):
    """AdamW(amsgrad=True) against torch.optim.AdamW(amsgrad=True) on the 300-step task of the
    agreement tests: every parameter within 10% of the distance torch moved it, the final loss
    within 5%. beta2 = 0.95 so that v falls well below its running max and v_max matters: torch's
    own run without amsgrad ends more than 10% away in every parameter and at another loss
    (checked), so the tolerance tells the two rules apart."""
    kw = {"lr": 3e-3, "betas": (0.9, 0.95), "weight_decay": 0.1, "maximize": maximize}
    sign = -1.0 if maximize else 1.0
    start = _start()
    ref, ours, plain = copy.deepcopy(start), copy.deepcopy(start), copy.deepcopy(start)
    ours = ours.to(dtype)
    ams = torch.optim.AdamW(ref.parameters(), amsgrad=True, **kw)
    ref_loss = fit_ten_class(ref, ams, torch.float32, sign)
    our_loss = fit_ten_class(
        ours, AdamW(ours.parameters(), amsgrad=True, compile=False, **kw), dtype, sign
    )
    plain_loss = fit_ten_class(
        plain, torch.optim.AdamW(plain.parameters(), **kw), torch.float32, sign
    )
    _close(start, ref, ours)
    assert our_loss == pytest.approx(ref_loss, rel=0.05)
    assert plain_loss != pytest.approx(ref_loss, rel=0.05)
    with torch.no_grad():
        for p0, pr, pp in zip(
            start.parameters(), ref.parameters(), plain.parameters(), strict=True
        ):
            assert (pp - pr).norm() > 0.10 * (pr - p0).norm()


def test_amsgrad_keeps_one_more_8_bit_state():
    """v_max as a third 8-bit state with its fp16 scales: 8 + 3 x 2/32 bytes per parameter
    (7 + 2 x 2/32 without), measured from the storage; it is never below v's decoded value."""
    from hwtune.optim import measure_footprint

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(torch.bfloat16)
    opt = AdamW(model.parameters(), amsgrad=True, compile=False)
    model(torch.randn(8, 512, dtype=torch.bfloat16)).float().pow(2).mean().backward()
    opt.step()
    assert measure_footprint(model, opt).bytes_per_param == pytest.approx(8 + 3 * 2 / 32, abs=1e-3)
    state = opt.state[model[0].weight]
    assert state["max_exp_avg_sq"].dtype == torch.uint8
    assert state["max_exp_avg_sq"].shape == state["exp_avg_sq"].shape


@pytest.mark.parametrize("cls_kw", [{"amsgrad": True}, {}])
def test_amsgrad_state_dicts_load_only_into_the_same_layout(cls_kw):
    ps = [nn.Parameter(torch.zeros(40))]
    opt = AdamW(ps, compile=False, **cls_kw)
    ps[0].grad = torch.ones(40)
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["amsgrad"] is bool(cls_kw)
    same = AdamW([nn.Parameter(torch.zeros(40))], compile=False, **cls_kw)
    same.load_state_dict(sd)
    assert same.param_groups[0]["amsgrad"] is bool(cls_kw)
    other = AdamW([nn.Parameter(torch.zeros(40))], amsgrad=not cls_kw, compile=False)
    with pytest.raises(HwtuneInputError):
        other.load_state_dict(sd)


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda ps: AdamW(ps, amsgrad=0), "amsgrad", "0"),
        (lambda ps: AdamW(ps, 1e-3, (0.9, 0.999), 1e-8, 0.0, "yes"), "amsgrad", "'yes'"),
        (lambda ps: AdamW([{"params": ps, "amsgrad": True}]), "param_groups[0]['amsgrad']", "True"),
    ],
)
def test_bad_amsgrad_is_refused_in_one_line(make, field, value):
    with pytest.raises(HwtuneInputError) as err:
        make([nn.Parameter(torch.zeros(2))])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{field}: got {value}; expected "), msg


@pytest.mark.parametrize("path", ["alone", "buckets", "gradient_release"])
def test_amsgrad_in_every_update_path_and_off_in_a_group(path):
    """amsgrad updates bit for bit alike alone, in buckets and inside backward; a group that
    turns it off in an amsgrad optimizer steps bit for bit as a plain AdamW."""
    opts = {"compile": False, "lr": 1e-2, "betas": (0.9, 0.95), "weight_decay": 0.1}
    on_path = {"span_elements": 4 * CHUNK} if path == "buckets" else {}
    torch.manual_seed(0)
    w0 = [torch.randn(33, 7).to(torch.bfloat16), torch.randn(7), torch.randn(5).to(torch.bfloat16)]
    runs = []
    for variant in ("amsgrad", "plain", "reference"):
        ps = [nn.Parameter(w.clone()) for w in w0]
        amsgrad = variant != "plain"
        groups = [{"params": ps[:2]}, {"params": ps[2:], "amsgrad": False}] if amsgrad else ps
        kw = {} if variant == "reference" else on_path  # the reference: alone, after backward
        release = path == "gradient_release" and variant != "reference"
        opt = AdamW(groups, amsgrad=amsgrad, gradient_release=release, **opts, **kw)
        gen = torch.Generator().manual_seed(1)
        for _ in range(6):
            scale = 1.0 if _ < 3 else 0.1  # shrinking gradients: v falls below v_max
            loss = sum((scale * torch.randn(p.shape, generator=gen) * p.float()).sum() for p in ps)
            loss.backward()
            opt.step()
            opt.zero_grad()
        runs.append(ps)
    amsgrad, plain, reference = runs
    assert all(torch.equal(p, q) for p, q in zip(amsgrad, reference, strict=True))
    assert torch.equal(amsgrad[2], plain[2])  # the group without amsgrad
    assert not torch.equal(amsgrad[0], plain[0])  # v_max changed the steps


@pytest.mark.parametrize(("cls", "keys"), [(AdamW, ("maximize", "amsgrad")), (SGD, ("maximize",))])
def test_an_optimizer_pickled_before_the_new_keys_gets_their_old_meaning(cls, keys):
    """An optimizer pickled (or deep-copied) by a version without ``maximize`` / ``amsgrad``
    comes back with both False in its defaults and groups, and steps; so do groups added later."""
    ps = [nn.Parameter(torch.ones(4))]
    opt = cls(ps, lr=0.1, compile=False)
    for key in keys:  # what an older version pickled
        del opt.defaults[key]
        del opt.param_groups[0][key]
    twin = copy.deepcopy(opt)
    for key in keys:
        assert twin.defaults[key] is False and twin.param_groups[0][key] is False
    q = next(iter(twin.param_groups[0]["params"]))
    q.grad = torch.ones(4)
    twin.step()
    assert torch.all(q.detach() < 1)  # minimizing
    twin.add_param_group({"params": [nn.Parameter(torch.zeros(2))]})
    assert all(twin.param_groups[1][key] is False for key in keys)


@pytest.mark.parametrize("cls", [AdamW, SGD, Lion])
@pytest.mark.parametrize("key", ["capturable", "differentiable"])
def test_capturable_and_differentiable_keywords(cls, key):
    """torch's constructor keywords are taken as None or False (a drop-in call passing
    ``capturable=False`` raised TypeError); True is refused in one line naming the keyword."""
    p = nn.Parameter(torch.zeros(8))
    for ok in (None, False):
        cls([p], lr=0.1, **{key: ok})
    with pytest.raises(HwtuneInputError) as err:
        cls([p], lr=0.1, **{key: True})
    assert str(err.value).startswith(f"{key}: got True") and "\n" not in str(err.value)
