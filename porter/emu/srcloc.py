"""Source locations for the simulator's messages: which ``.cu`` line a PTX line came from.

NVRTC with ``-lineinfo`` (porter's default) writes ``.file N "path"`` and, before the
instructions of each source line, ``.loc N LINE COL`` (with ``inlined_at N LINE COL`` when
the line belongs to an inlined function). ``SourceMap`` reads those directives from the PTX
text, so every message that names a PTX line (checkers, deadlocks, unsupported forms, races,
parse errors) can name the source line beside it: ``gemm.ptx:812 (gemm.cu:143)``.

The map is built from the text, not from the parser, so it needs nothing from the decoder
and works for any PTX with line info; PTX without ``.loc`` (hand-written) maps nothing and
messages stay as they are.
"""

from __future__ import annotations

import functools
import os
import re

from porter.emu.errors import EmuError

_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")
_CODE = re.compile(r"^\s*(?:@!?%?\w+\s+)?[a-z_][\w.:]*")   # an instruction line (not a directive or label)


class SourceMap:
    """PTX line -> "file.cu:LINE" (and the call site when inlined), from the PTX text."""

    def __init__(self, ptx_text: str):
        files: dict[int, str] = {}
        locs: dict[int, tuple] = {}
        current = None
        for no, line in enumerate(ptx_text.splitlines(), 1):
            if ".file" in line and (m := _FILE.match(line)):
                files[int(m.group(1))] = m.group(2)
                continue
            if ".loc" in line and (m := _LOC.match(line)):
                current = (int(m.group(1)), int(m.group(2)),
                           int(m.group(3)) if m.group(3) else None, int(m.group(4)) if m.group(4) else None)
                continue
            if ".entry" in line:
                current = None                       # a new kernel starts without a location
                continue
            stripped = line.lstrip()
            if current is not None and not stripped.startswith((".", "//", "{", "}", "$")) and _CODE.match(line):
                locs[no] = current
        self._files = {k: os.path.basename(v) for k, v in files.items()}
        self._locs = locs

    def __bool__(self) -> bool:
        return bool(self._locs)

    def at(self, ptx_line: int) -> str | None:
        """``file.cu:LINE`` for an instruction's PTX line, or None without line info."""
        loc = self._locs.get(int(ptx_line))
        if loc is None:
            return None
        fidx, line, ifidx, iline = loc
        text = f"{self._files.get(fidx, f'file {fidx}')}:{line}"
        if iline is not None:
            inl = self._files.get(ifidx, f"file {ifidx}")
            text += f", inlined at {'line ' + str(iline) if ifidx == fidx else f'{inl}:{iline}'}"
        return text

    def annotate(self, message: str, ptx_file: str) -> str:
        """``message`` with the source location after each ``ptx_file:LINE`` it names."""
        if not self._locs or not ptx_file:
            return message
        pattern = re.compile(re.escape(ptx_file) + r":(\d+)(?![\d(])(?! \()")

        def add(m: re.Match) -> str:
            src = self.at(int(m.group(1)))
            return m.group(0) + (f" ({src})" if src else "")
        return pattern.sub(add, message)


@functools.lru_cache(maxsize=32)
def source_map(ptx_text: str) -> SourceMap:
    return SourceMap(ptx_text)


def with_source(exc: EmuError, ptx_text: str, ptx_file: str) -> EmuError:
    """The same error (same class, same exit code) with source locations beside its PTX
    lines; ``exc`` itself when the PTX carries no line info or the message names none."""
    message = str(exc)
    annotated = source_map(ptx_text).annotate(message, ptx_file)
    if annotated == message:
        return exc
    try:
        new = type(exc)(annotated)
    except TypeError:                        # an error class with another constructor: keep it
        return exc
    new.__dict__.update(exc.__dict__)
    return new
