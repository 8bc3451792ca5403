"""Parsing of option values shared by the commands."""

from __future__ import annotations

from hwtune.errors import HwtuneInputError


def positive_ints(text: str, field: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``; anything else names ``field`` in the error."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(x <= 0 for x in out):
        raise HwtuneInputError(field, text, "positive integers separated by commas, e.g. 8,16,32")
    return out
