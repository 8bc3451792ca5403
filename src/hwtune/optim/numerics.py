"""A check that updates still change the stored weights.

A floating-point weight w absorbs an update u without changing when |u| is below half its unit in
the last place: |u| < 2^-p |w| for p significant bits (Higham 2002, "Accuracy and Stability of
Numerical Algorithms", §2.1; the "stagnation" of low-precision training, Zamirai et al. 2020,
"Revisiting BFloat16 Training", §3). bf16 keeps p = 8, so an Adam step of lr = 1e-4 is lost entirely on weights of
magnitude >= 2^-5 = 0.031; the 24-bit split master (p = 16) moves that limit 256 times further
out, and the 32-bit one to fp32's. The optimizers compare the stored master before and after a step
every ``numerics_check_every`` steps and warn (`UpdateTooSmallWarning`) when most elements that had
a non-zero gradient kept their value.
"""

from __future__ import annotations

import torch


class UpdateTooSmallWarning(UserWarning):
    """Most of a parameter's elements did not change although their gradient was non-zero."""


def stalled_fraction(before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor) -> float:
    """Fraction of the elements with a non-zero gradient whose stored value did not change."""
    moved = grad != 0
    n = int(moved.sum())
    if n == 0:
        return 0.0
    return float(((before == after) & moved).sum()) / n
