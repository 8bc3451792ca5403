"""Statistical efficiency: steps to a target as a function of batch size, the gradient noise
scale that sets it, and the learning-rate rule applied when the batch changes.

McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training"
(arXiv 1812.06162), §2: steps S and examples E to reach a given loss trade off as
(S/S_min - 1)(E/E_min - 1) = 1, with the critical batch B_crit = E_min / S_min ≈ B_noise, so

    S(B) = S_min (1 + B_noise / B),    E(B) = E_min (1 + B / B_noise).

The simple noise scale B_simple = tr(Σ) / |G|^2 (§2.2) is estimated from squared gradient norms
at two batch sizes (App. A.1): E|G_B|^2 = |G|^2 + tr(Σ)/B, so

    |G|^2 ≈ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Σ) ≈ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)

and the two are averaged (exponential moving averages) before taking their ratio, since each
single estimate is noisy (App. A.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hwtune.errors import HwtuneInputError

LrRule = Literal["linear", "sqrt", "none"]


@dataclass(frozen=True, slots=True)
class CriticalBatch:
    """Steps and examples to a target loss vs batch size (McCandlish et al. 2018, §2)."""

    b_noise: float
    s_min: float

    def __post_init__(self) -> None:
        if not (self.b_noise > 0 and math.isfinite(self.b_noise)):
            raise HwtuneInputError("b_noise", self.b_noise, "a positive noise scale (samples)")
        if not (self.s_min > 0 and math.isfinite(self.s_min)):
            raise HwtuneInputError("s_min", self.s_min, "a positive number of steps")

    @property
    def e_min(self) -> float:
        return self.s_min * self.b_noise

    def steps(self, batch: float) -> float:
        if batch <= 0:
            raise HwtuneInputError("batch size", batch, "a positive number of samples")
        return self.s_min * (1.0 + self.b_noise / batch)

    def examples(self, batch: float) -> float:
        return self.steps(batch) * batch

    @classmethod
    def from_run(cls, batch: float, steps: float, b_noise: float) -> CriticalBatch:
        """The model through one known run: ``steps`` to the target at ``batch``."""
        return cls(b_noise=b_noise, s_min=steps / (1.0 + b_noise / batch))


class NoiseScaleEstimator:
    """Running estimate of B_simple from squared gradient norms at two batch sizes.

    In data-parallel training ``b_small`` is one rank's batch (its local gradient) and
    ``b_big`` the global batch (the all-reduced gradient); on one device, two micro-batch
    gradients and their mean serve. ``ema`` weighs the past (McCandlish et al. App. A.1)."""

    def __init__(self, b_small: float, b_big: float, ema: float = 0.95) -> None:
        if not 0 < b_small < b_big:
            raise HwtuneInputError("b_small, b_big", (b_small, b_big), "0 < b_small < b_big")
        if not 0 <= ema < 1:
            raise HwtuneInputError("ema", ema, "a weight in [0, 1)")
        self.b_small, self.b_big, self.ema = float(b_small), float(b_big), ema
        self._g2: float | None = None
        self._s: float | None = None
        self.updates = 0

    def update(self, g_small_sq: float, g_big_sq: float) -> float | None:
        """Feed one pair of squared norms; returns the current B_simple (None while the
        averaged |G|^2 is not positive)."""
        if g_small_sq < 0 or g_big_sq < 0:
            raise HwtuneInputError("squared gradient norm", (g_small_sq, g_big_sq), ">= 0")
        bs, bb = self.b_small, self.b_big
        g2 = (bb * g_big_sq - bs * g_small_sq) / (bb - bs)
        s = (g_small_sq - g_big_sq) / (1.0 / bs - 1.0 / bb)
        if self._g2 is None or self._s is None:
            self._g2, self._s = g2, s
        else:
            self._g2 = self.ema * self._g2 + (1 - self.ema) * g2
            self._s = self.ema * self._s + (1 - self.ema) * s
        self.updates += 1
        return self.b_simple

    @property
    def b_simple(self) -> float | None:
        if self._g2 is None or self._s is None or self._g2 <= 0 or self._s <= 0:
            return None
        return self._s / self._g2


def scale_learning_rate(lr: float, from_batch: float, to_batch: float, rule: LrRule) -> float:
    """The learning rate for ``to_batch`` given one tuned at ``from_batch``.

    linear: lr x B'/B (Goyal et al. 2017, "Accurate, Large Minibatch SGD", §2.1, for SGD);
    sqrt: lr x sqrt(B'/B) (Krizhevsky 2014, "One weird trick", §4; Malladi et al. NeurIPS 2022,
    "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", for Adam); none: unchanged.
    """
    if from_batch <= 0 or to_batch <= 0:
        raise HwtuneInputError("batch size", (from_batch, to_batch), "positive sizes")
    k = to_batch / from_batch
    if rule == "linear":
        return lr * k
    if rule == "sqrt":
        return lr * math.sqrt(k)
    if rule == "none":
        return lr
    raise HwtuneInputError("lr rule", rule, "linear, sqrt or none")
