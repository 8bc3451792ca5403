"""The model catalog: short names for real models (``catalog.yaml``), each with its published size.

Entries point at a Hugging Face ``config.json`` under ``configs/`` or give `ModelSpec` fields
inline; every published count names its source (model card, paper and table). The YAML is read
on first use and cached, so importing this module stays cheap.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hwtune.errors import HwtuneInputError, from_validation_error, unknown_name
from hwtune.model.hf_config import load_hf_config, parse_count
from hwtune.model.spec import ModelSpec

_ENTRY_KEYS = {
    "config",
    "spec",
    "override",
    "aliases",
    "params_published",
    "active_published",
    "active_convention",
    "non_embedding_published",
    "vision_params",
    "tolerance",
    "params_nominal",
    "note",
    "source",
}
_CONVENTIONS = {"all", "no_input_embedding", "non_embedding"}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@functools.cache
def _entries() -> dict[str, dict[str, Any]]:
    import yaml  # deferred: keeps `import hwtune.model.catalog` fast

    text = resources.files("hwtune.model").joinpath("catalog.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    models = yaml.load(text, Loader=loader)["models"]
    for name, entry in models.items():
        unknown = set(entry) - _ENTRY_KEYS
        if unknown:
            raise HwtuneInputError(
                f"catalog.yaml: {name}",
                sorted(unknown)[0],
                f"one of {', '.join(sorted(_ENTRY_KEYS))}",
            )
        if ("config" in entry) == ("spec" in entry):
            raise HwtuneInputError(
                f"catalog.yaml: {name}", sorted(entry), "exactly one of 'config' or 'spec'"
            )
        if entry.get("active_convention", "all") not in _CONVENTIONS:
            raise HwtuneInputError(
                f"catalog.yaml: {name}.active_convention",
                entry["active_convention"],
                f"one of {', '.join(sorted(_CONVENTIONS))}",
            )
    return models


@functools.cache
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for name, entry in _entries().items():
        for key in (name, *entry.get("aliases", ())):
            k = _norm(str(key))
            if idx.get(k, name) != name:
                raise HwtuneInputError(
                    "catalog.yaml: aliases", key, f"a name used once (also names {idx[k]})"
                )
            idx[k] = name
    return idx


def model_names() -> list[str]:
    """Canonical catalog names, in catalog order."""
    return list(_entries())


def catalog_entry(name: str) -> dict[str, Any]:
    """The raw catalog entry of a model (published counts, conventions, source), by name or alias."""
    key = _resolve(name)
    if key is None:
        raise unknown_name("model", name, model_names())
    return dict(_entries()[key])


def _resolve(name: str) -> str | None:
    idx = _index()
    key = _norm(name)
    if key in idx:
        return idx[key]
    if "/" in key:  # "org/Model-Name" -> "Model-Name"
        return idx.get(key.rsplit("/", 1)[1])
    return None


@functools.cache
def _load(name: str) -> ModelSpec:
    entry = _entries()[name]
    where = f"catalog.yaml: {name}"
    extra: dict[str, Any] = {"name": name, "source": entry.get("source", "")}
    if "params_published" in entry:
        extra["n_params_published"] = parse_count(entry["params_published"])
    if "active_published" in entry:
        extra["n_active_params_published"] = parse_count(entry["active_published"])
    try:
        if "config" in entry:
            path = resources.files("hwtune.model").joinpath("configs", entry["config"])
            base = load_hf_config(Path(str(path)), name=name)
            fields = {**base.model_dump(), **entry.get("override", {}), **extra}
        else:
            fields = {**entry["spec"], **extra}
        return ModelSpec(**fields)
    except ValidationError as e:
        raise from_validation_error(e, where=where) from None


def hf_repo(name: str) -> str | None:
    """The Hugging Face repository whose ``config.json`` a catalog entry reads (the file
    ``configs/ORG--NAME.json`` is ``ORG/NAME``'s), or None for an entry given inline."""
    config = catalog_entry(name).get("config")
    if not config or "--" not in config:
        return None
    return config.removesuffix(".json").replace("--", "/", 1)


def get_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A model by catalog name or alias (case-insensitive), or from a ``config.json`` path.

    A `ModelSpec` is returned as is. Unknown names raise `HwtuneInputError` suggesting the closest
    catalog names.
    """
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path)
    key = _resolve(text)
    if key is not None:
        return _load(key)
    path = Path(text).expanduser()
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()):
        return load_hf_config(path)
    if text.endswith(".json"):
        raise HwtuneInputError("model", text, "a catalog name or an existing config.json path")
    raise unknown_name("model", text, model_names())
