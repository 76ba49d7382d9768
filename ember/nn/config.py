"""``em.Config``: typed, validated configuration records with JSON and TOML files.

A config is a ``msgspec.Struct``: construct it with keywords, read it back
from JSON or TOML with every field type-checked and unknown fields refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ember.errors import RecordError
from ember.record_io import atomic_write_bytes

C = TypeVar("C", bound="Config")


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base class of configuration records.

    Example:
        >>> class TrainConfig(em.Config):
        ...     lr: float = 1e-3
        ...     hidden: int = 128
        >>> TrainConfig.from_json(TrainConfig(hidden=64).to_json()).hidden
        64
    """

    def to_json(self) -> str:
        """The config as a JSON string (every field, defaults included)."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls: type[C], text: str | bytes) -> C:
        """Build a config from JSON text.

        Raises:
            RecordError: a field of the wrong type, or an unknown field (text that is not JSON
                at all raises msgspec's ``DecodeError``).
        """
        return _decode(cls, text, msgspec.json.decode, "JSON")

    def to_toml(self) -> str:
        """The config as a TOML string (every field, defaults included)."""
        return msgspec.toml.encode(self).decode()

    @classmethod
    def from_toml(cls: type[C], text: str | bytes) -> C:
        """Build a config from TOML text.

        Raises:
            RecordError: a field of the wrong type, or an unknown field (text that is not TOML
                at all raises msgspec's ``DecodeError``).
        """
        return _decode(cls, text, msgspec.toml.decode, "TOML")

    def save(self, path: str | Path) -> None:
        """Write the config as JSON, or TOML when ``path`` ends in ``.toml`` (atomic)."""
        path = Path(path)
        text = self.to_toml() if path.suffix == ".toml" else self.to_json()
        atomic_write_bytes(path, text.encode())

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        """Read a config written by ``save`` (JSON, or TOML by suffix)."""
        path = Path(path)
        data = path.read_bytes()
        return cls.from_toml(data) if path.suffix == ".toml" else cls.from_json(data)


def _decode(cls: type, text: Any, decode: Any, kind: str) -> Any:
    try:
        return decode(text, type=cls)
    except msgspec.ValidationError as exc:
        raise RecordError(f"{cls.__name__}: invalid {kind}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise RecordError(f"{cls.__name__}: malformed {kind}: {exc}") from None
