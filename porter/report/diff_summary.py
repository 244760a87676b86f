"""One row per kernel of ``porter diff``: hunks, lines added and removed, the features
behind them, signature opcodes that appear or go, registers and shared memory. The terminal
prints it as a table (porter.commands.diff) and the --html page opens with it."""

from __future__ import annotations


def summary_row(d: dict) -> dict:
    """One kernel's diff in a few figures: hunks, lines added and removed, the features
    that drove them (with hunk counts), signature opcodes that appear or go, resources."""
    from collections import Counter

    added = sum(1 for h in d["hunks"] for line in h.lines if line.startswith("+"))
    removed = sum(1 for h in d["hunks"] for line in h.lines if line.startswith("-"))
    # A label names a feature and the file it comes from ("wgmma (gemm/wgmma.cu.j2)"): count by feature.
    labels = Counter(f for h in d["hunks"] for f in {label.split(" (", 1)[0] for label in h.labels})
    ha, hb = d["histogram"].get("a"), d["histogram"].get("b")
    sig = d["signature_opcodes"]
    new = [op for op in sig if ha is not None and hb is not None and not ha.get(op) and hb.get(op)]
    gone = [op for op in sig if ha is not None and hb is not None and ha.get(op) and not hb.get(op)]
    ra, rb = d["resources"].get("a", {}), d["resources"].get("b", {})

    def pair(key):
        x, y = ra.get(key), rb.get(key)
        return None if x is None and y is None else f"{'-' if x is None else x} -> {'-' if y is None else y}"

    return {"hunks": len(d["hunks"]), "added": added, "removed": removed,
            "features": [f"{label} ({n})" for label, n in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))],
            "opcodes_new": new, "opcodes_gone": gone, "registers": pair("registers"),
            "smem": pair("dynamic_smem_bytes"), "notes": list(d["notes"])}
