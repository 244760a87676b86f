"""Content hashes that key stage results: inputs in, one hex digest out.

A key covers everything a result depends on: source text, target, toolchain
versions, descriptor digest and the code that computes it (hashes of the files
named per stage kind), so an edit anywhere in that chain re-runs exactly the
stages it can change and nothing else.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent   # porter/

# Files whose text decides each kind of result (relative to porter/; globs allowed).
CODE_FILES = {
    "build": ("kernels/build.py", "kernels/base.py", "compile/toolchain.py", "compile/sass.py", "levels.py",
              "pipeline/work.py"),
    "numerics": ("pipeline/work.py", "levels.py"),
    "probes": ("descriptor/probes.py", "compile/toolchain.py", "compile/sass.py"),
    "descriptor": ("descriptor/arch.py", "descriptor/arch_schema.py", "pipeline/stages.py"),
    "plan": ("planning/plan.py", "pipeline/stages.py"),
    "primitives": ("pipeline/stages.py", "compile/toolchain.py", "planning/plan.py"),
    "stages": ("pipeline/stages.py", "pipeline/context.py", "pipeline/work.py", "kernels/build.py",
               "kernels/base.py", "levels.py", "planning/plan.py", "commands/kernel.py"),
}


def digest(obj) -> str:
    """sha256 of a JSON-able object (sorted keys) or of bytes/str."""
    if isinstance(obj, bytes):
        data = obj
    elif isinstance(obj, str):
        data = obj.encode()
    else:
        data = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def file_digest(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(set(paths)):
        p = Path(path)
        h.update(str(p.name).encode())
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"<absent>")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def code_version(kind: str) -> str:
    return file_digest(_PKG / rel for rel in CODE_FILES[kind])


def folder_digest(folder: Path, pattern: str = "*") -> str:
    return file_digest(p for p in Path(folder).rglob(pattern) if p.is_file())


@functools.lru_cache(maxsize=1)
def toolchain_fingerprint() -> dict:
    """Versions of the compiler wheels, read from package metadata (no NVRTC load: keeps
    the cached path fast)."""
    from importlib import metadata

    out = {}
    for dist in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvdisasm", "nvidia-cuda-cuobjdump", "cuda-bindings"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def module_digest(module) -> str:
    """Hash of a module's source file (a family module: its variants, render and numerics)."""
    path = getattr(module, "__file__", None)
    return file_digest([path]) if path else digest(repr(module))


def family_files_digest(families) -> str:
    """Hash of the families' module files and everything beside them in porter/kernels/
    (helpers they import), found without importing them (keeps the cached path light)."""
    import importlib.util
    import sys

    from porter import kernels

    files = {p for p in (_PKG / "kernels").glob("*.py")}
    for fam in families:
        name = f"porter.kernels.{kernels.FAMILIES[fam]}"
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if origin is None:
            try:
                spec = importlib.util.find_spec(name)
                origin = spec.origin if spec else None
            except (ImportError, ValueError):
                origin = None
        if origin:
            files.add(Path(origin))
    return digest([sorted(kernels.FAMILIES.items()), file_digest(files)])


@functools.lru_cache(maxsize=None)
def data_digest(folder: str, pattern: str = "*") -> str:
    """Hash of a data folder (templates, kernels_src, validation) by name."""
    from porter import paths

    try:
        return folder_digest(paths.data_dir(folder), pattern)
    except FileNotFoundError:
        return "absent"


def render_sources_digest() -> str:
    """Hash of every file on the template loader's path (templates/ and kernels_src/ as
    porter.compile.render sees them): a kernel's source is a function of these, its family's
    code, its spec and the descriptor."""
    from porter.compile import render

    loader = render.environment().loader
    roots = getattr(loader, "searchpath", None)
    if not roots:
        return digest([data_digest("templates"), data_digest("kernels_src")])
    return digest([folder_digest(Path(r)) for r in roots])
