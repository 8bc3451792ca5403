"""Reading a user's YAML or JSON file (devices, profiles, corrections) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hwtune.errors import HwtuneInputError


def read_structured(path: str | Path, field: str) -> object:
    """The parsed content of ``path``: JSON when it ends in ``.json``, YAML otherwise (YAML also
    reads JSON). An unreadable or malformed file raises `HwtuneInputError` naming ``field``, the
    path and the parser's first line."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise HwtuneInputError(field, str(path), f"a readable file ({e.strerror})") from None
    try:
        return json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        msg = str(e).splitlines()[0]
        raise HwtuneInputError(field, str(path), f"valid YAML/JSON ({msg})") from None


__all__ = ["read_structured"]
