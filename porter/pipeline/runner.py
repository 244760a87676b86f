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
    emulate: str = "on"              # on | off: the emulation stage (porter's PTX simulator)
    kernel: str | None = None        # kernel name, variant, family or glob (porter.commands.kernel.match_kernels)
    product: str | None = None       # --product: one product's figures (Arch.for_product)
    executor: str = "local"          # local (the process pool) | ray: the emulation and prediction units on Ray
    address: str | None = None       # --address: a running Ray cluster (auto or host:port)
    knobs: dict | None = None        # --set, parsed (porter.kernels.knobs.parse_sets)


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
    products: tuple = ()             # the target's products, for "run this on a ... GPU"
    arch_arg: str = ""               # the arch as the user named it (name or file)
    base_why: str = ""               # how the base was chosen (porter.pipeline.runner.choose_base)
    product: str = ""                # the product whose figures the run used ("" when none are given)
    cache_corrupt: int = 0           # cache entries found corrupt, discarded and rebuilt (cache_entry)

    @property
    def failed(self) -> list[StageResult]:
        return [s for s in self.stages if s.status == FAILED]

    @property
    def no_device(self) -> StageResult | None:
        """The device stage that failed because --device on found no GPU of the arch."""
        return next((s for s in self.failed if s.data.get("no_device")), None)

    @property
    def exit_code(self) -> int:
        """0 passed, 1 a stage failed, 3 no matching GPU with --device on (as ``porter
        validate`` and ``bench``): the run asked for a GPU, so that answer comes first."""
        if self.no_device is not None:
            return 3
        return 1 if self.failed else 0


def resolve(opts: RunOptions):
    """(arch, base or None, runbook) from the options; PorterError on bad input."""
    from porter.descriptor.arch import load_arch
    from porter.planning.runbook import list_runbooks, load_runbook

    if opts.device not in ("auto", "on", "off"):
        raise PorterError(f"--device {opts.device!r}: expected auto, on or off")
    if opts.emulate not in ("on", "off"):
        raise PorterError(f"--emulate {opts.emulate!r}: expected on or off")
    arch = load_arch(opts.arch)
    if opts.product:
        arch = arch.for_product(opts.product)
    if opts.runbook:
        book = load_runbook(opts.runbook)
    else:
        name = f"{arch.name}-bringup"
        book = load_runbook(name if name in list_runbooks() else "generic-bringup")
    base, _ = choose_base(arch, opts.base, book)
    if base is not None and base.digest == arch.digest:
        raise PorterError(f"--from {opts.base}: the base is the target itself; pick another arch")
    if opts.kernel:
        check_kernel_pattern(opts.kernel, [a for a in (arch, base) if a is not None])
    return arch, base, book


def choose_base(arch, given: str | None, book=None):
    """(base Arch or None, why) for a run or a plan: --from, else the runbook's ``base``,
    else the descriptor's ``identity.previous``, else none. Never a guess: porting
    Hopper "from" Blackwell because it differs most would answer a question nobody asked."""
    from porter.descriptor.arch import load_arch

    if given:
        return load_arch(given), f"--from {given}"
    if book is not None and getattr(book, "base", None):
        return load_arch(book.base), f"named by runbook {book.name}"
    previous = getattr(arch, "previous", "")
    if previous:
        try:
            return load_arch(previous), "named by the descriptor's identity.previous"
        except PorterError as exc:
            raise PorterError(f"{arch.path}: identity.previous: {exc}") from None
    return None, "none: no --from, and neither the runbook nor the descriptor (identity.previous) names one"


def check_kernel_pattern(pattern: str, archs) -> None:
    """--kernel must match some kernel, variant or family on the target or the base;
    a typo would otherwise run every stage on nothing and report success."""
    import difflib
    import fnmatch

    from porter import kernels
    from porter.planning.plan import kernel_specs

    names: set[str] = set(kernels.FAMILIES)
    for arch in archs:
        # complete: every kernel `porter kernel list` names (a .pair form the arch lacks is
        # listed there as unsupported, so naming it is not a typo); a broken family is
        # reported by its kernels stage, not here (kernel_specs leaves it out).
        found = kernel_specs(arch, complete=True)[0]
        names.update(n for v in found for n in (v.name, v.variant))
    if any(fnmatch.fnmatchcase(n, pattern) or n == pattern for n in names):
        return
    close = difflib.get_close_matches(pattern, sorted(names), n=4, cutoff=0.5)
    hint = (f"did you mean {', '.join(close)}?" if close else
            f"families: {', '.join(sorted(kernels.FAMILIES)) or 'none'}")
    raise PorterError(f"--kernel {pattern!r}: matches no kernel, variant or family on "
                      f"{' or '.join(a.name for a in archs)}; {hint} (porter kernel list --arch {archs[0].name})")


def prepare_out_dir(out_dir: Path, explicit: bool = True) -> None:
    """Create the output folder now, so an unwritable output folder is one clear error
    before any work. ``explicit``: the user gave --out; otherwise the folder is the default
    build/<arch> under the working directory, and the message says that, not '--out'."""
    import os

    if explicit:
        what, fix = f"--out {out_dir}", "give a folder you can write to"
    else:
        what = f"{out_dir} (the default output folder, under the working directory {Path.cwd()})"
        fix = "run from a folder you can write to, or give --out DIR"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PorterError(f"{what}: a file of that name is in the way; "
                          f"{'give a folder' if explicit else 'move it, or give --out DIR'}") from None
    except OSError as exc:
        raise PorterError(f"{what}: cannot create the output folder ({exc.strerror}); {fix}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise PorterError(f"{what}: the folder is not writable; {fix}")


DESCRIPTOR_MARK = ".descriptor.json"


def descriptor_identity(arch) -> dict:
    """Which descriptor file a build comes from: its resolved path and its sha256."""
    return {"name": arch.name, "path": str(Path(arch.path).resolve()), "digest": arch.digest}


def _previous_owner(out_dir: Path) -> dict | None:
    """The descriptor that built ``out_dir`` last: its mark, else (a build from before
    marks existed) its report.json's arch; None for a fresh folder."""
    import json

    for name, pick in ((DESCRIPTOR_MARK, lambda d: d), ("report.json", lambda d: d.get("arch", {}))):
        try:
            data = pick(json.loads((out_dir / name).read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("path"), str):
            return data
    return None


def _owners(old: dict) -> list[dict]:
    """Every (resolved path, digest) that built the folder's current content: the file that
    built it and the byte-identical copies that shared it (a mark from before owners were
    kept names one)."""
    listed = old.get("owners")
    if isinstance(listed, list):
        return [o for o in listed if isinstance(o, dict) and isinstance(o.get("path"), str)]
    return [{"path": old["path"], "digest": old.get("digest")}]


def claim_out_dir(out_dir: Path, arch, explicit: bool) -> None:
    """Refuse to let one descriptor file overwrite another's build: two files that both
    say ``name: blackwell`` would share build/blackwell/. Ownership is keyed by resolved path
    and content digest: the same file edited keeps its folder, a byte-identical copy may
    share it (and joins its owners, without taking it from them), and a folder may be taken
    over only when no file that built it is left. (Keeping one owner let an identical copy
    take the folder, be deleted, and leave it to any file of the same name.)"""
    import json

    from porter.fsutil import atomic_write

    me = descriptor_identity(arch)
    old = _previous_owner(out_dir)
    owners = _owners(old) if old is not None else []
    mine = any(o["path"] == me["path"] for o in owners)
    same_content = old is not None and old.get("digest") == me["digest"]
    if old is not None and not mine and not same_content:
        alive = [o["path"] for o in owners if Path(o["path"]).is_file()]
        if alive:
            flag = f"--out {out_dir}" if explicit else f"{out_dir}"
            raise PorterError(f"{flag}: holds the build of {alive[0]}, and {me['path']} (also named "
                              f"'{arch.name}') would overwrite it; give --out build/<another name>, or change "
                              "'name:' in the copy")
    # The owners of what this run builds: me, and the files whose content is the same as mine.
    keep = [o for o in owners if o.get("digest") == me["digest"] and o["path"] != me["path"]]
    atomic_write(out_dir / DESCRIPTOR_MARK,
                 json.dumps({**me, "owners": [{"path": me["path"], "digest": me["digest"]}, *keep]},
                            indent=1, sort_keys=True) + "\n")


def default_out_name(arch) -> str:
    """build/<name>, or build/<name>-<product> for a product other than the default (its
    report and schedule differ, so it must not overwrite the default product's)."""
    product = getattr(arch, "product", "")
    if not product or product == getattr(arch, "default_product", ""):
        return arch.name
    import re

    return f"{arch.name}-{re.sub(r'[^a-z0-9]+', '-', product.lower()).strip('-')}"


def run_target(opts: RunOptions, display=None) -> RunResult:
    from porter.pipeline.context import NullDisplay
    from porter.pipeline.stages import STAGE_FUNCTIONS
    from porter.pipeline.store import StageStore

    start = time.perf_counter()
    if opts.jobs is not None and opts.jobs < 0:
        raise PorterError(f"--jobs {opts.jobs}: give 1 or more workers, or 0 for one per CPU")
    arch, base, book = resolve(opts)
    from porter.pipeline.context import cap_jobs

    jobs = cap_jobs(opts.jobs) if opts.jobs and opts.jobs > 0 else default_jobs()
    out_dir = Path(opts.out) if opts.out else Path("build") / default_out_name(arch)
    from porter.compile.toolchain import require_toolchain

    require_toolchain()   # a missing compiler or disassembler: one error now, not one per kernel
    prepare_out_dir(out_dir, explicit=bool(opts.out))
    claim_out_dir(out_dir, arch, explicit=bool(opts.out))
    ctx = Context(arch=arch, base=base, runbook=book, out_dir=out_dir,
                  store=StageStore(out_dir / ".stages"), jobs=jobs, device=opts.device, emulate=opts.emulate,
                  kernel_pattern=opts.kernel, display=display or NullDisplay(), knobs=dict(opts.knobs or {}))
    run = RunResult(arch.name, base.name if base else None, book.name, out_dir,
                    products=tuple(getattr(arch, "products", ())), arch_arg=str(opts.arch),
                    base_why=choose_base(arch, opts.base, book)[1], product=getattr(arch, "product", ""))
    ctx.run_info = run
    if opts.executor != "local" or opts.address:
        from porter.tuning.engine import make_executor

        ctx.executor = make_executor(opts.executor, opts.address)
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
                run.cache_corrupt = ctx.corrupt_entries
                run.seconds = time.perf_counter() - start
    finally:
        ctx.close()
        if ctx.executor is not None:
            ctx.executor.close()
    run.nvrtc_calls, run.units_run, run.units_cached = ctx.nvrtc_calls, ctx.units_run, ctx.units_cached
    run.cache_corrupt = ctx.corrupt_entries
    run.seconds = time.perf_counter() - start
    return run
