"""A launch command's arguments as ``{--flag: value}`` (the launch tests of tests/train and
tests/serve share it; tests/ is on ``sys.path`` as the conftest's folder)."""

from __future__ import annotations


def flags(args: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs (None for a switch); fails on a token that is not a flag where one
    is expected and on a flag given twice."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        f = args[i]
        assert f.startswith("--") and f not in out, (f, args)
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        out[f] = value
        i += 1 if value is None else 2
    return out
