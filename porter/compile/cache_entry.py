"""Cache entries that carry a digest of their own content, checked on every read.

porter trusts its caches (the compile cache under ~/.cache/porter, the stage store under
build/ARCH/.stages): a flipped byte in a cached PTX would quietly drop a kernel a level,
a truncated SASS text would make the descriptor look wrong. So every entry stores the
sha256 of what it holds; a read that finds other bytes discards the entry (the caller then
rebuilds it, as on a miss) and counts it, and the run says how many it rebuilt."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class CorruptStats:
    """Entries found corrupt and discarded in this process (pool workers report theirs
    back with each unit's result: porter.pipeline.context)."""

    corrupt: int = 0


stats = CorruptStats()


def content_digest(*parts: bytes | str) -> str:
    """sha256 over the parts, each length-prefixed (so moving bytes between parts changes it)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def discard(*paths: Path) -> None:
    """Remove a corrupt entry's files and count it once; a file already gone is fine (another
    run may have discarded it first)."""
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError:
            pass   # unwritable: the caller rebuilds and overwrites it atomically anyway
    stats.corrupt += 1


def corrupt_text(n: int) -> str:
    """The summary's words: '2 cache entries were corrupt and rebuilt' ('' for none)."""
    if not n:
        return ""
    return f"{n} cache {'entry was' if n == 1 else 'entries were'} corrupt and rebuilt"
