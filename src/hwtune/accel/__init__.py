"""Training on dataflow accelerators (DESIGN.md, package `accel/`): accelerator descriptions,
layer graphs with backward ops, per-core mapping costs, a scheduler with layer fusion, activation
checkpointing and genetic architecture search. After MONET (arXiv 2603.15002), the training
extension of KU Leuven's Stream. torch is imported only by `fx_import` and `torch_models`."""

from hwtune.accel.architecture import Accelerator, load_accelerator
from hwtune.accel.checkpointing import plan_checkpointing
from hwtune.accel.evaluate import evaluate
from hwtune.accel.graph_yaml import load_workload
from hwtune.accel.models import gpt2, resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.training import lower_training

__all__ = [
    "Accelerator", "evaluate", "gpt2", "load_accelerator", "load_workload", "lower_training",
    "plan_checkpointing", "resnet18", "schedule",
]  # fmt: skip
