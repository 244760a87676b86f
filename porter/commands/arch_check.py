"""``porter arch check NAME|FILE``: compile the feature probes and judge the descriptor.

Prints one row per probe (what the descriptor says, what the compiler says, the SASS
seen, the verdict), the per-feature verdicts, and a one-line summary. Exit code 1 when
the compiler disagrees with the descriptor anywhere, including a claimed feature that no
probe confirms on the target ("claimed but unproven"), 0 otherwise; bad input is a
PorterError (exit 2) like every other command.
"""

from __future__ import annotations

import json
import sys

from porter.descriptor.arch import load_arch
from porter.cli import jobs_arg
from porter.descriptor.probes import NOT_JUDGED, ArchCheck, ProbeResult, check_arch


def register(arch_subparsers) -> None:
    p = arch_subparsers.add_parser(
        "check", help="prove a descriptor's feature claims with probe compiles and SASS",
        description="Compile every probe in kernels_src/probes/ for the descriptor's target and "
                    "compare: claimed features must compile and show their SASS (a claim no probe confirms "
                    "on the target is unproven), denied ones must be rejected by the compiler. "
                    "Exit 1 on any disagreement.")
    p.add_argument("arch", metavar="NAME|FILE", help="a bare name (blackwell) or a path to a .yaml file")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--jobs", type=jobs_arg, default=None, help="parallel disassemblies (default 0: one per CPU)")
    p.set_defaults(func=cmd_check)


# Static shared memory is capped at 48 KiB below compute capability 9.0, so there the
# compiler cannot speak to the (larger, opt-in) dynamic per-block limit.
_STATIC_SMEM_CAP_BEFORE_SM90 = 48 * 1024


def _smem_source(nbytes: int) -> str:
    return ('extern "C" __global__ void smem_limit_probe(int* out) {\n'
            f"  __shared__ char buf[{nbytes}];\n"
            "  buf[threadIdx.x] = (char)threadIdx.x;\n"
            "  __syncthreads();\n"
            f"  out[threadIdx.x] = buf[(threadIdx.x * 977u) % {nbytes}u];\n"
            "}\n")


def prove_smem_per_block(arch) -> dict:
    """Prove ``limits.smem_per_block_kib`` with the compiler: ptxas accepts static shared
    memory up to the per-block limit of the target and rejects one byte more (sm_90a and
    sm_100a: 232,448 B; sm_120a: 101,376 B), so a kernel of exactly the claimed size must
    compile and one byte more must not. Returns {figure, verdict, detail, ok}."""
    from porter.errors import CompileError
    from porter.compile.toolchain import compile_cuda

    claimed = arch.smem_per_block_bytes

    def compiles(nbytes: int) -> bool:
        try:
            compile_cuda(_smem_source(nbytes), arch.target, name="smem_limit_probe.cu")
            return True
        except CompileError:
            return False

    figure = "limits.smem_per_block_kib"
    if arch.compute_capability < (9, 0) and claimed > _STATIC_SMEM_CAP_BEFORE_SM90:
        return {"figure": figure, "verdict": "not provable", "ok": True,
                "detail": f"static shared memory stops at 48 KiB before compute capability 9.0; "
                          f"{claimed} B is checked against the known figure only"}
    if not compiles(claimed):
        return {"figure": figure, "verdict": "contradicted", "ok": False,
                "detail": f"ptxas rejects {claimed} B of shared memory per block for {arch.target}: "
                          "the descriptor claims more than the target has"}
    if compiles(claimed + 1):
        return {"figure": figure, "verdict": "understated", "ok": True,
                "detail": f"ptxas also accepts {claimed + 1} B for {arch.target}: the claim "
                          f"({claimed} B) is safe but below the target's limit"}
    return {"figure": figure, "verdict": "proved", "ok": True,
            "detail": f"ptxas accepts {claimed} B per block for {arch.target} and rejects one byte more"}


def _descriptor_says(r: ProbeResult) -> str:
    text = f"claims {r.feature}" if r.claimed else f"denies {r.feature}"
    if r.denied_prereqs:
        text += f" ({'but' if r.claimed else 'and'} denies {', '.join(r.denied_prereqs)})"
    return text


def _compiler_says(r: ProbeResult) -> str:
    if r.compiled:
        return f"compiles for {r.target}"
    # The compiler's words without the "file:line:" prefix and the quoted source line
    # (both stay in --json).
    reason = r.error.split(" | ", 1)[0]
    reason = reason.split(": ", 1)[-1] if ": " in reason else reason
    return f"rejects: {reason}"


def _evidence(r: ProbeResult) -> str:
    if not r.compiled:
        return "-"
    seen: list[str] = []
    for hits in r.sass_found.values():
        for h in hits:
            short = h if len(h) <= 40 else h[:37] + "..."
            if short not in seen:
                seen.append(short)
    parts = [", ".join(seen)]
    if r.sass_missing:
        parts.append("missing: " + ", ".join(r.sass_missing))
    return "\n".join(p for p in parts if p)


def _style(verdict: str) -> str:
    if verdict.startswith("contradicted"):
        return f"[red]{verdict}[/red]"
    if verdict == "no probe" or verdict.startswith(NOT_JUDGED):
        return f"[yellow]{verdict}[/yellow]"
    return f"[green]{verdict}[/green]"


def summary_line(check: ArchCheck) -> str:
    n = len(check.probes)
    confirmed = sum(r.verdict == "confirmed" for r in check.probes)
    denied = sum(r.verdict == "denied-confirmed" for r in check.probes)
    unjudged = sum(r.verdict.startswith(NOT_JUDGED) for r in check.probes)
    bad = len(check.contradictions)
    unprobed = [f.feature for f in check.features if f.verdict == "no probe"]
    text = (f"{check.arch} ({check.target}): {n} probes, {confirmed} confirmed, {denied} denied-confirmed, "
            + (f"{unjudged} not judged, " if unjudged else "") +
            f"{bad} contradiction{'s' if bad != 1 else ''} in {check.seconds:.1f} s "
            f"(compile {check.compile_seconds:.1f} s, disassemble {check.disassemble_seconds:.1f} s)")
    if unprobed:
        text += f"; no probe for {', '.join(unprobed)}"
    return text + (": descriptor AGREES with the compiler" if check.ok else ": descriptor DISAGREES with the compiler")


def render(check: ArchCheck, limit: dict | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape as lit  # compiler and descriptor text is data, not markup

    con = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160, highlight=False)
    t = Table(title=f"feature probes: {check.arch} ({check.target})", title_justify="left")
    for col in ("probe", "feature", "descriptor says", "compiler says", "SASS evidence", "verdict"):
        t.add_column(col, overflow="fold")
    for r in check.probes:
        t.add_row(lit(r.probe), r.feature, lit(_descriptor_says(r)), lit(_compiler_says(r)), lit(_evidence(r)),
                  _style(r.verdict))
    con.print(t, markup=True)

    f = Table(title="features (the descriptor's SASS signature must appear in a probe using the feature)",
              title_justify="left")
    for col in ("feature", "descriptor", "probes", "signature", "signature seen in", "verdict"):
        f.add_column(col, overflow="fold")
    for fr in check.features:
        f.add_row(fr.feature, "claims" if fr.claimed else "denies", lit(", ".join(fr.probes) or "-"),
                  lit(", ".join(fr.signature) or "-"), lit(", ".join(fr.signature_seen_in) or "-"),
                  _style(fr.verdict))
    con.print(f)
    if check.kinds_without_probe:
        con.print(f"[yellow]MMA kinds the descriptor lists without a probe:[/yellow] "
                  f"{lit(', '.join(check.kinds_without_probe))}")
    for line in check.contradictions:
        con.print(f"[red]contradiction[/red] {lit(line)}", markup=True)
    if limit is not None:
        style = "red" if not limit["ok"] else "green" if limit["verdict"] == "proved" else "yellow"
        con.print(f"[{style}]{limit['verdict']}[/{style}] {limit['figure']}: {lit(limit['detail'])}", markup=True)
    con.print(summary_line(check), markup=False, soft_wrap=True)


def cmd_check(args) -> int:
    from porter.compile.toolchain import require_toolchain

    arch = load_arch(args.arch)
    require_toolchain()   # a missing tool or cache folder: one clear line before any compile
    check = check_arch(arch, jobs=args.jobs)
    limit = prove_smem_per_block(arch)
    if args.json:
        print(json.dumps({**check.to_dict(), "limits": [limit]}, indent=2))
    else:
        render(check, limit)
    return 0 if check.ok and limit["ok"] else 1
