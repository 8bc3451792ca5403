"""A check that updates still change the stored weights.

A floating-point weight w absorbs an update u without changing when |u| is below half its unit in
the last place: |u| < 2^-p |w| for p significant bits (Higham 2002, "Accuracy and Stability of
Numerical Algorithms", §2.1; the "stagnation" of low-precision training, Zamirai et al. 2020,
"Revisiting BFloat16 Training", §3). bf16 keeps p = 8, so an Adam step of lr = 1e-4 is lost entirely on weights of
magnitude >= 2^-5 = 0.031; the 24-bit split master (p = 16) moves that limit 256 times further
out, and the 32-bit one to fp32's. The optimizers compare the stored master before and after a step
every ``numerics_check_every`` steps and warn (`UpdateTooSmallWarning`) when most elements that had
a non-zero gradient kept their value.

Weight decay needs a check of its own, because that one only counts elements with a non-zero
gradient. Decay shrinks every weight by the same relative amount r per step (decoupled:
theta <- theta (1 - lr wd), r = lr wd), so whether it survives the rounding to the stored master
depends on r, not on the weights. A weight in the binade [2^e, 2^(e+1)) of a master with p
significant bits has half a ULP of 2^(e-p): with round to nearest, a relative change below
2^-(p+1) is lost for every normal weight, and one below 2^-p for those at the bottom of their
binade (Higham 2002, §2.1, as above). So where 0 < r < `decay_threshold` (p) = 2^-(p+1), a weight
whose update is otherwise zero (zero gradient and moments: unused embedding rows, masked experts,
parameters the data never reach) is never decayed, where ``torch.optim`` in fp32 (p = 24)
decays it, and a weight with an update keeps only the decay rounded into it. E.g. the 24-bit
master (bf16 + int8, p = 16): lr 3e-5 (a cosine schedule's tail) x wd 0.1 = 3e-6 < 2^-17 =
7.6e-6. p is `hwtune.optim.master_weights.significant_bits`. The optimizers test r against the
threshold at every step, per parameter group and master format of the parameters that stepped
(scalars only: no tensor work, no device sync), and warn (`DecayTooSmallWarning`) once per group
and format, and again only after r has risen to the threshold and fallen below it;
``numerics_check_every=0`` turns this check off too.

Which decay is tested is each optimizer's (`CompactOptimizer.weight_decay_step`): AdamW's and
Lion's decay is decoupled, as is SGD's with ``decoupled_weight_decay=True``. SGD's default L2
decay goes through the gradient (g + wd theta): for an element with a non-zero gradient it is
part of the update the check above compares, but an element whose gradient is zero is not
counted there, and the decay alone moves it by lr wd theta without momentum and, with momentum
mu and dampening d, by up to lr wd max(1, (1 - d) / (1 - mu)) theta (the buffer's first step is
undampened; the buffer of a weight that does not move tends to (1 - d) wd theta / (1 - mu), and
Nesterov's step, which needs d = 0, to the same). That is the r tested for L2 decay.

The bf16 + int8 split rounds magnitudes half up, so there the threshold is exact (a decay that
fp32 arithmetic rounds onto half a unit rounds back). The other formats round half to even, which
matters only where fp32's own rounding can reach a tie: for fp16 + int8, whose master is only 5
bits coarser than fp32, within about 2^-5 of the threshold a decay can move an odd correction by
one unit (a few per cent of the elements), and an fp16 master exactly at an fp16 rounding tie
(correction -2^(k-1), `hwtune.optim.master_weights`) moves one unit at any decay, once. All else
is lost, in fp16's normal range.
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


class DecayTooSmallWarning(UserWarning):
    """A parameter group's weight decay per step is below what its master weights can resolve:
    weights whose update is otherwise zero are not decayed at all (see the module docstring)."""


def decay_threshold(significant_bits: int) -> float:
    """The relative change per step below which weight decay is lost for every normal weight of
    a master with ``significant_bits`` (p): half a unit in the last place of the largest weights
    of a binade, 2^-(p+1) (Higham 2002, §2.1). 24-bit master (bf16 + int8, p = 16): 2^-17;
    bf16 alone (p = 8): 2^-9; 32-bit master or fp32 (p = 24): 2^-25."""
    return 2.0 ** -(significant_bits + 1)
