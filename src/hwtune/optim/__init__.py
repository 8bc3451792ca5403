"""Compact optimizers for PyTorch: AdamW at 7 bytes per parameter (5 with gradient release), SGD
and Lion at 6 (4), with 8-bit companded states and split master weights (FlashOptim, Gonzalez
Ortiz et al. 2026, arXiv 2602.23349), in pure torch so the same code runs on CPU and GPU.

Needs torch (``pip install 'hwtune[optim]'``); nothing outside this package imports it.
"""

from hwtune.optim.adamw import AdamW
from hwtune.optim.checkpoint import export_fp32_state_dict, load_fp32_state_dict
from hwtune.optim.footprint import Footprint, measure_footprint
from hwtune.optim.lion import Lion
from hwtune.optim.numerics import DecayTooSmallWarning, UpdateTooSmallWarning
from hwtune.optim.optimizer import CompactOptimizer
from hwtune.optim.sgd import SGD

__all__ = [
    "SGD",
    "AdamW",
    "CompactOptimizer",
    "DecayTooSmallWarning",
    "Footprint",
    "Lion",
    "UpdateTooSmallWarning",
    "export_fp32_state_dict",
    "load_fp32_state_dict",
    "measure_footprint",
]
