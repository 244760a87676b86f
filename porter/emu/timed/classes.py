"""Instruction classes of the timed mode: what each PTX instruction costs, decided once per
program counter from its opcode (the SASS expansion factor from the kernel's own SASS
where one is given, porter.emu.timed.expansion)."""

from __future__ import annotations

import re

from porter.emu import ptx

MUFU_OPS = {"ex2", "lg2", "rsqrt", "rcp", "sqrt", "sin", "cos", "tanh"}
NO_DST = {"st", "red", "bar", "barrier", "bra", "ret", "exit", "trap", "mbarrier", "cp", "fence", "wgmma",
          "tcgen05", "stmatrix", "membar", "nanosleep", "prefetch", "griddepcontrol", "elect", "setmaxnreg"}
SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")


def mma_kind(types: list[str]) -> str:
    """The perf: MMA kind an instruction's operand types select."""
    t = set(types)
    if t & {"e4m3", "e5m2", "f8f6f4", "e2m1", "e3m2", "e2m3"}:
        return "f8"
    if "tf32" in t:
        return "tf32"
    if t & {"s8", "u8", "i8"}:
        return "i8"
    return "f16"


def classify(ins: ptx.Instr) -> tuple:
    """(class, info) for one instruction."""
    parts = ins.parts
    head = parts[0]
    ops = ins.operands
    space = next((p for p in parts[1:] if p.startswith("shared")), None)
    if head in ("ld", "st", "atom", "red") and space:
        width = _access_bytes(parts, ops[0] if head == "ld" else ops[-1])
        return ("smem", {"width": width, "addr": ops[1] if head in ("ld", "atom") else ops[0], "load": head != "st"})
    if head in ("ldmatrix", "stmatrix"):
        n = next((int(p[1:]) for p in parts if p in ("x1", "x2", "x4")), 1)
        return ("smem", {"width": 16, "addr": ops[1] if head == "ldmatrix" else ops[0], "rows": 8 * n,
                         "load": head == "ldmatrix"})
    if head in ("ld", "st", "atom", "red") and not any(p in ("param", "local", "const") for p in parts):
        width = _access_bytes(parts, ops[0] if head == "ld" else ops[-1])
        return ("gmem", {"width": width, "load": head != "st"})
    if head == "cp" and "bulk" in parts:
        return ("tma", {})
    if head == "cp" and "async" in parts:
        return ("cp_async", {"bytes": 16})
    if head == "wgmma":
        sub = parts[1]
        if sub == "mma_async":
            m = SHAPE.search(ins.opcode)
            mm, nn, kk = (int(x) for x in m.groups()) if m else (64, 64, 16)
            return ("wgmma", {"m": mm, "n": nn, "k": kk, "rs": isinstance(ops[1], ptx.Vec),
                              "kind": mma_kind(parts[-2:]), "in_bits": _bits(parts[-1])})
        return ("wgmma_" + sub, {"n": int(ops[0].value) if sub == "wait_group" and isinstance(ops[0], ptx.Imm) else 0})
    if head == "tcgen05":
        sub = parts[1]
        group = 2 if "cta_group::2" in parts else 1
        if sub == "mma":
            kind = next((p.split("::")[1] for p in parts if p.startswith("kind::")), "f16")
            return ("tc_mma", {"kind": kind, "group": group, "ts": isinstance(ops[1], ptx.Addr)})
        if sub in ("ld", "st"):
            shape = next((p for p in parts if "x" in p and p[0].isdigit()), "32x32b")
            num = next((int(p[1:]) for p in parts if p.startswith("x") and p[1:].isdigit()), 1)
            lanes_bits = {"32x32b": 32 * 32, "16x64b": 16 * 64, "16x128b": 16 * 128, "16x256b": 16 * 256,
                          "16x32bx2": 16 * 64}.get(shape, 32 * 32)
            return ("tc_" + sub, {"bytes": lanes_bits * num // 8})
        if sub == "wait::ld" or sub == "wait":
            return ("tc_wait", {"ld": "ld" in ins.opcode})
        if sub == "commit":
            return ("tc_commit", {"group": group})
        if sub == "cp":
            return ("tc_cp", {"bytes": 128 * 16})
        return ("alu", {})
    if head == "mma":
        m = SHAPE.search(ins.opcode)
        mm, nn, kk = (int(x) for x in m.groups()) if m else (16, 8, 16)
        return ("mma_sync", {"flops": 2 * mm * nn * kk, "kind": mma_kind(parts)})
    if head == "mbarrier":
        sub = parts[1]
        if sub in ("try_wait", "test_wait"):
            return ("mbar_wait", {"addr": ops[1], "parity": "parity" in parts})
        if sub in ("arrive", "arrive_drop", "expect_tx"):
            return ("mbar_arrive", {"addr": ops[1] if sub != "expect_tx" else ops[0]})
        return ("alu", {})
    if head == "bar" or (head == "barrier" and "cluster" not in parts):
        return ("bar", {"sync": "arrive" not in parts})
    if head == "barrier" and "cluster" in parts:
        return ("cluster_bar", {"wait": "wait" in parts})
    if head == "fence" or head == "membar":
        return ("fence", {})
    if head in MUFU_OPS and "approx" in parts:
        return ("mufu", {})
    if head in ("bra", "ret", "exit"):
        return ("branch", {})
    return ("alu", {"wide": any(p in ("f64", "s64", "u64", "b64") for p in parts[1:]) and head not in ("mov", "cvta", "ld")})


def _bits(t: str) -> int:
    m = re.search(r"(\d+)$", t)
    return int(m.group(1)) if m else 16


def _access_bytes(parts, op) -> int:
    vec = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
    bits = next((_bits(p) for p in reversed(parts) if re.fullmatch(r"[busf]\d+", p)), 32)
    return max(1, vec * bits // 8)


def family(ins: ptx.Instr) -> str:
    """The expansion table's key for an instruction: opcode and its type suffix."""
    parts = ins.parts
    t = next((p for p in reversed(parts) if re.fullmatch(r"(f|s|u|b)\d+|bf16x2|f16x2", p)), "")
    return f"{parts[0]}.{t}" if t else parts[0]
