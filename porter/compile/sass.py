"""Machine code: disassemble a cubin with nvdisasm (from the pip wheel) and read it.

``disassemble`` gives the SASS text, ``opcode_histogram`` counts opcodes (full
opcode with modifiers, e.g. ``HGMMA.64x128x16.F32.BF16``), ``resource_usage``
reads registers, shared, stack and local memory per kernel (cuobjdump -res-usage)
and the spill bytes from the ptxas log.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, asdict
from pathlib import Path

from porter.errors import PorterError


def _wheel_bin(tool: str) -> Path:
    """The tool from the nvidia-cuda-* wheels (site-packages/nvidia/cu*/bin), else PATH."""
    try:
        import nvidia  # namespace package of the NVIDIA wheels
        for root in getattr(nvidia, "__path__", []):
            for candidate in sorted(Path(root).glob(f"cu*/bin/{tool}"), reverse=True):
                if candidate.is_file():
                    return candidate
    except ImportError:
        pass
    found = shutil.which(tool)
    if found:
        return Path(found)
    wheel = {"nvdisasm": "nvidia-cuda-nvdisasm", "cuobjdump": "nvidia-cuda-cuobjdump"}[tool]
    raise PorterError(f"{tool} not found (looked in the {wheel} wheel and on PATH): pip install {wheel}")


def tool_path(tool: str) -> Path:
    """Where ``nvdisasm`` or ``cuobjdump`` is; PorterError naming the wheel when absent."""
    return _wheel_bin(tool)


def _run_tool(tool: str, args: list[str], cubin: bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="porter-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(_wheel_bin(tool)), *args, str(path)],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
        raise PorterError(f"{tool} failed on the cubin: {first[0] if first else proc.returncode}")
    return proc.stdout


@functools.lru_cache(maxsize=1)
def nvdisasm_version() -> str:
    out = subprocess.run([str(_wheel_bin("nvdisasm")), "--version"],
                         capture_output=True, text=True).stdout
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return match.group(2) if match else out.strip().splitlines()[-1]


def disassemble(cubin: bytes, use_cache: bool = True) -> str:
    """SASS text of every function in the cubin.

    nvdisasm costs ~0.7 s per cubin even for a tiny kernel, more than most NVRTC
    compiles, so its text is cached on disk by the cubin's hash and nvdisasm's version.
    """
    if not cubin:
        raise PorterError("no cubin to disassemble (the compile failed)")
    if not use_cache:
        return _run_tool("nvdisasm", ["-c"], cubin)
    from porter import paths
    from porter.fsutil import atomic_write

    from porter.compile import cache_entry

    digest = hashlib.sha256(cubin + nvdisasm_version().encode()).hexdigest()
    # The first line holds the sha256 of the text after it, checked on read: a torn or
    # edited entry would otherwise make the descriptor's SASS look wrong (it is rebuilt).
    path = paths.cache_dir() / "sass" / digest[:2] / f"{digest}.checked.sass"
    try:
        head, _, text = path.read_bytes().decode("utf-8").partition("\n")
        if head == f"porter-sha256 {cache_entry.content_digest(text)}":
            return text
        cache_entry.discard(path)
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        cache_entry.discard(path)
    text = _run_tool("nvdisasm", ["-c"], cubin)
    atomic_write(path, f"porter-sha256 {cache_entry.content_digest(text)}\n{text}")
    return text


# "/*0050*/   @!P0 LDG.E R0, desc[UR6][R2.64] ;"
_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Za-z0-9_.]*)")
_FUNC = re.compile(r"^\s*\.text\.(\S+):")


def opcode_histogram(sass: str, function: str | None = None) -> Counter:
    """Count full opcodes (with modifiers) in ``sass``, optionally of one function."""
    counts: Counter = Counter()
    current = None
    for line in sass.splitlines():
        func = _FUNC.match(line)
        if func:
            current = func.group(1)
            continue
        if function is not None and current != function:
            continue
        match = _INSTR.match(line)
        if match:
            counts[match.group(1)] += 1
    return counts


def base_histogram(hist: Counter) -> Counter:
    """Collapse modifiers: ``HGMMA.64x128x16.F32.BF16`` -> ``HGMMA``."""
    base: Counter = Counter()
    for opcode, n in hist.items():
        base[opcode.split(".")[0]] += n
    return base


def count_matching(hist: Counter, pattern: str) -> int:
    """Instructions whose full opcode matches ``pattern`` (a regex anchored at the start)."""
    regex = re.compile(pattern)
    return sum(n for opcode, n in hist.items() if regex.match(opcode))


@dataclass(frozen=True)
class Resources:
    function: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    local_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


_RES_FUNC = re.compile(r"^\s*Function (\S+):")
_RES_FIELDS = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")
_SPILLS = re.compile(r"Function properties for (\S+)\s*\n.*?(\d+) bytes spill stores, (\d+) bytes spill loads",
                     re.S)


def resource_usage(cubin: bytes, ptxas_log: str = "") -> dict[str, Resources]:
    """Per-function resources from cuobjdump -res-usage, spills from the ptxas -v log."""
    out = _run_tool("cuobjdump", ["-res-usage"], cubin)
    spills = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _SPILLS.finditer(ptxas_log)}
    result: dict[str, Resources] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        match = _RES_FUNC.match(line)
        if not match or i + 1 >= len(lines):
            continue
        name = match.group(1)
        fields = {k: int(v) for k, v in _RES_FIELDS.findall(lines[i + 1])}
        stores, loads = spills.get(name, (0, 0))
        result[name] = Resources(name, fields.get("REG", 0), fields.get("SHARED", 0),
                                 fields.get("STACK", 0), fields.get("LOCAL", 0), stores, loads)
    return result
