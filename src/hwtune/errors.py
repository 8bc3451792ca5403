"""The one exception type that hwtune raises for bad input, and its one-line rendering.

Every description is validated once at the edge (DESIGN.md, *Conventions*). A bad value gets a
one-line message naming the field, the value and what was expected; the CLI prints that line
and exits with code 2.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError


class HwtuneInputError(ValueError):
    """Bad input: a field, the value it had, and what was expected."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{field}: got {value!r}; expected {expected}")

    @classmethod
    def from_message(cls, text: str) -> HwtuneInputError | None:
        """The error whose message is ``text`` (as `str` of one gives it, e.g. after crossing a
        process boundary as text), or None when ``text`` is not of that form."""
        field, _, rest = text.partition(": got ")
        value, _, expected = rest.partition("; expected ")
        return cls(field, _Verbatim(value), expected) if field and expected else None


class _Verbatim(str):
    """A value already written as an error message shows it (not quoted a second time)."""

    def __repr__(self) -> str:
        return str(self)


def suggest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The closest catalog names to ``name`` (case-insensitive), best first."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    if not close:
        close = [c for c in lowered if name.lower() in c or c in name.lower()][:n]
    return [lowered[c] for c in close]


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> HwtuneInputError:
    """An error for an unknown catalog name, with the closest names suggested."""
    close = suggest(name, choices)
    hint = f"a catalog name such as {', '.join(close)}" if close else "a catalog name"
    return HwtuneInputError(kind, name, hint + " (or a path to a file)")


_CHOICES = re.compile(r"'[^']*'(, '[^']*')* or '[^']*'")


def expected_from_pydantic(msg: str) -> str:
    """Pydantic's description of a failed check, reworded as what was expected:
    "Input should be greater than 0" -> "a value greater than 0", "Input should be a valid
    integer, unable to parse string as an integer" -> "a valid integer", "Extra inputs are not
    permitted" -> "a known field name (this one is unknown)", "Input should be 'a', 'b' or 'c'"
    (a ``Literal``) -> "one of a, b, c"."""
    msg = msg.removeprefix("Value error, ")
    if msg == "Extra inputs are not permitted":
        return "a known field name (this one is unknown)"
    if not msg.startswith("Input should be "):
        return msg
    rest = msg.removeprefix("Input should be ")
    if rest.startswith("a valid "):
        rest = rest.split(",")[0]  # "a valid integer, unable to parse ..." -> "a valid integer"
    if rest.startswith("finite"):
        return "a finite number"
    if rest.startswith(("greater", "less")):
        return "a value " + rest
    if _CHOICES.fullmatch(rest):  # a Literal's "'a', 'b' or 'c'": as hwtune's own checks say it
        return "one of " + ", ".join(re.findall(r"'([^']*)'", rest))
    return rest


def from_validation_error(err: ValidationError, where: str = "") -> HwtuneInputError:
    """Turn pydantic's (multi-line) error into hwtune's one-line form, naming the first bad field."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    field = f"{where}.{loc}" if where and loc else (where or loc or "input")
    msg = first.get("msg", "invalid value")
    if first.get("type") == "missing":
        return HwtuneInputError(field, None, "a value (the field is required)")
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, HwtuneInputError):  # a validator named the field and the value
        inner = f"{field}.{cause.field}" if field != "input" else cause.field
        return HwtuneInputError(inner, cause.value, cause.expected)
    msg = expected_from_pydantic(msg)
    value = first.get("input")
    if not loc and isinstance(value, dict | BaseModel):
        # a check of the whole model: show the fields its message names, not every field
        fields = value if isinstance(value, dict) else dict(value)
        value = {k: v for k, v in fields.items() if re.search(rf"\b{re.escape(str(k))}\b", msg)}
        value = value or type(first.get("input")).__name__
    return HwtuneInputError(field, value, msg)
