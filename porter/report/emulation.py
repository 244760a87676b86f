"""The emulation section of report.md and report.html: what ran in porter's PTX simulator
(shapes, input seeds, warp-instructions, the checks that were on, time), per kernel.

report.json keeps each kernel's simulator runs under ``kernels[].emulation``; this module
turns them into the rows both formats print, so the two never disagree. The words
"executed in porter's PTX simulator, not on a GPU" head the section: the simulator has no
timing and a sequentially consistent memory, so ``emulated`` is not a GPU result."""

from __future__ import annotations

from porter.levels import QUALIFIERS, Level

HEADING = f"Emulation ({QUALIFIERS[Level.EMULATED]})"


def shape_text(shape) -> str:
    """One emulation shape in words: [M, N, K] as 128x256x64, a dict as key=value pairs."""
    if isinstance(shape, (list, tuple)):
        return "x".join(str(v) for v in shape)
    if isinstance(shape, dict):
        return " ".join(f"{k}={shape_text(v)}" for k, v in shape.items())
    return str(shape)


def _joined(values, empty: str = "not recorded") -> str:
    return ", ".join(str(v) for v in values) if values else empty


def _first_line(text) -> str:
    return (str(text or "").strip().splitlines() or [""])[0]


def emulation_rows(r: dict) -> list[dict]:
    """One row per kernel that went to the simulator (kernels without an emulation entry
    did not: emulation off, or they failed before it). Text fields, ready to print."""
    rows = []
    for k in r["kernels"]:
        e = k.get("emulation")
        if not e:
            continue
        runs = e.get("runs") or []
        checks = e.get("checks_on")
        rows.append({
            "kernel": k["name"],
            "result": e.get("status") or "-",
            "shapes": _joined([shape_text(s) for s in e.get("shapes") or []]),
            "seeds": _joined(e.get("seeds") or []),
            "warp_instructions": sum(int(x.get("warp_instructions", 0)) for x in runs),
            "launches": len(runs),
            "checks_on": "; ".join(checks) if checks else "not recorded",
            "seconds": float(e.get("seconds") or 0.0),
            "reason": _first_line(e.get("reason")),
        })
    return rows


def emulation_intro(r: dict, rows: list[dict]) -> str:
    """The sentence before the table: how much ran, how fast, on what; or why nothing did."""
    if not rows:
        stage = next((s for s in r["stages"] if s.get("kind") == "emulation"), None)
        why = f"the emulation stage {stage['status']}: {stage['summary']}" if stage else \
            "the runbook has no emulation stage"
        return f"nothing ran in the simulator ({why})"
    wi = sum(x["warp_instructions"] for x in rows)
    secs = sum(x["seconds"] for x in rows)
    passed = sum(x["result"] == "passed" for x in rows)
    sm = next((k["emulation"].get("sm_count") for k in r["kernels"] if (k.get("emulation") or {}).get("sm_count")),
              None)
    device = f" (an emulated device of {sm} SMs)" if sm else ""
    rate = f" ({wi / secs:,.0f} warp-instructions/s)" if secs else ""
    common = common_checks(rows)
    checks = f" Checks on in every run: {common}." if common else ""
    return (f"{passed} of {len(rows)} kernels passed the fp64 references when their generated PTX was "
            f"executed in porter's PTX simulator{device}, not on a GPU: {wi:,} warp-instructions in "
            f"{secs:.1f} s{rate}.{checks} The simulator has no timing and a sequentially consistent memory: "
            "this proves the numbers at these shapes, not speed or behaviour under the GPU's memory model.")


def common_checks(rows: list[dict]) -> str | None:
    """The checks every row had on, when they agree (then the table needs no column for them)."""
    found = {x["checks_on"] for x in rows}
    return found.pop() if len(found) == 1 else None
