"""Run a runbook for one arch: resolve inputs, walk the stage DAG, collect results."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from porter.errors import PorterError
from porter.pipeline.context import FAILED, Context, StageResult, default_jobs


@dataclass
class RunOptions:
    arch: str
    base: str | None = None          # --from
    runbook: str | None = None       # name or path; default <arch>-bringup, else generic-bringup
    out: Path | None = None          # default build/<arch>
    jobs: int = 0                    # 0: one per CPU
    device: str = "auto"             # auto | on | off
    kernel: str | None = None        # fnmatch pattern on kernel names / variants / families


@dataclass
class RunResult:
    arch: str
    base: str | None
    runbook: str
    out_dir: Path
    stages: list[StageResult] = field(default_factory=list)
    seconds: float = 0.0
    nvrtc_calls: int = 0             # in this process and in every worker
    units_run: int = 0
    units_cached: int = 0

    @property
    def failed(self) -> list[StageResult]:
        return [s for s in self.stages if s.status == FAILED]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def resolve(opts: RunOptions):
    """(arch, base or None, runbook) from the options; PorterError on bad input."""
    from porter.arch import load_arch
    from porter.runbook import list_runbooks, load_runbook

    if opts.device not in ("auto", "on", "off"):
        raise PorterError(f"--device {opts.device!r}: expected auto, on or off")
    arch = load_arch(opts.arch)
    if opts.runbook:
        book = load_runbook(opts.runbook)
    else:
        name = f"{arch.name}-bringup"
        book = load_runbook(name if name in list_runbooks() else "generic-bringup")
    base = None
    if opts.base:
        base = load_arch(opts.base)
    elif book.base:
        base = load_arch(book.base)
    else:
        from porter.plan import most_different_arch

        base = most_different_arch(arch)
    if base is not None and base.digest == arch.digest:
        raise PorterError(f"--from {opts.base}: the base is the target itself; pick another arch")
    return arch, base, book


def run_target(opts: RunOptions, display=None) -> RunResult:
    from porter.pipeline.context import NullDisplay
    from porter.pipeline.stages import STAGE_FUNCTIONS
    from porter.pipeline.store import StageStore

    start = time.perf_counter()
    arch, base, book = resolve(opts)
    jobs = opts.jobs if opts.jobs and opts.jobs > 0 else default_jobs()
    out_dir = Path(opts.out) if opts.out else Path("build") / arch.name
    ctx = Context(arch=arch, base=base, runbook=book, out_dir=out_dir,
                  store=StageStore(out_dir / ".stages"), jobs=jobs, device=opts.device,
                  kernel_pattern=opts.kernel, display=display or NullDisplay())
    run = RunResult(arch.name, base.name if base else None, book.name, out_dir)
    ctx.run_info = run
    try:
        for generation in book.generations():
            for sid in generation:
                stage = book.stages[sid]
                before = (ctx.units_run, ctx.units_cached)
                try:
                    result = STAGE_FUNCTIONS[stage.kind](ctx, stage)
                except PorterError as exc:
                    result = StageResult(stage.id, stage.kind, stage.title, FAILED, str(exc))
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # one broken stage must not hide the others
                    result = StageResult(stage.id, stage.kind, stage.title, FAILED,
                                         f"{type(exc).__name__}: {exc}")
                result.units_run = ctx.units_run - before[0]
                result.units_cached = ctx.units_cached - before[1]
                ctx.results[sid] = result
                run.stages.append(result)
                ctx.display.stage_done(result)
                run.nvrtc_calls, run.units_run, run.units_cached = ctx.nvrtc_calls, ctx.units_run, ctx.units_cached
                run.seconds = time.perf_counter() - start
    finally:
        ctx.close()
    run.nvrtc_calls, run.units_run, run.units_cached = ctx.nvrtc_calls, ctx.units_run, ctx.units_cached
    run.seconds = time.perf_counter() - start
    return run
