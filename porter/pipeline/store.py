"""The stage store: results keyed by content hash under build/<arch>/.stages/.

Each entry is one JSON file ``<name>.json`` holding ``{"key": ..., "result": ...}``;
a lookup hits only when the stored key equals the key of the current inputs.
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


class StageStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def path(self, name: str) -> Path:
        parts = [(_SAFE.sub("_", p) or "_") for p in name.split("/")]
        parts[-1] += ".json"   # not with_suffix: "gemm.bf16" must not become "gemm.json"
        return self.root.joinpath(*parts)

    def get(self, name: str, key: str):
        try:
            entry = json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.misses += 1
            return None
        if entry.get("key") != key:
            self.misses += 1
            return None
        self.hits += 1
        return entry.get("result")

    def put(self, name: str, key: str, result) -> None:
        atomic_write(self.path(name), json.dumps({"key": key, "result": result}, sort_keys=True,
                                                 indent=1, default=str))
