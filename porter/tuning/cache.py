"""Task results by content key, in porter's cache (``porter.paths.cache_dir()/tuning``).

A key covers everything a task's result depends on (its payload, the code and data that
compute it), so a rerun, or a sweep resumed after Ctrl-C, hands out only the tasks whose
results are not here yet. Only real answers are kept (a candidate that compiled or failed
to, its prediction, its emulation verdict); a timeout or a crashed worker says nothing
about the candidate and is tried again next time.
"""

from __future__ import annotations

import json
from pathlib import Path

from porter.fsutil import atomic_write


class ResultCache:
    def __init__(self, root: Path | None = None, read: bool = True):
        if root is None:
            from porter.paths import cache_dir

            root = cache_dir() / "tuning"
        self.root = Path(root)
        self.read = read          # False: every task runs again (its new result is still kept)
        self.hits = 0

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if not self.read:
            return None
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        self.hits += 1
        return entry.get("result")

    def put(self, key: str, result: dict) -> None:
        atomic_write(self._path(key), json.dumps({"key": key, "result": result}, sort_keys=True, default=str))
