"""Reading and writing sysfs files with errors that name the file and the privilege needed.

Every failure is a `MeterError` (a missing, unreadable, undecodable or malformed file): the
meters built on these never leak an OSError or a ValueError into a caller's training loop."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hwtune.energy.meters.base import MeterError, MeterPermissionError


@contextmanager
def _os_errors(path: Path, privilege: str, failed: str, expected: str) -> Iterator[None]:
    """OSError on ``path`` as a one-line `MeterError`: refused (naming ``privilege``), missing,
    or ``failed`` (the system's reason when it gives one) where ``expected`` was wanted."""
    try:
        yield
    except PermissionError:
        raise MeterPermissionError(str(path), privilege) from None
    except FileNotFoundError:
        raise MeterError(
            str(path), "missing", "the file to exist (is the driver loaded?)"
        ) from None
    except OSError as e:
        raise MeterError(str(path), e.strerror or failed, expected) from None


def read_text(path: Path, privilege: str) -> str:
    """The stripped text of ``path``; a one-line error when it is missing or unreadable."""
    with _os_errors(path, privilege, "unreadable", "a readable sysfs file"):
        try:
            return path.read_text().strip()
        except UnicodeDecodeError as e:
            raise MeterError(str(path), f"undecodable ({e.reason})", "a text sysfs file") from None


def read_number(path: Path, privilege: str) -> float:
    """The first number in ``path``; an error for an empty, non-numeric or non-finite one."""
    text = read_text(path, privilege)
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        raise MeterError(str(path), text, "a number") from None
    if not math.isfinite(value):
        raise MeterError(str(path), text, "a finite number")
    return value


def write_text(path: Path, value: str, privilege: str) -> None:
    with _os_errors(path, privilege, "unwritable", f"a value it accepts ({value})"):
        path.write_text(value)
