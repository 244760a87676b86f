"""Compile CUDA C++ for a target with NVRTC from the pip wheels: no GPU, no system CUDA.

``compile_cuda`` returns PTX, cubin and the ptxas log. Results are cached on disk,
keyed by the source, the target, the options and the toolchain versions, so a
second compile of the same source never calls NVRTC (``stats.nvrtc_calls`` counts
the calls that did). A rejected source raises ``CompileError`` whose one-line
message quotes the failing *source* line, also for ptxas errors, which NVRTC
reports against PTX lines (mapped back through the PTX ``.loc`` directives).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from porter import paths
from porter.compile import cache_entry
from porter.errors import CompileError, PorterError
from porter.fsutil import atomic_write

# Bump when the cache entry layout or the default options change.
# 3: the metadata carries a digest of the PTX, cubin and log (porter.compile.cache_entry).
_CACHE_FORMAT = 3
DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo", "-Xptxas=-v")


@dataclass
class CompileStats:
    """How often NVRTC really ran (cache hits do not count)."""

    nvrtc_calls: int = 0
    cache_hits: int = 0


stats = CompileStats()


@dataclass(frozen=True)
class CompileResult:
    name: str
    target: str
    options: tuple[str, ...]
    ptx: str
    cubin: bytes
    log: str
    key: str
    cached: bool = field(default=False, compare=False)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PorterError(
            "cuda-python is not installed: pip install cuda-python nvidia-cuda-nvrtc"
        ) from exc
    return nvrtc


def _check(result, what: str):
    """Unwrap a cuda.bindings (err, *values) tuple, raising PorterError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        nvrtc = _nvrtc()
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise PorterError(f"NVRTC {what} failed: {text.decode(errors='replace')}")
    return values[0] if len(values) == 1 else values


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    try:
        major, minor = _check(_nvrtc().nvrtcVersion(), "version query")
    except RuntimeError as exc:  # the wheel's shared library could not be loaded
        raise PorterError(
            f"NVRTC library not found ({exc}): pip install 'nvidia-cuda-nvrtc>=13.3'"
        ) from exc
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=1)
def toolchain_versions() -> dict[str, str]:
    """Versions that key the cache: NVRTC (compiler) and nvdisasm (disassembler)."""
    from porter.compile import sass

    return {"nvrtc": nvrtc_version(), "nvdisasm": sass.nvdisasm_version()}


def require_toolchain() -> dict[str, str]:
    """Check up front that every tool a compile-and-inspect run needs is here: a writable
    compile cache, NVRTC, nvdisasm and cuobjdump. A missing piece is one PorterError naming it and the wheel
    that carries it, before any work starts (not one failure per kernel later on)."""
    import os

    from porter.compile import sass

    try:
        cache = paths.cache_dir()
    except OSError as exc:
        raise PorterError(f"{exc.filename or 'cache folder'}: cannot create porter's compile cache "
                          f"({exc.strerror or exc}); set PORTER_CACHE_DIR to a folder you can write to") from None
    if not os.access(cache, os.W_OK | os.X_OK):
        raise PorterError(f"{cache}: porter's compile cache is not writable; "
                          "set PORTER_CACHE_DIR to a folder you can write to")
    versions = toolchain_versions()           # loads NVRTC and runs nvdisasm --version
    sass.tool_path("cuobjdump")               # resource usage comes from cuobjdump
    return versions


def _bundled_headers_dir() -> Path:
    major, minor = (int(x) for x in nvrtc_version().split("."))
    if (major, minor) < (13, 3):
        raise PorterError(
            f"NVRTC {major}.{minor} does not carry the CUDA headers; "
            "pip install 'nvidia-cuda-nvrtc>=13.3'"
        )
    path = paths.cache_dir() / f"nvrtc-headers-{major}.{minor}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(source: str, target: str, options: tuple[str, ...]) -> str:
    payload = json.dumps(
        {
            "format": _CACHE_FORMAT,
            "source": source,
            "target": target,
            "options": list(options),
            "versions": toolchain_versions(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _cache_paths(key: str) -> tuple[Path, Path, Path]:
    folder = paths.cache_dir() / "compile" / key[:2]
    return folder / f"{key}.json", folder / f"{key}.cubin", folder / f"{key}.ptx"


def _entry_digest(entry: dict) -> str:
    return cache_entry.content_digest(entry["ptx"], entry["cubin"], entry.get("log", ""),
                                      str(bool(entry.get("failed"))))


def _load_cached(key: str) -> dict | None:
    """The entry under ``key``, or None: on a miss, and on an entry whose content does not
    match its digest (a torn or flipped file: discarded and counted, so it is rebuilt)."""
    meta_path, cubin_path, ptx_path = _cache_paths(key)
    try:
        raw = meta_path.read_bytes()
    except OSError:
        return None                                   # a plain miss
    try:
        meta = json.loads(raw)
        meta["cubin"] = cubin_path.read_bytes()
        meta["ptx"] = ptx_path.read_bytes().decode("utf-8")
        ok = isinstance(meta, dict) and meta.get("digest") == _entry_digest(meta)
    except (OSError, ValueError, TypeError, AttributeError):   # unreadable JSON, a payload gone, bad UTF-8
        ok = False
    if not ok:
        cache_entry.discard(meta_path, cubin_path, ptx_path)
        return None
    return meta


def _store_cached(key: str, entry: dict) -> None:
    meta_path, cubin_path, ptx_path = _cache_paths(key)
    # Payloads first, metadata last: a reader that finds the metadata finds the rest.
    atomic_write(cubin_path, entry["cubin"])
    atomic_write(ptx_path, entry["ptx"])
    meta = {k: v for k, v in entry.items() if k not in ("cubin", "ptx")}
    meta["digest"] = _entry_digest(entry)
    atomic_write(meta_path, json.dumps(meta, sort_keys=True))


def compile_cuda(
    source: str,
    target: str,
    name: str = "kernel.cu",
    options: tuple[str, ...] | list[str] = (),
    use_cache: bool = True,
) -> CompileResult:
    """Compile ``source`` for ``target`` (e.g. "sm_100a") to PTX and cubin.

    Raises CompileError (one line quoting the failing source line) when NVRTC or
    ptxas rejects the source.
    """
    if not re.fullmatch(r"sm_\d+[af]?", target):
        raise PorterError(f"bad compile target {target!r}: expected e.g. sm_90a or sm_100a")
    all_options = tuple(DEFAULT_OPTIONS) + tuple(options)
    key = cache_key(source, target, all_options)
    if use_cache:
        cached = _load_cached(key)
        if cached is not None:
            stats.cache_hits += 1
            if cached.get("failed"):
                # Describe the failure again: the same source may be cached under
                # another file name, and the message must name this caller's file.
                log = cached.get("log", "")
                raise CompileError(describe_compile_error(source, name, cached["ptx"], log), log)
            return CompileResult(name, target, all_options, cached["ptx"], cached["cubin"],
                                 cached["log"], key, cached=True)

    ptx, cubin, log, ok = _run_nvrtc(source, target, name, all_options)
    if not ok:
        message = describe_compile_error(source, name, ptx, log)
        if use_cache:
            # Failures are cached too: "the Hopper kernel does not compile for
            # sm_100a" is a result the pipeline asks for on every run.
            _store_cached(key, {"ptx": ptx, "cubin": b"", "log": log, "failed": True})
        raise CompileError(message, log)
    if use_cache:
        _store_cached(key, {"ptx": ptx, "cubin": cubin, "log": log, "failed": False})
    return CompileResult(name, target, all_options, ptx, cubin, log, key)


def _run_nvrtc(source: str, target: str, name: str, options: tuple[str, ...]):
    nvrtc = _nvrtc()
    headers = _bundled_headers_dir()
    opts = [f"-arch={target}".encode(), f"--use-bundled-headers={headers}".encode()]
    opts += [o.encode() for o in options]
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "program creation")
    try:
        stats.nvrtc_calls += 1
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log_buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, log_buf), "log")
        log = log_buf.rstrip(b"\x00 ").decode(errors="replace")
        ptx = ""
        ptx_size = nvrtc.nvrtcGetPTXSize(prog)
        if int(ptx_size[0]) == 0 and ptx_size[1] > 0:
            ptx_buf = b" " * ptx_size[1]
            nvrtc.nvrtcGetPTX(prog, ptx_buf)
            ptx = ptx_buf.rstrip(b"\x00").decode(errors="replace")
        cubin = b""
        if int(err) == 0:
            cubin_size = _check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
            cubin_buf = b" " * cubin_size
            _check(nvrtc.nvrtcGetCUBIN(prog, cubin_buf), "cubin")
            cubin = bytes(cubin_buf)
        return ptx, cubin, log, int(err) == 0 and bool(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_FRONTEND_ERROR = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?:catastrophic )?error:? (?P<msg>.*)$")
_PTXAS_ERROR = re.compile(r"^ptxas .*?line (?P<line>\d+); error\s*: (?P<msg>.*)$")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")


def _ptx_line_to_source(ptx: str, ptx_line: int) -> int | None:
    """Map a PTX line to the source line of the nearest preceding ``.loc``."""
    lines = ptx.splitlines()
    for text in reversed(lines[: max(ptx_line - 1, 0)]):
        match = _LOC.match(text)
        if match:
            return int(match.group(2))
    return None


def describe_compile_error(source: str, name: str, ptx: str, log: str) -> str:
    """One line: where it failed, the compiler's words, and the source line itself."""
    src_lines = source.splitlines()

    def quote(line_no: int | None) -> str:
        if line_no and 0 < line_no <= len(src_lines):
            return f" | {line_no}: {src_lines[line_no - 1].strip()}"
        return ""

    for raw in log.splitlines():
        raw = raw.strip()
        front = _FRONTEND_ERROR.match(raw)
        if front:
            line_no = int(front.group("line"))
            return f"{name}:{line_no}: error: {front.group('msg').strip()}{quote(line_no)}"
        back = _PTXAS_ERROR.match(raw)
        if back:
            line_no = _ptx_line_to_source(ptx, int(back.group("line")))
            where = f"{name}:{line_no}" if line_no else f"{name} (PTX line {back.group('line')})"
            return f"{where}: ptxas error: {back.group('msg').strip()}{quote(line_no)}"
    first = next((l.strip() for l in log.splitlines() if l.strip()), "no compiler log")
    return f"{name}: compilation failed: {first}"
