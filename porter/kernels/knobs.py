"""Knobs: ``--set key=value`` overrides of a kernel's chosen configuration.

Every family's chooser (``gemm_wgmma``, ``gemm_tcgen05``, ``gemm_mma_sync``, the
attention mainloops, the megakernel) takes its choices as overridable knobs: what is
left out is chosen as before (so the defaults render byte-identical sources), what is
given is held to the same resource budgets (shared memory, TMEM columns, registers after
setmaxnreg, cluster limits, the descriptor's MMA shapes), and an impossible combination is
one PorterError line naming the knob and the limit.

The API (the tuner, ``porter predict`` and the commands code against it):

    add_set_argument(parser)                      repeatable --set KEY=VALUE (dest "knobs")
    parse_sets(items) -> dict                     typed values: ints, bools, 128x256 -> (128, 256)
    knob_space(arch, kernel) -> {knob: values}    legal values from the descriptor
    check_knobs(arch, kernel, knobs) -> str|None  why a combination is illegal, or None
    spec_with_knobs(arch, kernel, knobs)          the KernelSpec (PorterError naming the knob)
    default_knobs(arch, kernel) -> dict           the chosen configuration, as knobs

Several kernels at once (``porter target``, ``porter validate`` without one kernel):
``--set key=value`` applies to each selected kernel that has the knob and leaves the
others at their defaults (``apply_knobs`` says which); ``--set KERNEL:key=value``
(KERNEL as ``--kernel`` takes it: a name, a variant, a family or a glob) applies to the
kernels KERNEL selects only, each of which must have the knob.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from porter.errors import PorterError
from porter.kernels import knob_rules

SET_HELP = ("override a kernel's configuration (repeatable): --set stages=3 --set tile=128x256; "
            "KERNEL:key=value applies to KERNEL only (a name, variant, family or glob); "
            "`porter kernel show K --arch A` lists each kernel's knobs and legal values")

_KEY = re.compile(r"^(?:(?P<scope>[A-Za-z0-9_.*?\[\]-]+):)?(?P<key>[a-z_][a-z0-9_]*)$")
_SHAPE = re.compile(r"^\d+(?:x\d+)+$")
_BOOLS = {"true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}


def add_set_argument(parser) -> None:
    """Repeatable ``--set KEY=VALUE``; the strings land in ``args.knobs`` (a list)."""
    parser.add_argument("--set", dest="knobs", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)


def parse_value(text: str) -> Any:
    """``3`` -> 3, ``true``/``off`` -> bool, ``128x256`` -> (128, 256), else the string."""
    low = text.strip().lower()
    if low in _BOOLS:
        return _BOOLS[low]
    if re.fullmatch(r"-?\d+", low):
        return int(low)
    if _SHAPE.match(low):
        return tuple(int(v) for v in low.split("x"))
    return text.strip()


def parse_sets(items: Iterable[str] | None) -> dict:
    """``["stages=3", "gemm.bf16:tile=128x256"]`` -> ``{"stages": 3, "gemm.bf16:tile": (128, 256)}``.
    A malformed item, or one key given twice with different values, is one PorterError line."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, eq, text = str(item).partition("=")
        key = key.strip()
        if not eq or not text.strip():
            raise PorterError(f"--set {item}: expected KEY=VALUE (e.g. --set stages=3, --set tile=128x256)")
        if not _KEY.match(key):
            raise PorterError(f"--set {item}: {key!r} is not a knob name (lowercase letters, digits and _, "
                              "optionally KERNEL: before it)")
        value = parse_value(text)
        if key in out and out[key] != value:
            raise PorterError(f"--set {item}: {key} was already set to {knob_rules.show(out[key])}")
        out[key] = value
    return out


# ---- one kernel -------------------------------------------------------------------------------

def _family(kernel_name: str):
    from porter import kernels

    fam = kernel_name.split(".", 1)[0]
    if fam not in kernels.FAMILIES:
        raise PorterError(f"kernel '{kernel_name}': no kernel family {fam!r}; known: {', '.join(sorted(kernels.FAMILIES))}")
    return kernels.family_module(fam)


def _default_spec(arch, kernel_name: str):
    """The kernel's default spec; PorterError when the arch cannot build it."""
    from porter.kernels.base import Unsupported

    spec = next((v for v in _family(kernel_name).variants(arch) if v.name == kernel_name), None)
    if spec is None:
        raise PorterError(f"kernel '{kernel_name}': no such kernel for {arch.name} "
                          f"(`porter kernel list --arch {arch.name}` lists them)")
    if isinstance(spec, Unsupported):
        raise PorterError(f"kernel '{kernel_name}': unsupported on {arch.name} ({spec.reason or ', '.join(spec.missing)}); "
                          "it has no knobs there")
    return spec


def knob_space(arch, kernel_name: str) -> dict[str, tuple]:
    """Each knob of ``kernel_name`` on ``arch`` with its legal values, derived from the
    descriptor (MMA shapes, shared memory, TMEM, registers, cluster limits). Integer ranges
    (grid_ctas, group_m) list powers of two plus the default: ``check_knobs`` accepts any
    integer in range. A combination of legal values can still be illegal (check_knobs)."""
    _default_spec(arch, kernel_name)
    return _space(arch, kernel_name)


def _space(arch, kernel_name: str) -> dict[str, tuple]:
    space = getattr(_family(kernel_name), "knob_space", None)   # a family without knobs has none
    return dict(space(arch, kernel_name)) if space else {}


def default_knobs(arch, kernel_name: str) -> dict:
    """The configuration the chooser picks, as knob values (``spec_with_knobs`` of these
    gives the default spec's configuration back)."""
    spec = _default_spec(arch, kernel_name)
    knobs_of = getattr(_family(kernel_name), "knobs_of", None)
    return dict(knobs_of(arch, spec)) if knobs_of else {}


def spec_with_knobs(arch, kernel_name: str, knobs: Mapping[str, Any] | None, default=None):
    """The KernelSpec of ``kernel_name`` with ``knobs`` applied (the default spec itself when
    there are none; over a tuned default's own knobs, see ``on_top_of``); PorterError naming
    the knob and the limit when they cannot work. ``default``: the kernel's default spec on
    ``arch``, already looked up (porter tune applies thousands of combinations to one kernel:
    looking it up is most of the cost of each)."""
    spec = default if default is not None else _default_spec(arch, kernel_name)
    if not knobs:
        return spec
    knob_rules.check_names(kernel_name, knobs, _space(arch, kernel_name))
    knobs = on_top_of(spec, knobs)
    made = _family(kernel_name).spec_with_knobs(arch, kernel_name, dict(knobs))
    from porter.kernels.base import Unsupported

    if isinstance(made, Unsupported):
        raise PorterError(f"{kernel_name}: --set {' '.join(f'{k}={knob_rules.show(v)}' for k, v in knobs.items())}: "
                          f"{made.reason}")
    return made


def on_top_of(spec, knobs: Mapping[str, Any]) -> dict:
    """``knobs`` over the knobs ``spec`` was made with (a tuned default records them in its
    config ``knobs``): --set changes the configuration the kernel has, tuned or hand-chosen.
    A tile given one way (tile=MxN, or its own M / N knobs) replaces the other spelling."""
    base = {k: parse_value(str(v)) for k, v in (spec.config.get("knobs") or {}).items()}
    if "tile" in knobs:
        base = {k: v for k, v in base.items() if k not in ("tile_m", "tile_n", "consumers")}
    if {"tile_m", "tile_n", "consumers"} & set(knobs):
        base.pop("tile", None)
    return {**base, **knobs}


def check_knobs(arch, kernel_name: str, knobs: Mapping[str, Any]) -> str | None:
    """Why ``knobs`` cannot work for ``kernel_name`` on ``arch`` (before compiling), or None."""
    try:
        spec_with_knobs(arch, kernel_name, knobs)
    except PorterError as exc:
        return str(exc)
    return None


# ---- several kernels (the commands) -------------------------------------------------------------

def split_scoped(knobs: Mapping[str, Any]) -> tuple[dict, dict[str, dict]]:
    """(unscoped knobs, {KERNEL pattern: its knobs}) of parsed ``--set`` items."""
    plain: dict[str, Any] = {}
    scoped: dict[str, dict] = {}
    for key, value in knobs.items():
        scope, _, name = key.rpartition(":")
        if scope:
            scoped.setdefault(scope, {})[name] = value
        else:
            plain[name] = value
    return plain, scoped


def apply_knobs(arch, specs: list, knobs: Mapping[str, Any], every: list | None = None,
                strict: bool = True) -> tuple[list, list[str]]:
    """``specs`` with the knobs applied to the kernels they concern, and notes saying which
    kernels an unscoped knob left at their defaults (they do not have it). ``strict=False``
    (a pipeline applying already-checked knobs one family at a time) skips the errors for a
    knob or a pattern that concerns none of ``specs``.

    ``every``: the listing scoped patterns are matched in (default ``specs``), so an exact
    kernel name selects that kernel only, as ``--kernel`` does. A knob no selected kernel
    has, a pattern that selects none, or an illegal value is a PorterError."""
    from porter.commands.kernel import match_kernels
    from porter.kernels.base import KernelSpec

    if not knobs:
        return list(specs), []
    plain, scoped = split_scoped(knobs)
    built = [s for s in specs if isinstance(s, KernelSpec)]
    spaces = {s.name: _space(arch, s.name) for s in built}
    per_kernel: dict[str, dict] = {s.name: {} for s in built}
    notes = []
    for name, value in plain.items():
        having = [s.name for s in built if knob_rules.has_knob(spaces[s.name], name)]
        if not having and not strict:
            continue
        if not having:
            raise PorterError(f"--set {name}={knob_rules.show(value)}: none of the selected kernels "
                              f"({', '.join(s.name for s in built) or 'none'}) has a knob {name!r}")
        for k in having:
            per_kernel[k][name] = value
        left = [s.name for s in built if s.name not in having]
        if left:
            notes.append(f"--set {name}={knob_rules.show(value)} applies to {', '.join(having)}; "
                         f"{', '.join(left)} {'has' if len(left) == 1 else 'have'} no knob {name!r} "
                         "(left at the default)")
    for scope, items in scoped.items():
        hit = {v.name for v in match_kernels(every if every is not None else specs, scope)}
        chosen = [s.name for s in built if s.name in hit]
        if not chosen and not strict:
            continue
        if not chosen:
            raise PorterError(f"--set {scope}:...: {scope!r} selects none of the kernels built here "
                              f"({', '.join(s.name for s in built) or 'none'})")
        for k in chosen:
            for name, value in items.items():
                if not knob_rules.has_knob(spaces[k], name):
                    raise PorterError(f"{k}: --set {scope}:{name}: no such knob for this kernel; "
                                      f"its knobs: {', '.join(spaces[k]) or 'none'}")
                per_kernel[k][name] = value
    out = [spec_with_knobs(arch, s.name, per_kernel[s.name]) if isinstance(s, KernelSpec) and per_kernel[s.name]
           else s for s in specs]
    return out, notes


def describe(arch, kernel_name: str) -> list[tuple[str, str, str]]:
    """(knob, default, legal values) rows for ``porter kernel show``."""
    space = knob_space(arch, kernel_name)
    default = default_knobs(arch, kernel_name)
    return [(k, knob_rules.show(default.get(k, "-")), ", ".join(knob_rules.show(v) for v in values))
            for k, values in space.items()]
