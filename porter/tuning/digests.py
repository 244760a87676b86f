"""What a tuning result depends on, as hashes: the kernel's sources (a tuned entry is
stale when they change), the timing model, the simulator, and the tuner itself."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import porter.pipeline.keys as keys   # keys alone, not the pipeline package's runner

_PKG = Path(__file__).resolve().parent.parent   # porter/


_SOURCES: dict = {}


def source_hash(arch, spec, render) -> str:
    """The generated source a kernel is tuned on: the descriptor's text and the CUDA source
    its hand-chosen configuration (``spec``) renders to through its family's ``render``
    (templates, primitives and the family's code, as they produce this kernel). An edit that
    changes neither leaves its entries fresh; one that changes this kernel's source makes
    them stale. Products share it: they differ in figures, not in the code generated."""
    import json

    memo = (arch.digest, spec.name, json.dumps(dict(spec.config), sort_keys=True, default=str))
    if memo not in _SOURCES:
        _SOURCES[memo] = keys.digest([keys.digest(arch.text), keys.digest(render(spec, arch))])[:16]
    return _SOURCES[memo]


@functools.lru_cache(maxsize=None)
def timing_digest() -> str:
    return keys.folder_digest(_PKG / "timing", "*.py")


@functools.lru_cache(maxsize=None)
def emulation_digest() -> str:
    return keys.digest([keys.folder_digest(_PKG / "emu", "*.py"),
                        keys.file_digest((_PKG / "runtime").glob("emulated*.py")),
                        keys.file_digest((_PKG / "runtime").glob("device_runs.py")),
                        keys.data_digest("validation", "*.py")])


@functools.lru_cache(maxsize=None)
def tuner_digest() -> str:
    return keys.file_digest([_PKG / "tuning" / "tasks.py", _PKG / "tuning" / "model.py", _PKG / "kernels" / "build.py",
                             _PKG / "compile" / "toolchain.py", _PKG / "compile" / "sass.py"])


@functools.lru_cache(maxsize=1)
def porter_commit() -> str:
    """The checkout's commit (with '+dirty' when it has uncommitted changes), or 'unknown'
    for an install without its git history."""
    root = _PKG.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
