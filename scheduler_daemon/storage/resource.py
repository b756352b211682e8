"""Locates the shipped `sql/` and `migrations/` folders, in a wheel or in a source checkout."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def resource_dir(name: str) -> Path:
    """The folder `name` inside the installed package (wheel) or at the top of the checkout."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"scheduler-daemon is installed without its {name}/ folder")
