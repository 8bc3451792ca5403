"""`FrozenModel`: the base of hwtune's immutable descriptions (devices, clusters, models,
profiles). They are cache keys in every cost function, so the hash is computed once; equality
compares fields only (not the cached hash), and a copy with changes starts without one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    _hash: int | None = PrivateAttr(default=None)

    def _hash_key(self) -> tuple:
        """The values that identify the description (all fields by default)."""
        return tuple(self.__dict__.values())

    def __hash__(self) -> int:
        h = self.__pydantic_private__["_hash"]
        if h is None:
            h = hash(self._hash_key())
            self.__pydantic_private__["_hash"] = h
        return h

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__  # type: ignore[union-attr]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):  # noqa: ANN201
        new = super().model_copy(update=update, deep=deep)
        new.__pydantic_private__["_hash"] = None
        return new
