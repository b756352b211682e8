"""`from_row` for the frozen dataclasses the stores return (as procrastinate's `Job.from_row`)."""

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Self

_NAMES: dict[type, frozenset[str]] = {}  # each class's field names, computed once


class FromRow:
    """A frozen dataclass built from a database row by its field names. Columns it does not
    name (a `SELECT *` returns them all) are ignored; a field it names but the row lacks takes
    the field's default, or is an error when it has none."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        names = _NAMES.get(cls)
        if names is None:
            names = _NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
        return cls(**{name: value for name, value in row.items() if name in names})
