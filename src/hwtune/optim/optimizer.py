"""The shared machinery of the compact optimizers: a `torch.optim.Optimizer` whose states are 8-bit
companded codes (`companding`) and whose fp32 master weights live split across the 16-bit
parameter and an integer correction (`master_weights`).

Each subclass gives only the update rule on fp32 values (`math`). The driver decodes a parameter's
states, applies the rule, and codes them again, one *span* of consecutive chunks of `CHUNK`
elements per call: on CPU one chunk, so the fp32 temporaries stay small and in cache; on a GPU up
to `GPU_SPAN` elements, so a parameter takes one or a few calls rather than one per chunk (each
call launches dozens of kernels), and parameters of up to a quarter span (biases, norms, most
matrices of small models) are copied into *buckets* of up to a span, updated in one call and
copied back (GPT-2 XL: 584 calls a step without buckets, 159 with). Every chunk keeps its own
gscale either way (`companding`) and a bucket's padding stays zero, so neither the span nor the
buckets change the results (bit-identical) or the checkpoint format. The same pure-torch code
runs on CPU and GPU; on CPU it is fused by default by `torch.compile` (one C++ loop nest, about
7x faster than eager, see BENCHMARKS.md), compiled at the first steps (tens of seconds). GPUs
run it eagerly by default (see ``compile`` in `CompactOptimizer`). Where no compiler is available
it falls back to the same ops run eagerly, with a warning.
"""

from __future__ import annotations

import inspect
import itertools
import math as pymath
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hwtune.errors import HwtuneInputError
from hwtune.optim import companding as cq
from hwtune.optim import master_weights as mw
from hwtune.optim.numerics import (
    DecayTooSmallWarning,
    UpdateTooSmallWarning,
    decay_threshold,
    stalled_fraction,
)

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
#: parameters of at most 1/BUCKET_DIVISOR span (padded to whole chunks) are updated together in
#: buckets of up to a span (`CompactOptimizer._update_bucket`); larger ones alone, in place
BUCKET_DIVISOR = 4
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
    valid: torch.Tensor | None = None,
) -> None:
    """Decode, update and re-code in place a span of consecutive chunks (flat views of the
    parameter and states, starting at a chunk boundary): ``chunk_groups`` groups per chunk, one
    gscale per chunk. A span of one chunk runs exactly the per-chunk ops.

    ``valid`` (bool, one per element) marks the elements of a *bucket* (several parameters, each
    zero-padded to whole chunks, `CompactOptimizer._update_bucket`) that belong to a parameter:
    decoded moments are zeroed elsewhere, so the padding stays exactly zero through the rule and
    each parameter is coded as it would be alone (a second moment's code 0 decodes to 1/4 step,
    not to 0)."""
    n = param.numel()
    theta = mw.join(param, corr)
    g = grad.float()
    if inv_grad_scale != 1.0:
        g = g * inv_grad_scale
    moments = []
    for kind, c, s, gs in zip(kinds, codes, scales, gscales, strict=True):
        decode = cq.dequantize_signed if kind == SIGNED else cq.dequantize_second_moment
        m = decode(c, s, gs, n, group_size, companded, chunk_groups)
        moments.append(m if valid is None else torch.where(valid, m, 0.0))
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


#: positions of ``hp`` and ``group_size`` among `update_span`'s arguments
_HP_ARG = list(inspect.signature(update_span).parameters).index("hp")
_GS_ARG = list(inspect.signature(update_span).parameters).index("group_size")
_compiled_update_span: Callable[..., None] | None = None
#: graphs `compiled_update_span` may compile before dynamo runs it eagerly: variants multiply
#: (optimizer kind, fp32 and 16-bit parameters, loss scaling, one-group tensors), and an eager
#: fallback costs ~7x per step for the rest of the run, a graph tens of seconds once
_RECOMPILE_LIMIT = 32


def compiled_update_span() -> Callable[..., None]:
    """`update_span` fused by `torch.compile` (one C++ loop nest on CPU, Triton on GPU).

    Sizes start specialised and turn symbolic when they change (dynamo's automatic dynamic
    shapes); the hyperparameters that change between steps come as tensors
    (`CompactOptimizer.step_varying`). So a handful of graphs (first step; spans of one and of
    many chunks; buckets; offset 0 or not; ragged or not; measured: 8 for GPT-2-like shapes with
    CPU and GPU spans), then none. Not ``dynamic=True``: that also makes ``group_size`` symbolic,
    and the C++ loops over groups of unknown length ran 16x slower on CPU. The variants multiply
    (ragged sizes, single groups and multi-chunk tails: 12 graphs in
    ``tests/optim/test_spans.py``), past dynamo's default limit of 8 per function, after which it
    silently runs eagerly; so this function gets a limit of its own (`_RECOMPILE_LIMIT`): through
    ``torch.compile`` where it takes one, else dynamo's global limit raised around our calls.
    """
    global _compiled_update_span
    if _compiled_update_span is None:
        extra: dict[str, Any] = {}
        if _compile_takes_recompile_limit():  # newer torch
            extra["recompile_limit"] = _RECOMPILE_LIMIT
        compiled = torch.compile(update_span, dynamic=None, **extra)
        settings = _dynamo_settings()
        if not settings:
            _compiled_update_span = compiled
        else:

            def run(*args: Any) -> None:
                with torch._dynamo.config.patch(**settings):
                    compiled(*args)

            _compiled_update_span = run
    return _compiled_update_span


def _compile_takes_recompile_limit() -> bool:
    return "recompile_limit" in inspect.signature(torch.compile).parameters


def _dynamo_settings() -> dict[str, Any]:
    """dynamo settings our calls need where this torch's defaults differ, applied around our
    calls only: the per-function recompile limit raised to `_RECOMPILE_LIMIT` where
    ``torch.compile`` takes none of its own (torch 2.11: dynamo's global ``recompile_limit``,
    formerly ``cache_size_limit``, of 8). Floats that change between steps are handed over as
    tensors instead (`CompactOptimizer.step_varying`)."""
    cfg = torch._dynamo.config
    out: dict[str, Any] = {}
    if not _compile_takes_recompile_limit():
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        out[name] = max(getattr(cfg, name), _RECOMPILE_LIMIT)
    return out


def _padded(numel: int) -> int:
    """Elements of a parameter padded to whole chunks (at least one)."""
    return max(1, -(-numel // CHUNK)) * CHUNK


def clip_grad_norm_fp32(grads: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place so that their global L2 norm is at most ``max_norm``, as
    `torch.nn.utils.clip_grad_norm_` does (coefficient max_norm / (norm + 1e-6), capped at 1),
    but with every norm taken in fp32. torch takes each tensor's norm in its own dtype, so
    loss-scaled fp16 gradients whose norm passes fp16's 65,504 give an infinite norm while
    every element is finite, and the clip coefficient 0 wipes the step (and GradScaler, which
    sees no inf, keeps the scale). Returns the total norm (fp32; 0 for no gradients).

    One fused kernel per device and dtype (``torch._foreach_norm`` with an fp32 accumulator,
    ``torch._foreach_mul_``), as torch's own clipping groups them, not one per tensor."""
    if not grads:
        return torch.zeros((), dtype=torch.float32)
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        if g.numel():  # empty tensors among others corrupt _foreach_norm on CUDA (torch #140066)
            groups.setdefault((g.device, g.dtype), []).append(g)
    first = grads[0].device
    norms = [
        n.to(first)
        for gs in groups.values()
        for n in torch._foreach_norm(gs, 2, dtype=torch.float32)
    ]
    if not norms:
        return torch.zeros((), dtype=torch.float32, device=first)
    total = torch.linalg.vector_norm(torch.stack(norms))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for (device, _), gs in groups.items():
        torch._foreach_mul_(gs, coef.to(device))
    return total


def _buckets(items: list[_Pending], span: int) -> list[list[_Pending]]:
    """Consecutive parameters grouped into buckets of at most ``span`` padded elements."""
    out: list[list[_Pending]] = []
    fill = span
    for item in items:
        padded = _padded(item.lp.numel())
        if fill + padded > span:
            out.append([])
            fill = 0
        out[-1].append(item)
        fill += padded
    return out


@dataclass
class _Pending:
    """One parameter's step between its checks (`CompactOptimizer._begin`) and its update."""

    p: torch.Tensor
    lp: torch.Tensor  # local shard of the parameter
    lg: torch.Tensor  # local shard of its gradient
    corr: torch.Tensor | None
    state: dict[str, torch.Tensor]
    step: int
    before: torch.Tensor | None  # master weights before the update, when they are checked
    hp: tuple[float, ...]  # the scalars `rule` reads for this step (`_step_hyperparameters`)


def _is_real(value: Any) -> bool:
    """A Python int or float, not a bool (True would otherwise pass as 1)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _real(value: Any) -> float | None:
    """A real scalar as a Python float, else None: any `numbers.Real` but bool (int, float,
    numpy's floating and integer scalars) or a 0-dim real CPU tensor without grad (torch.optim
    takes a tensor lr). Stored as the float, so the update reads plain numbers whatever was
    given, and a tensor given as lr is not shared with the optimizer."""
    if isinstance(value, torch.Tensor):
        plain = (
            value.dim() == 0
            and not value.requires_grad
            and value.device.type == "cpu"
            and not value.is_complex()
            and value.dtype != torch.bool
        )
        return float(value.item()) if plain else None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int beyond float's range
            return None
    return None


class _OneLine:
    """A refused value as errors show it: its repr on one line (a tensor's spans its rows)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return " ".join(repr(self.value).split())


def _shown(value: Any) -> Any:
    """``value`` for an error message: itself, or wrapped where its repr spans lines."""
    return _OneLine(value) if "\n" in repr(value) else value


def _expected(value: Any, what: str) -> str:
    """What a number field expects; for a refused tensor, also which tensors are taken."""
    if isinstance(value, torch.Tensor):
        return f"{what} (a tensor only 0-dim, real, on the CPU and without grad)"
    return what


def _positive(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number > 0, else a one-line error."""
    x = _real(value)
    if not (x is not None and x > 0 and pymath.isfinite(x)):
        raise HwtuneInputError(name, _shown(value), _expected(value, "a finite number > 0"))
    return x


def _nonnegative(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number >= 0, else a one-line error."""
    x = _real(value)
    if not (x is not None and x >= 0 and pymath.isfinite(x)):
        raise HwtuneInputError(name, _shown(value), _expected(value, "a finite number >= 0"))
    return x


def _unit(name: str, value: Any) -> float:
    """``value`` as a float if it is a real number in [0, 1), else a one-line error."""
    x = _real(value)
    if not (x is not None and 0.0 <= x < 1.0):
        raise HwtuneInputError(name, _shown(value), _expected(value, "a number in [0, 1)"))
    return x


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise HwtuneInputError(name, value, "True or False")


def _betas(name: str, value: Any) -> tuple[float, float]:
    """A pair (beta1, beta2), each in [0, 1), as a tuple of floats."""
    if not (isinstance(value, tuple | list) and len(value) == 2):
        raise HwtuneInputError(name, value, "a pair (beta1, beta2) of numbers in [0, 1)")
    return _unit(f"{name}[0]", value[0]), _unit(f"{name}[1]", value[1])


def _grad_factor(group: dict[str, Any], inv_grad_scale: float) -> float:
    """What `update_span` multiplies the stored gradient by: 1 / loss scale, negated in a
    ``maximize`` group (``torch.optim``'s rule: the update follows -g, before weight decay)."""
    return -inv_grad_scale if group.get("maximize", False) else inv_grad_scale


def decoupled_decay_step(group: dict[str, Any]) -> tuple[float, str]:
    """`CompactOptimizer.weight_decay_step` of a decoupled decay theta <- theta (1 - lr wd): every
    weight shrinks by r = lr wd per step, whatever its gradient."""
    lr, wd = float(group["lr"]), float(group["weight_decay"])
    return lr * wd, f"lr {lr:g} x weight_decay {wd:g}"


_INTERNAL_DIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)


def _user_stacklevel() -> int:
    """The ``stacklevel`` (counted from the caller of this function) of the first frame outside
    hwtune.optim and torch: the user's ``optimizer.step()`` line, however many wrappers torch
    put around it (an LR scheduler adds one; ``warnings.warn``'s ``skip_file_prefixes`` is
    Python 3.12+)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _INTERNAL_DIRS
    ):
        frame, level = frame.f_back, level + 1
    return level


def _decay_message(
    gi: int,
    group: dict[str, Any],
    how: str,
    rate: float,
    p: int,
    dtype: torch.dtype,
    corr: torch.dtype | None,
) -> str:
    """`DecayTooSmallWarning`'s one line (`CompactOptimizer._warn_decay`)."""
    name = str(dtype).removeprefix("torch.")
    if corr is not None:
        master = f"{name} + {str(corr).removeprefix('torch.')}, master_weight_bits="
        master += str(group["master_weight_bits"])
    elif dtype == torch.float32:
        master = "float32 parameter, no split"
    else:
        master = f"{name} alone, master_weight_bits={group['master_weight_bits']}"
    fp32 = mw.significant_bits(torch.float32, None)
    if p < fp32:
        todo = (
            f"keep more master bits (master_weight_bits=32 resolves 2^-{fp32 + 1}), raise "
            "lr x weight_decay, or accept it"
        )
    else:
        todo = "fp32 resolves no finer (torch.optim in fp32 loses it too): raise it or accept it"
    return (
        f"hwtune.optim: weight decay too small to change the stored weights in "
        f"param_groups[{gi}]: {how} = {rate:.3g} < 2^-{p + 1} = {decay_threshold(p):.3g}, "
        f"below which a master of {p} significant bits ({master}) rounds every weight's decay "
        f"away: weights whose update is otherwise zero (zero gradient) are never decayed; {todo}"
    )


def _group_field(gi: int | None, key: str) -> str:
    """How a hyperparameter is named in errors: ``lr`` for a constructor argument,
    ``param_groups[1]['lr']`` for a value given in a parameter group."""
    return key if gi is None else f"param_groups[{gi}][{key!r}]"


#: torch.optim's implementation selectors, accepted for drop-in use where they select nothing
_TORCH_SELECTORS = ("foreach", "fused")
#: torch.optim group options these optimizers do not implement (README: not supported)
_UNSUPPORTED_GROUP_FLAGS = ("capturable", "differentiable")


def _no_torch_kernels(name: str, value: Any) -> None:
    """``foreach`` / ``fused``: None or False; True would ask for torch's implementations,
    which these optimizers do not use (their update is their own, fused by `torch.compile`)."""
    if value is not None and value is not False:
        raise HwtuneInputError(
            name,
            value,
            "None or False (hwtune.optim runs its own update kernels, fused by torch.compile: "
            "see its compile option; torch's foreach and fused implementations do not apply)",
        )


def _unsupported_flag(field: str, key: str, value: Any) -> None:
    """torch's ``capturable`` / ``differentiable``: taken as None or False (what they ask of
    torch's own implementations does not apply here); anything else is refused."""
    if value is not None and value is not False:
        raise HwtuneInputError(field, value, f"None or False ({key} is not supported)")


def _check_options(values: dict[str, Any], gi: int | None) -> None:
    """The per-group options every compact optimizer keeps (see `CompactOptimizer`), and torch's
    implementation selectors where a group gives them."""
    for key in _TORCH_SELECTORS:
        if key in values:
            _no_torch_kernels(_group_field(gi, key), values[key])
    for key in _UNSUPPORTED_GROUP_FLAGS:  # a group key torch would act on: not silently kept
        if key in values:
            _unsupported_flag(_group_field(gi, key), key, values[key])
    bits = values["master_weight_bits"]
    if not (_is_real(bits) and isinstance(bits, int) and bits in mw.CORRECTION_DTYPES):
        raise HwtuneInputError(
            _group_field(gi, "master_weight_bits"), bits, "16 (none), 24 (int8) or 32 (int16)"
        )
    size = values["group_size"]
    if not (_is_real(size) and isinstance(size, int) and size > 0 and CHUNK % size == 0):
        raise HwtuneInputError(
            _group_field(gi, "group_size"), size, f"a power of two in [1, {CHUNK}]"
        )
    _flag(_group_field(gi, "companded"), values["companded"])


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
      (`hwtune.optim.numerics`; 0 disables). Every step, unless 0, also checks (on scalars) that
      each group's weight decay per step is above what its master weights resolve
      (`weight_decay_step`, `DecayTooSmallWarning`).
    - ``compile``: fuse the update with `torch.compile`. None (default): on CPU only, where the
      fused step is ~7x faster than eager; GPUs run eagerly, the configuration measured there
      (one H200, torch 2.11: 0.35 s per GPT-2 XL step). The compiled GPU step measured 7.5 s,
      recompiling every step; the cause was found and fixed on the CPU (`step_varying`), but the
      compiled GPU step has not been timed since (BENCHMARKS.md). True fuses everywhere.
    - ``span_elements``: elements per update call, a multiple of `CHUNK` (default None: one chunk
      on CPU, where small temporaries stay in cache; `GPU_SPAN` elsewhere, where each call costs
      dozens of kernel launches). Results are bit-identical for every value.
    - ``foreach``, ``fused``: torch.optim's choice of its own implementations, taken for drop-in
      use as None or False (the defaults; also as keys of a parameter group) and otherwise
      ignored: these optimizers run their own update (``compile`` fuses it, and on GPUs small
      parameters are updated together in buckets). True is refused with a one-line error.
    - ``capturable``, ``differentiable``: taken as None or False for drop-in calls (also in a
      group); True is refused (CUDA-graph capture of the step and autograd through it are not
      supported).

    Subclasses set `moments` (names and kinds of their states), implement `rule` (the update on
    fp32 values) and `hyperparameters` (the scalars `rule` reads, per group and step).
    """

    moments: tuple[tuple[str, str], ...] = ()
    #: indices of the `hyperparameters` that change between steps (a schedule's lr, bias
    #: corrections) and that `rule` uses only in arithmetic: the compiled update takes them as
    #: 0-d float64 tensors, which dynamo does not specialise on, so new values recompile nothing
    #: (torch 2.11 guarded on a float's value and compiled again every step). Their arithmetic
    #: among themselves stays in double and meets fp32 tensors as a Python float does.
    step_varying: tuple[int, ...] = (0,)
    # GradScaler hands the loss scale and the inf flag to `step` (grad_scale, found_inf)
    _step_supports_amp_scaling = True
    #: a subclass's group keys added after its state dicts were first saved, with the value an
    #: older group meant: `load_state_dict` and unpickling fill them in where they are missing
    _ADDED_GROUP_KEYS: dict[str, Any] = {}

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
        compile: bool | None = None,
        span_elements: int | None = None,
        foreach: bool | None = None,
        fused: bool | None = None,
        capturable: bool | None = None,
        differentiable: bool | None = None,
    ) -> None:
        _no_torch_kernels("foreach", foreach)
        _no_torch_kernels("fused", fused)
        _unsupported_flag("capturable", "capturable", capturable)
        _unsupported_flag("differentiable", "differentiable", differentiable)
        _check_options(
            {
                "master_weight_bits": master_weight_bits,
                "group_size": group_size,
                "companded": companded,
            },
            None,
        )
        _flag("gradient_release", gradient_release)
        if max_grad_norm is not None:
            max_grad_norm = _positive("max_grad_norm", max_grad_norm)
        if not (
            _is_real(numerics_check_every)
            and isinstance(numerics_check_every, int)
            and numerics_check_every >= 0
        ):
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
        defaults["companded"] = companded
        super().__init__(params, defaults)
        self.max_grad_norm = max_grad_norm
        self.numerics_check_every = numerics_check_every
        if compile is not None and not isinstance(compile, bool):
            raise HwtuneInputError("compile", compile, "True, False or None (fused on CPU only)")
        self.compile = compile
        # not a group default: state dicts saved before this option must still load
        self.span_elements = span_elements
        self._stalled: list[tuple[str, float, int]] = []
        #: (id of the group, parameter dtype, correction dtype) of the parameters that stepped
        #: since `_warn_decay` last ran, and the (group index, significant bits) it warned about
        self._decay_formats: set[tuple[int, torch.dtype, torch.dtype | None]] = set()
        self._decay_warned: set[tuple[int, int]] = set()
        self._valid_masks: dict[tuple[Any, ...], torch.Tensor] = {}
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

    # --- copies ----------------------------------------------------------------------------------
    #: instance attributes set by `__init__` that a copy must keep (torch's ``__getstate__``
    #: keeps only defaults, state and param_groups)
    _COPIED = ("max_grad_norm", "numerics_check_every", "compile", "span_elements")

    def __getstate__(self) -> dict[str, Any]:
        """torch's state plus our options, so that ``copy.deepcopy`` and pickling keep them (a
        deep copy used to fail at its first step, without ``_release``, or lose SGD's buffer)."""
        state = super().__getstate__()
        for name in self._COPIED:
            state[name] = getattr(self, name)
        if "moments" in self.__dict__:  # SGD's, per instance
            state["moments"] = self.moments
        state["gradient_release"] = getattr(self, "_release", None) is not None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a copy (`__getstate__`); torch's ``load_state_dict`` also calls this, with
        only ``state`` and ``param_groups``, which leaves our attributes as they are."""
        state = dict(state)
        release = state.pop("gradient_release", None)
        super().__setstate__(state)
        for key, value in self._ADDED_GROUP_KEYS.items():  # pickled before the key existed
            self.defaults.setdefault(key, value)
            for group in self.param_groups:
                group.setdefault(key, value)
        self.__dict__.setdefault("_stalled", [])
        self.__dict__.setdefault("_decay_formats", set())
        self.__dict__.setdefault("_decay_warned", set())
        self.__dict__.setdefault("_valid_masks", {})
        self.__dict__.setdefault("_release", None)
        if release:  # hooks on the copy's own parameters
            from hwtune.optim.release import GradientRelease

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
        """`torch.optim.Optimizer.add_param_group`, with the group's hyperparameters and the
        parameters' dtypes checked; a refused group is not added."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        gi = len(self.param_groups) - 1
        try:
            _check_options(group, gi)
            self.check_hyperparameters(group, gi)
            for i, p in enumerate(group["params"]):
                self._check_param(p, group, i)
            if getattr(self, "_release", None) is not None:
                self._release.watch(group)
        except Exception:
            self.param_groups.pop()
            raise

    def check_hyperparameters(self, values: dict[str, Any], gi: int | None) -> None:
        """Refuse bad hyperparameters (constructor arguments: ``gi`` None; else the values of
        parameter group ``gi``) with an error naming the field, the value and what was expected,
        and store each accepted number in ``values`` as a Python float (betas a tuple of two)."""
        raise NotImplementedError

    def check_state_layout(self, group: dict[str, Any], gi: int) -> None:
        """Refuse a value of parameter group ``gi`` that asks for a state this optimizer does not
        keep (its states are chosen once, at construction: SGD's momentum buffer, AdamW's
        v_max). `add_param_group` and `load_state_dict` check it through
        `check_hyperparameters`; `step` checks every group again before the first update,
        since an LR scheduler or the caller may set a group's values in between (torch's
        optimizer would then keep the state and update differently). Default: nothing to
        check."""

    def _check_state_layouts(self) -> None:
        """`check_state_layout` on every group (before any parameter of a step changes)."""
        for gi, group in enumerate(self.param_groups):
            self.check_state_layout(group, gi)

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

    def weight_decay_step(self, group: dict[str, Any]) -> tuple[float, str]:
        """(r, how): the relative amount r by which a step of ``group`` shrinks, at most, a weight
        whose gradient is zero through weight decay alone, and r written out in the group's
        hyperparameters for `DecayTooSmallWarning` (``"lr 3e-05 x weight_decay 0.1"``). The
        optimizers warn when 0 < r < `hwtune.optim.numerics.decay_threshold` of the master
        (see `hwtune.optim.numerics`). Default: (0, ""), no decay."""
        return 0.0, ""

    def _step_hyperparameters(
        self, group: dict[str, Any], state: dict[str, torch.Tensor], step: int
    ) -> tuple[float, ...]:
        """The scalars `rule` reads for one parameter's step, called once per parameter and
        step, after its step count advanced: `hyperparameters` by default. A subclass whose
        scalars also depend on the parameter's own history overrides it (`SGD`: whether its
        momentum buffer has started, which it records here)."""
        return self.hyperparameters(group, step)

    def _active_moments(self, group: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        """The states a step of ``group`` reads and writes: all of `moments` by default. A
        subclass may leave a state out for a step (`SGD` with a group momentum of 0, where
        ``torch.optim.SGD`` neither reads nor writes the buffer): it is then not decoded, not
        passed to `rule` and not coded again, so its stored tensors stay as they were, bit for
        bit, on every path (per chunk, spans, buckets, compiled)."""
        return self.moments

    def _fill_added_state(self, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Fill in, in place, the per-parameter entries a subclass added after its states were
        first saved, with the value an older state meant (`load_state_dict`, and at each step
        for optimizers unpickled from older versions). Default: nothing was added."""

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, torch.Tensor]:
        lp = local(p)
        n, gs = lp.numel(), group["group_size"]
        groups = cq.n_groups(n, gs)
        chunks = max(1, -(-n // CHUNK))
        state: dict[str, torch.Tensor] = {"step": torch.tensor(0.0)}
        corr_dtype = mw.correction_dtype(lp.dtype, group["master_weight_bits"])
        if corr_dtype is not None:
            # contiguous whatever the parameter's strides (transposed, channels_last): the
            # update works on flat row-major views (`_update_alone`)
            state["master_correction"] = torch.zeros(lp.shape, dtype=corr_dtype, device=lp.device)
        for name, kind in self.moments:
            dtype = torch.int8 if kind == SIGNED else torch.uint8
            state[name] = torch.zeros(groups * gs, dtype=dtype, device=lp.device)
            state[name + "_scale"] = torch.zeros(groups, dtype=torch.float16, device=lp.device)
            state[name + "_gscale"] = torch.ones(chunks, dtype=torch.float32, device=lp.device)
        return state

    def _update(self, p: torch.Tensor, group: dict[str, Any], inv_grad_scale: float = 1.0) -> None:
        """Apply one step to one parameter from its ``.grad`` (called by the gradient-release
        hook; `step` updates small parameters in buckets)."""
        item = self._begin(p, group)
        self._update_alone(item, group, inv_grad_scale)
        self._end(item)

    def _check_grad(self, p: torch.Tensor) -> None:
        """Refuse a gradient the update cannot take (sparse, complex)."""
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

    def _begin(self, p: torch.Tensor, group: dict[str, Any]) -> _Pending:
        """Check a parameter's gradient, create or advance its state: what its update needs."""
        self._check_grad(p)
        grad = p.grad
        state = self.state[p]
        if not state:
            state.update(self._init_state(p, group))
        else:
            self._fill_added_state(state, group)
        state["step"] += 1
        step = int(state["step"].item())
        hp = self._step_hyperparameters(group, state, step)
        lp, lg = local(p), local(grad)
        corr = state.get("master_correction")
        check = (
            self.numerics_check_every
            and group["lr"] > 0
            and (step == 1 or step % self.numerics_check_every == 0)
        )
        before = mw.join(lp, corr).clone() if check else None
        if self.numerics_check_every:  # for `_warn_decay`: which master formats stepped
            self._decay_formats.add((id(group), lp.dtype, None if corr is None else corr.dtype))
        return _Pending(p, lp, lg, corr, state, step, before, hp)

    def _end(self, item: _Pending) -> None:
        """After the update: note the parameter if most of its elements kept their value."""
        if item.before is not None:
            frac = stalled_fraction(item.before, mw.join(item.lp, item.corr), item.lg)
            if frac > 0.5:
                self._stalled.append((self.param_name(item.p), frac, item.step))

    def _span(self, device: torch.device) -> int:
        return self.span_elements or (CHUNK if device.type == "cpu" else GPU_SPAN)

    def _update_alone(self, item: _Pending, group: dict[str, Any], inv_grad_scale: float) -> None:
        lp, corr = item.lp, item.corr
        contiguous = lp.is_contiguous()
        # detached, as a bucket's buffers are: a compiled graph guards on requires_grad
        work = lp.detach() if contiguous else lp.detach().contiguous()
        self._update_flat(
            work.view(-1),
            None if corr is None else corr.view(-1),
            item.lg.contiguous().view(-1),
            item.state,
            group,
            item.hp,
            _grad_factor(group, inv_grad_scale),
        )
        if not contiguous:
            lp.copy_(work)

    def _run_span(self, args: tuple[Any, ...]) -> None:
        """`update_span` on ``args``, fused by torch.compile unless compilation is off or fails
        (then the same ops run eagerly from here on, with a warning)."""
        use = self.compile if self.compile is not None else args[1].device.type == "cpu"
        if use and args[1].numel() % args[_GS_ARG]:
            self._run_span_padded(args)
            return
        if use:
            hp = list(args[_HP_ARG])
            for i in self.step_varying:
                hp[i] = torch.tensor(hp[i], dtype=torch.float64)
            try:
                with warnings.catch_warnings():  # inductor's notes while it compiles
                    warnings.simplefilter("ignore", UserWarning)
                    compiled_update_span()(*args[:_HP_ARG], tuple(hp), *args[_HP_ARG + 1 :])
                return
            except Exception as err:  # no C++ compiler / Triton: run the same ops eagerly
                self.compile = False
                warnings.warn(
                    f"hwtune.optim: torch.compile failed ({type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''}); running eagerly",
                    RuntimeWarning,
                    stacklevel=3,
                )
        update_span(*args)

    def _run_span_padded(self, args: tuple[Any, ...]) -> None:
        """`_run_span` on a span that ends inside a group, through copies zero-padded to whole
        groups with the padding masked (``valid``, as in a bucket), so the compiled update only
        ever sees whole groups. Inductor (torch 2.13.0, CPU) dropped the last partial group
        when it fused the parameter's update into the decoder's (groups, group_size) loops:
        the last ``numel % group_size`` elements of such a parameter were never updated."""
        param, corr, grad = args[1], args[2], args[3]
        n, gs = param.numel(), args[_GS_ARG]
        padded = cq.n_groups(n, gs) * gs

        def pad(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros(padded)
            out[:n] = t
            return out

        pp, pg = pad(param), pad(grad)
        pc = None if corr is None else pad(corr)
        valid = torch.arange(padded, device=param.device) < n
        self._run_span((args[0], pp, pc, pg, *args[4 : _GS_ARG + 3], valid))
        param.copy_(pp[:n])
        if corr is not None:
            corr.copy_(pc[:n])

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
        moments = self._active_moments(group)
        kinds = tuple(kind for _, kind in moments)
        span = self._span(p.device)
        for start in range(0, n, span):  # spans start at chunk boundaries: span % CHUNK == 0
            end = min(n, start + span)
            g0, g1 = start // gs, cq.n_groups(end, gs)
            c0, c1 = start // CHUNK, -(-end // CHUNK)
            self._run_span(
                (
                    self.rule,
                    p[start:end],
                    None if corr is None else corr[start:end],
                    g[start:end],
                    [state[name][g0 * gs : g1 * gs] for name, _ in moments],
                    [state[name + "_scale"][g0:g1] for name, _ in moments],
                    [state[name + "_gscale"][c0:c1] for name, _ in moments],
                    kinds,
                    hp,
                    inv_grad_scale,
                    gs,
                    group["companded"],
                    CHUNK // gs,
                )
            )

    def _bucketable(self, item: _Pending) -> bool:
        """Whether a parameter is updated in a bucket: spans longer than a chunk (GPUs) and a
        parameter of at most ``1 / BUCKET_DIVISOR`` span once padded to whole chunks."""
        span = self._span(item.lp.device)
        padded = _padded(item.lp.numel())
        return span > CHUNK and padded * BUCKET_DIVISOR <= span and item.lp.is_contiguous()

    def _update_bucket(
        self, items: list[_Pending], group: dict[str, Any], inv_grad_scale: float
    ) -> None:
        """One `update_span` call for several parameters of one group and dtype whose steps
        read the same scalars (`_Pending.hp`; for AdamW the same step count): each is
        copied, zero-padded to whole chunks, into one flat buffer per tensor (parameter,
        correction, gradient, codes, scales, gscales), updated there and copied back. Every
        chunk belongs to one parameter and the padding stays zero (``valid``), so the result is
        bit-identical to updating each parameter alone (tested); it costs a few multi-tensor
        copies instead of a call (dozens of kernel launches or a compiled graph's guards) per
        parameter."""
        gs = group["group_size"]
        first = items[0]
        device = first.lp.device
        sizes = [it.lp.numel() for it in items]
        offsets = list(itertools.accumulate((_padded(n) for n in sizes), initial=0))
        total = offsets[-1]

        def gather(pieces: list[torch.Tensor], unit: int) -> tuple[torch.Tensor, list]:
            buf = torch.zeros(total // unit, dtype=pieces[0].dtype, device=device)
            slots = [
                buf[o // unit : o // unit + t.numel()]
                for o, t in zip(offsets[:-1], pieces, strict=True)
            ]
            torch._foreach_copy_(slots, pieces)
            return buf, slots

        param, param_slots = gather([it.lp.view(-1) for it in items], 1)
        grad, _ = gather([it.lg.reshape(-1) for it in items], 1)
        corr = corr_slots = None
        if first.corr is not None:
            corr, corr_slots = gather([it.corr.view(-1) for it in items], 1)
        moments = self._active_moments(group)
        states = []  # (buffer, slots, per-parameter state tensors) for codes, scales, gscales
        for name, _ in moments:
            for key, unit in ((name, 1), (name + "_scale", gs), (name + "_gscale", CHUNK)):
                targets = [it.state[key] for it in items]
                states.append((*gather(targets, unit), targets))
        codes, scales, gscales = ([buf for buf, _, _ in states[i::3]] for i in range(3))
        self._run_span(
            (
                self.rule,
                param,
                corr,
                grad,
                codes,
                scales,
                gscales,
                tuple(kind for _, kind in moments),
                first.hp,
                _grad_factor(group, inv_grad_scale),
                gs,
                group["companded"],
                CHUNK // gs,
                self._valid(sizes, device),
            )
        )
        torch._foreach_copy_([it.lp.view(-1) for it in items], param_slots)
        if corr is not None:
            torch._foreach_copy_([it.corr.view(-1) for it in items], corr_slots)
        for _, slots, targets in states:
            torch._foreach_copy_(targets, slots)

    def _valid(self, sizes: list[int], device: torch.device) -> torch.Tensor:
        """The bucket's mask of parameter elements (padding False), cached per layout."""
        key = (tuple(sizes), str(device))
        mask = self._valid_masks.get(key)
        if mask is None:
            if len(self._valid_masks) >= 256:  # layouts change only with the parameters
                self._valid_masks.clear()
            mask = torch.cat([torch.arange(_padded(n), device=device) < n for n in sizes])
            self._valid_masks[key] = mask
        return mask

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
        self._check_state_layouts()  # groups changed since construction (LR schedulers)
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
        for p, _ in with_grad:  # every check before the first update: no partial steps
            self._check_grad(p)
            if p.dtype == torch.float16 and not called_by_scaler:
                raise HwtuneInputError(
                    f"parameter {self.param_name(p)!r}.dtype",
                    p.dtype,
                    "torch.bfloat16 or float32, or float16 stepped by torch.amp.GradScaler "
                    "(scaler.step(optimizer)): fp16 gradients underflow without loss scaling",
                )
        if self.max_grad_norm is not None and with_grad:
            clip_grad_norm_fp32([p.grad for p, _ in with_grad], self.max_grad_norm / inv_scale)
        together: dict[tuple[Any, ...], tuple[dict[str, Any], list[_Pending]]] = {}
        for p, group in with_grad:
            item = self._begin(p, group)
            if not self._bucketable(item):
                self._update_alone(item, group, inv_scale)
                self._end(item)
                continue
            corr_dtype = None if item.corr is None else item.corr.dtype
            key = (id(group), item.hp, item.lp.dtype, item.lg.dtype, corr_dtype, item.lp.device)
            together.setdefault(key, (group, []))[1].append(item)
        for group, items in together.values():
            for bucket in _buckets(items, self._span(items[0].lp.device)):
                self._update_bucket(bucket, group, inv_scale)
            for item in items:
                self._end(item)
        self._warn_stalled()
        self._warn_decay()
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
            stacklevel=_user_stacklevel(),  # the line that called optimizer.step()
        )

    def _warn_decay(self) -> None:
        """Warn (`DecayTooSmallWarning`) for each group and master format that stepped since the
        last call (`_begin`; with gradient release, inside backward) where the group's weight
        decay per step r (`weight_decay_step`) is above 0 and below the format's
        `decay_threshold`: once, and again only after r has reached the threshold in between.
        Scalars only (dtypes and hyperparameters): no tensor work, no device sync."""
        formats, self._decay_formats = self._decay_formats, set()
        if not formats:
            return
        for gi, group in enumerate(self.param_groups):
            stepped = {(dtype, corr) for g, dtype, corr in formats if g == id(group)}
            if not stepped:
                continue
            rate, how = self.weight_decay_step(group)
            bits = {mw.significant_bits(dtype, corr): (dtype, corr) for dtype, corr in stepped}
            for p in sorted(bits):
                threshold = decay_threshold(p)
                if not 0 < rate < threshold:
                    if rate >= threshold:
                        self._decay_warned.discard((gi, p))
                    continue
                if (gi, p) in self._decay_warned:
                    continue
                self._decay_warned.add((gi, p))
                warnings.warn(
                    _decay_message(gi, group, how, rate, p, *bits[p]),
                    DecayTooSmallWarning,
                    stacklevel=_user_stacklevel(),  # the line that called optimizer.step()
                )

    # --- checkpoints -----------------------------------------------------------------------------
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict saved by `state_dict`, keeping the 8-bit codes' dtypes (torch's
        loader casts every state tensor to the parameter's dtype)."""
        saved = state_dict["state"]
        groups = [dict(group) for group in state_dict["param_groups"]]  # the caller's stay as given
        for gi, group in enumerate(groups):
            for key, value in self._ADDED_GROUP_KEYS.items():  # saved before the key existed
                group.setdefault(key, value)
            missing = sorted(set(self.defaults) - set(group))
            if missing:
                raise HwtuneInputError(
                    f"state_dict['param_groups'][{gi}]",
                    f"no {missing[0]!r}",
                    f"a state dict saved by hwtune.optim.{type(self).__name__}",
                )
            # the saved values replace the groups' own: check them as add_param_group does
            _check_options(group, gi)
            self.check_hyperparameters(group, gi)
        super().load_state_dict({**state_dict, "param_groups": groups, "state": {}})
        ids = [i for g in groups for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        self.state.clear()
        for i, p in zip(ids, params, strict=True):
            if i not in saved:
                continue
            group = self._group_of(p)
            entry = dict(saved[i])  # the caller's stays as given
            self._fill_added_state(entry, group)
            expected = self._init_state(p, group)
            extra = sorted(set(entry) - set(expected))
            if extra:
                raise HwtuneInputError(
                    f"state[{self.param_name(p)!r}]",
                    f"the keys {extra}",
                    f"only {sorted(expected)} (a state dict saved by "
                    f"hwtune.optim.{type(self).__name__} for a parameter of dtype {p.dtype})",
                )
            loaded = {}
            for key, ref in expected.items():
                value = entry.get(key)
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
                # onto the parameter's device, contiguous as `_init_state` makes it
                loaded[key] = ref.copy_(value)
            self.state[p] = loaded

    def _group_of(self, p: torch.Tensor) -> dict[str, Any]:
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                return group
        raise KeyError("parameter not in this optimizer")
