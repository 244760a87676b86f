"""The SASS expansion table: SASS instructions per PTX instruction, per class.

ptxas does not translate one PTX instruction into one SASS instruction: Blackwell fuses
two dependent ``max.f32`` into one three-input max (128 max.f32 -> 64), a 64-bit add is
two, a shared load of a vector may stay one. porter.timing.l1 counts the kernel's own
disassembly per class (the descriptor's ``sass_ops`` patterns spell the SASS; nothing is
spelled here) against the kernel's PTX per class, and the timed mode issues ``factor``
SASS instructions for each PTX instruction of that class.
"""

from __future__ import annotations

# PTX (opcode, type) -> the descriptor's sass_ops class that counts its SASS
PTX_CLASSES = {
    ("max", "f32"): "fp32_minmax", ("min", "f32"): "fp32_minmax",
    ("ex2", "f32"): "exp2",
    ("add", "f32"): "fp32_add", ("sub", "f32"): "fp32_add",
    ("mul", "f32"): "fp32_mul",
    ("fma", "f32"): "fp32_fma",
}
SPACE_CLASSES = {("ld", "shared"): "shared_load", ("st", "shared"): "shared_store", ("st", "global"): "global_store"}


def ptx_class(parts: list[str]) -> str | None:
    """The sass_ops class a PTX instruction (its dotted parts) belongs to, if any."""
    head = parts[0]
    for p in parts[1:]:
        c = SPACE_CLASSES.get((head, p.split("::")[0]))
        if c:
            return c
    if parts[-1] in ("f32", "ftz") or "f32" in parts:
        return PTX_CLASSES.get((head, "f32"))
    return None


def table(ptx_counts: dict, sass_counts: dict) -> dict:
    """{class: SASS per PTX} for the classes both sides count (a class the SASS lacks, e.g.
    folded into another instruction, keeps factor 1: no evidence either way)."""
    out = {}
    for cls, n in ptx_counts.items():
        s = sass_counts.get(cls, 0)
        if n > 0 and s > 0:
            out[cls] = s / n
    return out
