"""The shared machinery of the compact optimizers: a `torch.optim.Optimizer` whose states are 8-bit
companded codes (`companding`) and whose fp32 master weights live split across the 16-bit
parameter and an integer correction (`master_weights`).

Each subclass gives only the update rule on fp32 values (`math`). The driver decodes a parameter's
states, applies the rule, and codes them again, one *span* of consecutive chunks of `CHUNK`
elements per call: on CPU one chunk, so the fp32 temporaries stay small and in cache; on a GPU up
to `GPU_SPAN` elements, so a parameter takes one or a few calls rather than one per chunk (each
call launches dozens of kernels). Every chunk keeps its own gscale either way (`companding`), so
the span changes neither the results (bit-identical) nor the checkpoint format. The same
pure-torch code runs on CPU and GPU; by default it is fused by `torch.compile` (one C++ loop nest
on CPU, Triton on GPU; about 7x faster than eager on CPU, see BENCHMARKS-optim.md), compiled at
the first steps (tens of seconds on CPU). Where no compiler is available it falls back to the same
ops run eagerly, with a warning.
"""

from __future__ import annotations

import inspect
import math as pymath
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from hwtune.errors import HwtuneInputError
from hwtune.optim import companding as cq
from hwtune.optim import master_weights as mw
from hwtune.optim.numerics import UpdateTooSmallWarning, stalled_fraction

#: elements per chunk: the unit of one gscale in the stored state (a multiple of every supported
#: group size)
CHUNK = 1 << 16
#: elements per update call on non-CPU devices (256 chunks). A GPU pays a fixed cost per call
#: (about 120 aten ops eager, i.e. as many kernel launches, or the compiled function's guards),
#: so one call per chunk made GPT-2 XL's step 24,296 calls and 2.9 M ops; with spans of 2^24
#: elements every GPT-2 XL tensor but the embedding (5 spans) takes one call: 584 calls and 73 k
#: ops (``benchmarks/optim_span.py``), and a 7 B model's largest matrices (4096 x 11008 = 45 M)
#: take three. Larger spans would save few calls but grow the eager fp32 temporaries, each
#: 4 bytes x span = 64 MiB here (about a dozen live at once: under 1 GiB).
GPU_SPAN = 1 << 24
#: what each moment kind is coded as: signed momentum (int8) or second moment (uint8 of sqrt)
SIGNED, SECOND = "signed", "second"
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)

#: math(theta, g, moments, hp) -> (theta, moments): an update rule on fp32 tensors
UpdateRule = Callable[
    [torch.Tensor, torch.Tensor, list[torch.Tensor], Sequence[float]],
    tuple[torch.Tensor, list[torch.Tensor]],
]


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (FSDP2), or the tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


def update_span(
    rule: UpdateRule,
    param: torch.Tensor,
    corr: torch.Tensor | None,
    grad: torch.Tensor,
    codes: list[torch.Tensor],
    scales: list[torch.Tensor],
    gscales: list[torch.Tensor],
    kinds: tuple[str, ...],
    hp: Sequence[float],
    inv_grad_scale: float,
    group_size: int,
    companded: bool,
    chunk_groups: int,
) -> None:
    """Decode, update and re-code in place a span of consecutive chunks (flat views of the
    parameter and states, starting at a chunk boundary): ``chunk_groups`` groups per chunk, one
    gscale per chunk. A span of one chunk runs exactly the per-chunk ops."""
    n = param.numel()
    theta = mw.join(param, corr)
    g = grad.float()
    if inv_grad_scale != 1.0:
        g = g * inv_grad_scale
    moments = []
    for kind, c, s, gs in zip(kinds, codes, scales, gscales, strict=True):
        decode = cq.dequantize_signed if kind == SIGNED else cq.dequantize_second_moment
        moments.append(decode(c, s, gs, n, group_size, companded, chunk_groups))
    theta, moments = rule(theta, g, moments, hp)
    new_param, new_corr = mw.split(theta, param.dtype, None if corr is None else corr.dtype)
    param.copy_(new_param)
    if corr is not None:
        corr.copy_(new_corr)
    for kind, x, c, s, gs in zip(kinds, moments, codes, scales, gscales, strict=True):
        encode = cq.quantize_signed if kind == SIGNED else cq.quantize_second_moment
        new_c, new_s, new_gs = encode(x, group_size, companded, chunk_groups)
        c.copy_(new_c)
        s.copy_(new_s)
        gs.copy_(new_gs)


_compiled_update_span: Callable[..., None] | None = None
#: graphs `compiled_update_span` may compile before dynamo runs it eagerly: variants multiply
#: (optimizer kind, fp32 and 16-bit parameters, loss scaling, one-group tensors), and an eager
#: fallback costs ~7x per step for the rest of the run, a graph tens of seconds once
_RECOMPILE_LIMIT = 32


def compiled_update_span() -> Callable[..., None]:
    """`update_span` fused by `torch.compile` (one C++ loop nest on CPU, Triton on GPU).

    Sizes and hyperparameters start specialised and turn symbolic when they change (dynamo's
    automatic dynamic shapes): a handful of graphs (first step; spans of one and of many chunks;
    offset 0 or not; ragged or not; measured: 6 for GPT-2-like shapes with CPU and GPU spans),
    then none. Not ``dynamic=True``: that also makes ``group_size`` symbolic, and the C++ loops
    over groups of unknown length ran 16x slower on CPU. The variants multiply (ragged sizes,
    single groups and multi-chunk tails: 12 graphs in ``tests/optim/test_spans.py``), past
    dynamo's default limit of 8 per function, after which it silently runs eagerly; so where
    torch supports it this function gets a limit of its own (`_RECOMPILE_LIMIT`).
    """
    global _compiled_update_span
    if _compiled_update_span is None:
        extra: dict[str, Any] = {}
        if "recompile_limit" in inspect.signature(torch.compile).parameters:  # newer torch only
            extra["recompile_limit"] = _RECOMPILE_LIMIT
        _compiled_update_span = torch.compile(update_span, dynamic=None, **extra)
    return _compiled_update_span


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and value > 0 and pymath.isfinite(value)):
        raise HwtuneInputError(name, value, "a finite number > 0")


def _nonnegative(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and value >= 0 and pymath.isfinite(value)):
        raise HwtuneInputError(name, value, "a finite number >= 0")


def _unit(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and 0.0 <= value < 1.0):
        raise HwtuneInputError(name, value, "a number in [0, 1)")


class CompactOptimizer(torch.optim.Optimizer):
    """Base of `AdamW`, `SGD` and `Lion`: 8-bit companded states and split master weights.

    Options (keywords of every subclass):

    - ``master_weight_bits``: 24 (bf16 + int8 correction, default), 32 (+ int16: exact fp32) or
      16 (no correction). fp32 parameters need none; fp16 ones take the same correction sizes.
    - ``group_size``: elements per fp16 scale (32; 64 halves the scales' 0.125 bytes/param).
    - ``companded``: False codes the states linearly (for comparison only).
    - ``gradient_release``: update each parameter inside backward and free its gradient
      (`hwtune.optim.release`); call ``step()`` once per iteration all the same.
    - ``max_grad_norm``: global-norm clipping inside ``step()`` (not with gradient release).
    - ``numerics_check_every``: steps between checks that updates still change the stored weights
      (`hwtune.optim.numerics`; 0 disables).
    - ``compile``: fuse the update with `torch.compile` (default True).
    - ``span_elements``: elements per update call, a multiple of `CHUNK` (default None: one chunk
      on CPU, where small temporaries stay in cache; `GPU_SPAN` elsewhere, where each call costs
      dozens of kernel launches). Results are bit-identical for every value.

    Subclasses set `moments` (names and kinds of their states), implement `rule` (the update on
    fp32 values) and `hyperparameters` (the scalars `rule` reads, per group and step).
    """

    moments: tuple[tuple[str, str], ...] = ()
    # GradScaler hands the loss scale and the inf flag to `step` (grad_scale, found_inf)
    _step_supports_amp_scaling = True

    def __init__(
        self,
        params: Iterable[Any],
        defaults: dict[str, Any],
        *,
        master_weight_bits: int = 24,
        group_size: int = 32,
        companded: bool = True,
        gradient_release: bool = False,
        max_grad_norm: float | None = None,
        numerics_check_every: int = 100,
        compile: bool = True,
        span_elements: int | None = None,
    ) -> None:
        if master_weight_bits not in mw.CORRECTION_DTYPES:
            raise HwtuneInputError(
                "master_weight_bits", master_weight_bits, "16 (none), 24 (int8) or 32 (int16)"
            )
        if not (isinstance(group_size, int) and group_size > 0 and CHUNK % group_size == 0):
            raise HwtuneInputError("group_size", group_size, f"a power of two in [1, {CHUNK}]")
        if max_grad_norm is not None:
            _positive("max_grad_norm", max_grad_norm)
        if not (isinstance(numerics_check_every, int) and numerics_check_every >= 0):
            raise HwtuneInputError(
                "numerics_check_every", numerics_check_every, "an int >= 0 (0: never)"
            )
        if span_elements is not None and not (
            isinstance(span_elements, int)
            and not isinstance(span_elements, bool)
            and span_elements > 0
            and span_elements % CHUNK == 0
        ):
            raise HwtuneInputError(
                "span_elements",
                span_elements,
                f"None (device default) or a positive multiple of {CHUNK} (the chunk size)",
            )
        defaults = dict(defaults, master_weight_bits=master_weight_bits, group_size=group_size)
        defaults["companded"] = bool(companded)
        super().__init__(params, defaults)
        self.max_grad_norm = max_grad_norm
        self.numerics_check_every = numerics_check_every
        self.compile = bool(compile)
        # not a group default: state dicts saved before this option must still load
        self.span_elements = span_elements
        self._stalled: list[tuple[str, float, int]] = []
        self._release = None
        if gradient_release:
            from hwtune.optim.release import GradientRelease

            if max_grad_norm is not None:
                raise HwtuneInputError(
                    "max_grad_norm",
                    max_grad_norm,
                    "None with gradient_release=True (global-norm clipping needs every gradient "
                    "before the first update; gradient release updates each parameter inside "
                    "backward)",
                )
            self._release = GradientRelease(self)

    # --- parameters ------------------------------------------------------------------------------
    def param_name(self, p: torch.Tensor) -> str:
        """A parameter's name: from ``named_parameters()`` if given, else its place in the groups."""
        for gi, group in enumerate(self.param_groups):
            for i, q in enumerate(group["params"]):
                if q is p:
                    names = group.get("param_names")
                    return names[i] if names else f"param_groups[{gi}]['params'][{i}]"
        return f"<parameter of shape {tuple(p.shape)}>"

    def _check_param(self, p: torch.Tensor, group: dict[str, Any], i: int) -> None:
        names = group.get("param_names")
        name = names[i] if names else f"param_groups[{len(self.param_groups) - 1}]['params'][{i}]"
        if p.is_complex():
            raise HwtuneInputError(
                f"parameter {name!r}.dtype", p.dtype, "a real dtype (view_as_real complex ones)"
            )
        if p.dtype not in _SUPPORTED:
            raise HwtuneInputError(
                f"parameter {name!r}.dtype", p.dtype, "torch.bfloat16, torch.float16 or float32"
            )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """`torch.optim.Optimizer.add_param_group`, with the parameters' dtypes checked."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for i, p in enumerate(group["params"]):
            self._check_param(p, group, i)
        if getattr(self, "_release", None) is not None:
            self._release.watch(group)

    # --- the update ------------------------------------------------------------------------------
    @staticmethod
    def rule(
        theta: torch.Tensor, g: torch.Tensor, moments: list[torch.Tensor], hp: Sequence[float]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The update on fp32 values: (master, gradient, moments, scalars) -> (master, moments).
        A pure function (a static method), so that `torch.compile` traces it once per class."""
        raise NotImplementedError

    def hyperparameters(self, group: dict[str, Any], step: int) -> tuple[float, ...]:
        """The scalars `rule` reads for a parameter at ``step`` (1-based) in ``group``."""
        raise NotImplementedError

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        lp = local(p)
        n, gs = lp.numel(), group["group_size"]
        groups = cq.n_groups(n, gs)
        chunks = max(1, -(-n // CHUNK))
        state: dict[str, torch.Tensor] = {"step": torch.tensor(0.0)}
        corr_dtype = mw.correction_dtype(lp.dtype, group["master_weight_bits"])
        if corr_dtype is not None:
            state["master_correction"] = torch.zeros_like(lp, dtype=corr_dtype)
        for name, kind in self.moments:
            dtype = torch.int8 if kind == SIGNED else torch.uint8
            state[name] = torch.zeros(groups * gs, dtype=dtype, device=lp.device)
            state[name + "_scale"] = torch.zeros(groups, dtype=torch.float16, device=lp.device)
            state[name + "_gscale"] = torch.ones(chunks, dtype=torch.float32, device=lp.device)
        return state

    def _update(self, p: torch.Tensor, group: dict[str, Any], inv_grad_scale: float = 1.0) -> None:
        """Apply one step to one parameter from its ``.grad`` (called by `step` and by the
        gradient-release hook)."""
        grad = p.grad
        if grad.is_sparse or grad.layout != torch.strided:
            raise HwtuneInputError(
                f"parameter {self.param_name(p)!r}.grad.layout",
                grad.layout,
                "torch.strided (sparse gradients are not supported: use dense embeddings)",
            )
        if grad.is_complex():
            raise HwtuneInputError(
                f"parameter {self.param_name(p)!r}.grad.dtype", grad.dtype, "a real dtype"
            )
        state = self.state[p]
        if not state:
            state.update(self._init_state(p, group))
        state["step"] += 1
        step = int(state["step"].item())
        lp, lg = local(p), local(grad)
        corr = state.get("master_correction")
        check = (
            self.numerics_check_every
            and group["lr"] > 0
            and (step == 1 or step % self.numerics_check_every == 0)
        )
        before = mw.join(lp, corr).clone() if check else None
        contiguous = lp.is_contiguous()
        work = lp if contiguous else lp.contiguous()
        self._update_flat(
            work.view(-1),
            None if corr is None else corr.view(-1),
            lg.contiguous().view(-1),
            state,
            group,
            self.hyperparameters(group, step),
            inv_grad_scale,
        )
        if not contiguous:
            lp.copy_(work)
        if check:
            frac = stalled_fraction(before, mw.join(lp, corr), lg)
            if frac > 0.5:
                self._stalled.append((self.param_name(p), frac, step))

    def _update_flat(
        self,
        p: torch.Tensor,
        corr: torch.Tensor | None,
        g: torch.Tensor,
        state: dict[str, torch.Tensor],
        group: dict[str, Any],
        hp: Sequence[float],
        inv_grad_scale: float,
    ) -> None:
        gs, n = group["group_size"], p.numel()
        kinds = tuple(kind for _, kind in self.moments)
        span = self.span_elements or (CHUNK if p.device.type == "cpu" else GPU_SPAN)
        for start in range(0, n, span):  # spans start at chunk boundaries: span % CHUNK == 0
            end = min(n, start + span)
            g0, g1 = start // gs, cq.n_groups(end, gs)
            c0, c1 = start // CHUNK, -(-end // CHUNK)
            args = (
                self.rule,
                p[start:end],
                None if corr is None else corr[start:end],
                g[start:end],
                [state[name][g0 * gs : g1 * gs] for name, _ in self.moments],
                [state[name + "_scale"][g0:g1] for name, _ in self.moments],
                [state[name + "_gscale"][c0:c1] for name, _ in self.moments],
                kinds,
                hp,
                inv_grad_scale,
                gs,
                group["companded"],
                CHUNK // gs,
            )
            if self.compile:
                try:
                    with warnings.catch_warnings():  # inductor's notes while it compiles
                        warnings.simplefilter("ignore", UserWarning)
                        compiled_update_span()(*args)
                    continue
                except Exception as err:  # no C++ compiler / Triton: run the same ops eagerly
                    self.compile = False
                    warnings.warn(
                        f"hwtune.optim: torch.compile failed ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''}); running eagerly",
                        RuntimeWarning,
                        stacklevel=2,
                    )
            update_span(*args)

    def _grad_scale(self) -> tuple[float, bool]:
        """(1 / loss scale, found inf) as handed over by `torch.amp.GradScaler.step`."""
        scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        inf = bool(float(found_inf)) if found_inf is not None else False  # a tensor, or 0
        return (1.0 / float(scale) if scale is not None else 1.0), inf

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Update every parameter that has a gradient (with gradient release: the parameters
        whose hooks did not run, and close the iteration)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        inv_scale, found_inf = self._grad_scale()
        if self._release is not None:
            if getattr(self, "grad_scale", None) is not None:
                raise HwtuneInputError(
                    "GradScaler",
                    "a loss scale",
                    "no GradScaler with gradient_release=True (the updates ran inside backward, "
                    "before the scaler could unscale the gradients or check them for inf)",
                )
            self._release.end_iteration()
        if found_inf:
            return loss
        with_grad = [
            (p, group) for group in self.param_groups for p in group["params"] if p.grad is not None
        ]
        called_by_scaler = hasattr(self, "found_inf")  # GradScaler.step sets it
        for p, _ in with_grad:
            if p.dtype == torch.float16 and not called_by_scaler:
                raise HwtuneInputError(
                    f"parameter {self.param_name(p)!r}.dtype",
                    p.dtype,
                    "torch.bfloat16 or float32, or float16 stepped by torch.amp.GradScaler "
                    "(scaler.step(optimizer)): fp16 gradients underflow without loss scaling",
                )
        if self.max_grad_norm is not None and with_grad:
            torch.nn.utils.clip_grad_norm_(
                [p for p, _ in with_grad], self.max_grad_norm / inv_scale, foreach=True
            )
        for p, group in with_grad:
            self._update(p, group, inv_scale)
        self._warn_stalled()
        return loss

    def _warn_stalled(self) -> None:
        if not self._stalled:
            return
        name, frac, step = max(self._stalled, key=lambda t: t[1])
        more = len(self._stalled) - 1
        self._stalled = []
        warnings.warn(
            f"hwtune.optim: updates too small to change the stored weights: {frac:.0%} of the "
            f"elements of {name!r}{f' (and {more} more parameters)' if more else ''} kept their "
            f"value at step {step}; raise the learning rate or keep more master bits "
            "(master_weight_bits=32)",
            UpdateTooSmallWarning,
            stacklevel=5,  # the caller of optimizer.step() (through torch's two wrappers)
        )

    # --- checkpoints -----------------------------------------------------------------------------
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict saved by `state_dict`, keeping the 8-bit codes' dtypes (torch's
        loader casts every state tensor to the parameter's dtype)."""
        saved = state_dict["state"]
        for gi, group in enumerate(state_dict["param_groups"]):
            missing = sorted(set(self.defaults) - set(group))
            if missing:
                raise HwtuneInputError(
                    f"state_dict['param_groups'][{gi}]",
                    f"no {missing[0]!r}",
                    f"a state dict saved by hwtune.optim.{type(self).__name__}",
                )
        super().load_state_dict({**state_dict, "state": {}})
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        self.state.clear()
        for i, p in zip(ids, params, strict=True):
            if i not in saved:
                continue
            expected = self._init_state(p, self._group_of(p))
            loaded = {}
            for key, ref in expected.items():
                value = saved[i].get(key)
                if not isinstance(value, torch.Tensor):
                    raise HwtuneInputError(
                        f"state[{self.param_name(p)!r}][{key!r}]",
                        None if value is None else type(value).__name__,
                        "a tensor saved by a hwtune.optim optimizer with the same settings",
                    )
                if value.dtype != ref.dtype or value.shape != ref.shape:
                    raise HwtuneInputError(
                        f"state[{self.param_name(p)!r}][{key!r}]",
                        f"{value.dtype} {tuple(value.shape)}",
                        f"{ref.dtype} {tuple(ref.shape)} (same optimizer, group_size, "
                        "master_weight_bits and sharding)",
                    )
                loaded[key] = value.to(device=ref.device, copy=True)
            self.state[p] = loaded

    def _group_of(self, p: torch.Tensor) -> dict[str, Any]:
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                return group
        raise KeyError("parameter not in this optimizer")
