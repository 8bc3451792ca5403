"""The device catalog: `catalog/devices.yaml`, each figure with its source."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from hwtune.errors import from_validation_error, unknown_name
from hwtune.hardware.device import Device, load_device_file


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@functools.cache
def devices() -> dict[str, Device]:
    """All catalog devices by canonical name."""
    text = resources.files("hwtune.hardware").joinpath("catalog/devices.yaml").read_text()
    out: dict[str, Device] = {}
    for i, entry in enumerate(yaml.safe_load(text)["devices"]):
        try:
            d = Device(**entry)
        except ValidationError as e:
            raise from_validation_error(e, where=f"devices.yaml[{i}]") from None
        out[d.name] = d
    return out


@functools.cache
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for d in devices().values():
        for n in (d.name, *d.aliases):
            idx[_norm(n)] = d.name
    return idx


def get_device(name_or_path: str | Device) -> Device:
    """A catalog device by name or alias (case-insensitive), or a YAML device file by path."""
    if isinstance(name_or_path, Device):
        return name_or_path
    key = _norm(name_or_path)
    if key in _index():
        return devices()[_index()[key]]
    # a device file or a `hwtune bench` profile (.json too): a missing one says so
    if name_or_path.endswith((".yaml", ".yml", ".json")) or Path(name_or_path).is_file():
        return load_device_file(name_or_path)
    raise unknown_name("gpu", name_or_path, devices().keys())
