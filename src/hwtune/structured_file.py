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


class _DuplicateKey(ValueError):
    """A mapping key given twice (the YAML and JSON parsers keep the last one silently)."""


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's parser where PyYAML was built with it: a multi-megabyte
    file given by mistake fails in a second, not a minute), refusing a mapping that gives a key
    twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged, then overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool):
                continue  # unhashable keys are refused by the loader itself
            if key in seen:
                raise _DuplicateKey(f"{key!r} given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise _DuplicateKey(f"{k!r} given twice")
    return dict(pairs)


def repeated_columns(header: list[str] | tuple[str, ...]) -> list[str]:
    """The column names a CSV header gives more than once, in order (``csv.DictReader`` keeps
    the last of them silently); empty names (trailing commas) are not columns."""
    return sorted({c for c in header if c and header.count(c) > 1}, key=header.index)


def loads_json(text: str, field: str, path: str | Path) -> object:
    """``text`` (the content of ``path``) parsed as JSON; a mapping that gives a key twice raises
    `HwtuneInputError` naming ``field`` and the path (`json.loads` keeps the last silently). A
    malformed text raises `json.JSONDecodeError`, for the caller to word."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as e:
        raise HwtuneInputError(field, str(path), f"each key once in a mapping ({e})") from None


def read_structured(path: str | Path, field: str) -> object:
    """The parsed content of ``path``: JSON when it ends in ``.json`` or parses as JSON, YAML
    otherwise. An unreadable, non-UTF-8 or malformed file raises `HwtuneInputError` naming
    ``field``, the path and the parser's first line; so does a mapping that gives a key twice
    (the parsers would keep the last one silently)."""
    p = Path(path)
    text = read_utf8(p, field)
    try:
        if p.suffix == ".json":
            return json.loads(text, object_pairs_hook=_unique_pairs)
        if text.lstrip()[:1] in ("{", "["):  # JSON without the suffix: the fast parser first
            try:
                return json.loads(text, object_pairs_hook=_unique_pairs)
            except json.JSONDecodeError:
                pass  # YAML flow style, read below
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except _DuplicateKey as e:
        raise HwtuneInputError(field, str(path), f"each key once in a mapping ({e})") from None
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


__all__ = ["loads_json", "read_model", "read_structured", "read_utf8", "repeated_columns"]
