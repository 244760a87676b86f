"""The answer a report gives first, built once for report.md and report.html: the
highest level reached, whether a GPU ran anything, what to do next, and the level
legend. Each line is plain text with a few marked parts; each format draws the marks
its own way (markdown bold, an HTML level badge)."""

from __future__ import annotations

from dataclasses import dataclass

from porter.levels import QUALIFIERS, Level

# Marks on a part of a line: "" plain, "strong" emphasis, "level" a level label.
PLAIN, STRONG, LEVEL = "", "strong", "level"

LEVEL_LEGEND = ("levels, lowest to highest: " + " < ".join(
    lvl.label + (f" ({QUALIFIERS[lvl]})" if lvl in QUALIFIERS else "")
    for lvl in Level if lvl is not Level.FAILED))


@dataclass(frozen=True)
class Line:
    kind: str                              # "level" | "device" | "next" | "legend"
    parts: tuple[tuple[str, str], ...]     # (mark, text)

    @property
    def text(self) -> str:
        return "".join(t for _, t in self.parts)


def summary_lines(r: dict) -> list[Line]:
    """The summary of report ``r`` (report.json's content); the device line alone when
    the report has no summary."""
    s = r.get("summary")
    device = r["device"]
    if not s:
        return [Line("device", ((PLAIN, f"device: {'ran' if device['ran'] else 'not run'}: {device['detail']}"),))]
    lines = []
    if s["highest_level"]:
        top = s["levels"][s["highest_level"]]
        rest = [f"{n} {label}" for label, n in s["levels"].items() if label != s["highest_level"]]
        lines.append(Line("level", (
            (PLAIN, "highest level reached: "), (LEVEL, s["highest_level"]),
            (PLAIN, f", by {top} of {s['kernels']} kernels built"
                    + (f" (the others: {', '.join(rest)})" if rest else "")
                    + (f"; {s['unsupported']} variants unsupported on {r['arch']['name']}" if s["unsupported"] else "")))))
    else:
        lines.append(Line("level", ((PLAIN, "no kernel was built"),)))
    if not s["device_ran"]:
        lines.append(Line("device", ((STRONG, "device"), (PLAIN, f": {device['detail']}; "
                                                                 "no kernel here is device-validated or benchmarked"))))
    else:
        lines.append(Line("device", ((PLAIN, f"device: {device['detail']}"),)))
    lines += [Line("next", ((PLAIN, "next: "), (PLAIN, step))) for step in s["next_steps"]]
    lines.append(Line("legend", ((PLAIN, LEVEL_LEGEND),)))
    return lines
