"""hwtune: hardware-aware tuning of large-model training and serving."""

from hwtune.errors import HwtuneInputError

__version__ = "0.1.0"

__all__ = ["HwtuneInputError", "__version__", "estimate"]


def __getattr__(name: str):  # noqa: ANN202 - lazy import keeps `import hwtune` fast
    if name == "estimate":
        from hwtune.train.estimator import estimate

        return estimate
    raise AttributeError(name)
