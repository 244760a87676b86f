"""Prepared cubins: the manifest ``benchmarks/device_check.py prepare`` writes, checked
before a GPU run uses it, and the cubins a CUDA device may load for a spec.

A GPU machine may lack the header-bundling NVRTC and nvdisasm, so a device run takes
levels, SASS evidence and resources from the manifest and never compiles. The
manifest records porter's commit, the NVRTC version, a digest of every source file that
shapes a cubin or its argument contract (``SOURCE_FOLDERS``), each cubin's
sha256 and the shapes the run will use; ``check_manifest`` refuses a stale (a source
file changed since ``prepare``) or foreign (another arch, another format) manifest
with one line saying what differs.

``PORTER_CUBIN_DIR`` names the prepared folder. Without it, ``candidates`` builds the
kernel here (NVRTC + nvdisasm), as ``porter validate`` does on a workstation.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from porter.errors import PorterError

CUBIN_DIR_ENV = "PORTER_CUBIN_DIR"
MANIFEST = "manifest.json"
FORMAT = 2
# Files and folders that decide what a cubin holds and the argument contract the host
# meets (the kernels' configs, parameter lists, tensor maps, the megakernel's ISA); the
# rest of porter (reports, CLI, the emulator) can change without making cubins stale.
SOURCE_FOLDERS = ("templates", "kernels_src", "arch", "porter/kernels", "porter/megakernel",
                  "porter/compile/toolchain.py", "porter/descriptor/arch.py", "porter/descriptor/arch_schema.py",
                  "porter/runtime/gemm.py", "porter/runtime/tensormap.py")
SOURCE_SUFFIXES = (".py", ".j2", ".cuh", ".cu", ".h", ".yaml", ".yml")
NOT_SOURCES = ("kernels_src/probes/",)      # feature probes: compiled alone, never into a kernel


def checkout_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent


def source_digests(root: Path | None = None) -> dict[str, str]:
    """sha256 of every file that shapes a cubin, by path relative to the checkout."""
    root = root or checkout_root()
    out = {}
    for folder in SOURCE_FOLDERS:
        base = root / folder
        if not base.exists():
            continue
        for path in ([base] if base.is_file() else sorted(base.rglob("*"))):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts \
                    and not path.name.startswith(".") and not rel.startswith(NOT_SOURCES):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def tree_digest(digests: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(digests.items())).encode()).hexdigest()


def porter_commit(root: Path | None = None) -> str:
    """The checkout's git commit (with "+dirty" when tracked files changed), or "unknown"."""
    import subprocess

    root = root or checkout_root()
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *SOURCE_FOLDERS],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(folder) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise PorterError(f"{CUBIN_DIR_ENV}={folder}: no {MANIFEST} there; run benchmarks/device_check.py prepare")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise PorterError(f"{path}: not a porter manifest ({exc}); run benchmarks/device_check.py prepare") from None


def check_manifest(manifest: dict, arch_name: str, folder, root: Path | None = None, sources: bool = True) -> None:
    """PorterError (one line: what differs) unless ``manifest`` was prepared for
    ``arch_name`` from exactly this checkout's sources, and its cubins are intact."""
    where = Path(folder) / MANIFEST
    if manifest.get("format") != FORMAT:
        raise PorterError(f"{where}: manifest format {manifest.get('format')!r}, this porter reads {FORMAT}; "
                          "run benchmarks/device_check.py prepare again")
    if manifest.get("arch") != arch_name:
        raise PorterError(f"{where}: prepared for {manifest.get('arch')!r}, this run is for {arch_name!r}")
    then = manifest.get("sources") or {}
    now = source_digests(root) if sources else then
    if sources and (tree_digest(now) != manifest.get("sources_sha256") or then != now):
        changed = sorted(p for p in set(then) | set(now) if then.get(p) != now.get(p))
        first = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise PorterError(f"{where}: stale: prepared at porter {manifest.get('porter_commit', '?')[:12]}, "
                          f"and {len(changed)} source file(s) differ here ({first or 'the digest'}); "
                          "run benchmarks/device_check.py prepare again")
    for key, entry in (manifest.get("kernels") or {}).items():
        for cubin_key in ("cubin", "fallback_cubin"):
            rel = entry.get(cubin_key)
            if not rel:
                continue
            path = Path(folder) / rel
            if not path.is_file():
                raise PorterError(f"{where}: {key}: {rel} is missing; carry the whole prepared folder")
            want = entry.get(f"{cubin_key}_sha256")
            if want and sha256(path.read_bytes()) != want:
                raise PorterError(f"{where}: {key}: {rel} does not match its recorded sha256; prepare again")


CHECKED_ENV = "PORTER_MANIFEST_CHECKED"


@functools.lru_cache(maxsize=8)
def _checked(folder: str, arch_name: str) -> dict:
    manifest = read_manifest(folder)
    if os.environ.get(CHECKED_ENV) and os.environ[CHECKED_ENV] == manifest.get("sources_sha256") \
            and manifest.get("arch") == arch_name:
        # the device check's parent compared every source file when the run began; a
        # child checks only its cubins (an edit during the run is not this run's concern)
        check_manifest(manifest, arch_name, folder, sources=False)
    else:
        check_manifest(manifest, arch_name, folder)
    return manifest


def prepared_entry(spec, arch) -> tuple[dict, Path] | None:
    """(manifest entry for ``spec``, the folder) when ``PORTER_CUBIN_DIR`` is set, else None.
    A spec the manifest does not hold, or holds in another configuration, is an error:
    the device run must not compile."""
    folder = os.environ.get(CUBIN_DIR_ENV)
    if not folder:
        return None
    manifest = _checked(str(Path(folder).resolve()), arch.name)
    from porter.pipeline.work import jsonable

    kernels = manifest.get("kernels") or {}
    key = f"{arch.name}/{spec.name}"
    want = jsonable(spec.to_dict())
    entry = kernels.get(key)
    if entry is None or entry.get("spec") != want:
        # a knob form (an A/B pair's previous configuration) is kept under its own run name
        same = next((e for e in kernels.values() if e.get("spec") == want), None)
        if same is not None:
            return same, Path(folder)
    if entry is None:
        why = (manifest.get("failed") or {}).get(key)
        raise PorterError(f"{spec.name}: not in the prepared manifest "
                          + (f"(prepare failed to build it: {why})" if why else "(prepare did not build it)"))
    if want != entry.get("spec"):
        raise PorterError(f"{spec.name}: the prepared manifest holds another configuration of this kernel; "
                          "prepare again")
    return entry, Path(folder)


def candidates(spec, arch):
    """(label, cubin bytes) to try in order: the prepared cubin, then its fallback built
    with an older toolchain; without a prepared folder, a build here."""
    found = prepared_entry(spec, arch)
    if found is not None:
        entry, folder = found
        yield f"prepared cubin ({entry.get('nvrtc', 'NVRTC')})", (folder / entry["cubin"]).read_bytes()
        if entry.get("fallback_cubin"):
            yield (f"fallback cubin ({entry.get('fallback_toolchain', 'older toolchain')})",
                   (folder / entry["fallback_cubin"]).read_bytes())
        return
    from porter.kernels.build import build_kernel

    build = build_kernel(spec, arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        raise PorterError(f"{spec.name}: kernel not usable on {arch.name}: "
                          + (f"{failed.name}: {failed.detail}" if failed else build.compile_error))
    yield "built here (NVRTC)", build.compiled.cubin


def level_evidence(spec, arch) -> dict:
    """The level, SASS checks and resources of ``spec``: from the prepared manifest when
    there is one (no toolchain needed), else from a build here."""
    found = prepared_entry(spec, arch)
    if found is not None:
        entry, _ = found
        return {"level": entry["level"], "sass_checks": entry.get("checks", []),
                "resources": entry.get("resources"), "from": "prepared manifest"}
    from porter.kernels.build import build_kernel

    build = build_kernel(spec, arch)
    return {"level": build.level.label,
            "sass_checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in build.checks],
            "resources": build.resources or None, "from": "built here"}
