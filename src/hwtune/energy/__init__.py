"""Energy: power meters, models of power, step time and statistical efficiency, the offline
batch-size x clock co-optimizer under a power cap, the online tuner, and cluster-scale energy.

Everything here runs without torch and without any vendor library; the NVML and AMD SMI
back ends import theirs only when a device is opened."""

from hwtune.energy.convergence import CriticalBatch, NoiseScaleEstimator, scale_learning_rate
from hwtune.energy.cooptimizer import CoOptResult, OperatingPoint, co_optimize, pareto_frontier
from hwtune.energy.meters import EnergyMonitor, Measurement, PowerDevice, open_device
from hwtune.energy.power_model import PowerModel, PowerPoint, fit_power_model
from hwtune.energy.profiles import EdgeProfile, get_profile, profiles
from hwtune.energy.step_model import StepPoint, StepTimeModel, fit_step_model
from hwtune.energy.tuner import OnlineTuner, StepPlan

__all__ = [
    "CoOptResult",
    "CriticalBatch",
    "EdgeProfile",
    "EnergyMonitor",
    "Measurement",
    "NoiseScaleEstimator",
    "OnlineTuner",
    "OperatingPoint",
    "PowerDevice",
    "PowerModel",
    "PowerPoint",
    "StepPlan",
    "StepPoint",
    "StepTimeModel",
    "co_optimize",
    "fit_power_model",
    "fit_step_model",
    "get_profile",
    "open_device",
    "pareto_frontier",
    "profiles",
    "scale_learning_rate",
]
