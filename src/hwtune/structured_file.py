"""Reading a user's YAML or JSON file (devices, profiles, corrections) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from hwtune.errors import HwtuneInputError, from_validation_error

M = TypeVar("M", bound=BaseModel)


def read_utf8(path: str | Path, field: str) -> str:
    """The text of a UTF-8 file (a leading byte-order mark dropped); an unreadable or non-UTF-8
    file raises `HwtuneInputError` naming ``field`` and the path."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise HwtuneInputError(field, str(path), f"a readable file ({e.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise HwtuneInputError(field, str(path), f"a UTF-8 text file (byte {e.start} is not UTF-8; "
                               "save it as UTF-8)") from None  # fmt: skip


def read_structured(path: str | Path, field: str) -> object:
    """The parsed content of ``path``: JSON when it ends in ``.json``, YAML otherwise (YAML also
    reads JSON). An unreadable, non-UTF-8 or malformed file raises `HwtuneInputError` naming
    ``field``, the path and the parser's first line."""
    p = Path(path)
    text = read_utf8(p, field)
    try:
        return json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        msg = str(e).splitlines()[0]
        raise HwtuneInputError(field, str(path), f"valid YAML/JSON ({msg})") from None


def read_model(path: str | Path, field: str, cls: type[M], expected: str) -> M:
    """``cls`` built from the mapping in ``path`` (`read_structured`): a file that is not a
    mapping names ``field`` and what was ``expected``; a bad field gets the validation error's
    one line, prefixed with the file's name."""
    p = Path(path)
    data = read_structured(p, field)
    if not isinstance(data, dict):
        raise HwtuneInputError(field, str(path), expected)
    try:
        return cls(**data)
    except ValidationError as e:
        raise from_validation_error(e, where=p.name) from None


__all__ = ["read_model", "read_structured", "read_utf8"]
