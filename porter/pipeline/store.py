"""The stage store: results keyed by content hash under build/<arch>/.stages/.

Each entry is one JSON file ``<name>.json`` holding ``{"key": ..., "result": ...,
"digest": ...}``; a lookup hits only when the stored key equals the key of the current
inputs and the digest (sha256 of the key and the result as canonical JSON) matches what
the entry holds: a corrupt entry is discarded, counted (``corrupt``) and rebuilt as a miss.
Entries are written atomically (temp file + rename), so an interrupted run leaves
only whole entries (the finished ones, which a rerun reuses) and two concurrent
runs never leave a torn file: the last rename wins and both wrote the same content.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from porter.fsutil import atomic_write

_SAFE = re.compile(r"[^A-Za-z0-9_.+-]")


def _digest(key, result) -> str:
    from porter.compile.cache_entry import content_digest

    return content_digest(json.dumps({"key": key, "result": result}, sort_keys=True, default=str))


class StageStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.corrupt = 0      # entries whose content did not match their digest (discarded)

    def path(self, name: str) -> Path:
        parts = [(_SAFE.sub("_", p) or "_") for p in name.split("/")]
        parts[-1] += ".json"   # not with_suffix: "gemm.bf16" must not become "gemm.json"
        return self.root.joinpath(*parts)

    def get(self, name: str, key: str):
        path = self.path(name)
        try:
            raw = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            entry = json.loads(raw)
            if isinstance(entry, dict) and "digest" not in entry and "key" in entry:
                self.misses += 1   # written before entries carried digests: rebuilt, not corrupt
                return None
            whole = isinstance(entry, dict) and entry.get("digest") == _digest(entry.get("key"), entry.get("result"))
        except ValueError:     # torn or not JSON (UnicodeDecodeError is a ValueError)
            whole = False
        if not whole:
            # Other bytes than were written: never trust them, whatever their key says.
            try:
                path.unlink()
            except OSError:
                pass
            self.corrupt += 1
            self.misses += 1
            return None
        if entry.get("key") != key:
            self.misses += 1
            return None
        self.hits += 1
        return entry.get("result")

    def put(self, name: str, key: str, result) -> None:
        # Round-trip through JSON first, so the digest is of exactly what a reader gets back.
        result = json.loads(json.dumps(result, default=str))
        atomic_write(self.path(name), json.dumps({"key": key, "result": result, "digest": _digest(key, result)},
                                                 sort_keys=True, indent=1))
