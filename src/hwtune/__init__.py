"""hwtune: hardware-aware tuning of large-model training and serving."""

from hwtune.errors import HwtuneInputError

__version__ = "0.1.0"

__all__ = ["HwtuneInputError", "__version__", "estimate", "plan", "scale_sweep"]

_LAZY = {
    "estimate": ("hwtune.train.estimator", "estimate"),
    "plan": ("hwtune.train.search", "plan"),
    "scale_sweep": ("hwtune.train.scaling", "scale_sweep"),
}


def __getattr__(name: str):  # noqa: ANN202 - lazy import keeps `import hwtune` fast
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(name)
