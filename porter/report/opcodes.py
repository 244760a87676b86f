"""SASS opcode histograms side by side, shared by ``porter diff``'s table and its HTML page
(the command imports the report, never the other way round)."""

from __future__ import annotations


def histogram_rows(hist_a: dict | None, hist_b: dict | None, signature: set[str] = frozenset(),
                   top: int | None = None) -> list[tuple[str, int | None, int | None]]:
    """(opcode, count on a, count on b): the ``signature`` opcodes first (all of them,
    never cut), then the others, those that differ first by size of change, cut to
    ``top``. A side with no histogram (the kernel is unsupported or missing there) gives
    None for every count, shown as "-": it has no SASS, not zero of each opcode."""
    ops = set(hist_a or {}) | set(hist_b or {})

    def count(hist, op):
        return None if hist is None else hist.get(op, 0)

    def key(r):
        x, y = r[1] or 0, r[2] or 0
        return (x == y, -abs(x - y), -(x + y), r[0])

    rows = [(op, count(hist_a, op), count(hist_b, op)) for op in ops]
    first = sorted((r for r in rows if r[0] in signature), key=key)
    rest = sorted((r for r in rows if r[0] not in signature), key=key)
    return first + (rest if top is None else rest[:top])


def opcode_mark(x: int | None, y: int | None) -> str:
    """"new" / "gone" only when both sides have SASS to compare."""
    if x is None or y is None or x == y:
        return ""
    return "new" if x == 0 else "gone" if y == 0 else ""
