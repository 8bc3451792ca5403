"""Shared helpers for the energy tests: fake sysfs trees and a denied-read switch.

Tests run as root here, where chmod cannot deny a read, so a denied file is simulated by
making Path.read_text/write_text raise PermissionError for chosen paths."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def deny(monkeypatch):
    """deny(path, mode="r"|"w"): reads (or writes) of ``path`` raise PermissionError."""
    denied: dict[str, set[str]] = {"r": set(), "w": set()}
    real_read, real_write = Path.read_text, Path.write_text

    def read_text(self, *a, **k):
        if str(self) in denied["r"]:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *a, **k)

    def write_text(self, *a, **k):
        if str(self) in denied["w"]:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(Path, "write_text", write_text)

    def add(path: Path, mode: str = "r") -> None:
        denied[mode].add(str(path))

    return add
