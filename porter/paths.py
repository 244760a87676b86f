"""Where porter's data folders live, in a source checkout and in an installed wheel.

In a checkout (or ``pip install -e .``) the folders sit beside the package; a
regular ``pip install .`` copies them into ``porter/_data/`` (see pyproject.toml).
"""

from pathlib import Path
import os

_PKG = Path(__file__).resolve().parent
_DATA_FOLDERS = ("arch", "templates", "kernels_src", "runbooks", "validation", "tuning")


def data_dir(name: str) -> Path:
    """The folder ``name`` (one of arch, templates, kernels_src, runbooks, validation)."""
    if name not in _DATA_FOLDERS:
        raise ValueError(f"unknown data folder {name!r}")
    for candidate in (_PKG.parent / name, _PKG / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"porter data folder {name!r} not found beside {_PKG}")


def cache_dir() -> Path:
    """On-disk cache for compiles and bundled headers (PORTER_CACHE_DIR overrides)."""
    root = os.environ.get("PORTER_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "porter"
    path.mkdir(parents=True, exist_ok=True)
    return path
