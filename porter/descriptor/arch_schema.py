"""Parse and check one arch descriptor (``arch/*.yaml``) before it becomes an ``Arch``.

Everything a person can get wrong in a descriptor ends here as ONE ``PorterError``
line: ``<file>:<line>: <key>: <what is wrong>; <how to fix>``. The checks run in three
passes: YAML syntax (safe loader only, so ``!!python/...`` tags are errors, never
executed), then the shape of each section (known keys, types, units, ranges), then
contradictions between sections (e.g. Tensor Memory without a TMEM accumulator).

Units are part of the key names (``smem_per_sm_kib``, ``hbm_bandwidth_tb_s``), so a
value is always a bare number and a key without its unit is an unknown key whose
nearest valid spelling is suggested.

A descriptor is untrusted input, so the loader also bounds its own work: alias expansion
past a small budget (a "billion laughs" file) and self-referencing aliases are refused
before anything walks the data; every message quotes values through a bounded ``_show``;
SASS signatures must stay in a linear-time regex subset (``regex_hazard``); text values
may not hold control characters (ESC, NUL, newlines, bidi overrides); YAML 1.2 numbers
such as ``2.25e3`` are numbers. porter.descriptor.arch adds the checks that need more than the file:
the target against the installed NVRTC, limits against the known figures per compute
capability, ``identity.previous``.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import yaml

from porter.errors import PorterError

SCHEMA_VERSION = 1

# Feature names a descriptor can claim; ``Arch.has`` derives each from content.
FEATURES = (
    "mma_sync", "wgmma", "tcgen05", "tmem", "cta_pair", "clusters", "dsmem", "tma", "mbarrier",
    "cp_async", "fp8", "fp6", "fp4", "block_scale_mx", "block_scale_nvfp4", "setmaxnreg",
    "cluster_launch_control",
)

# Element formats a tensor core may consume (A/B operands).
ELEMENT_FORMATS = ("bf16", "f16", "tf32", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "s8", "u8")
SCALE_FORMATS = ("ue8m0", "ue4m3")
GENERATIONS = ("none", "mma_sync", "wgmma", "tcgen05")
ISSUERS = ("warp", "warpgroup", "thread")
ACCUMULATORS = ("registers", "tmem")

# Peak-rate dtypes and the element formats each stands for: a peak for a dtype the
# arch has no format of is a contradiction.
PEAK_DTYPES = {
    "tf32": ("tf32",), "f16": ("f16",), "bf16": ("bf16",), "fp8": ("e4m3", "e5m2"),
    "fp6": ("e2m3", "e3m2"), "fp4": ("e2m1",), "int8": ("s8", "u8"),
}

_MAX_FILE_BYTES = 1 << 20
# The C safe loader when libyaml is there (about 7x faster), else the pure-Python one;
# both are safe loaders: tags like !!python/object are errors, never executed.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SafeLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, plus YAML 1.2 numbers: PyYAML follows YAML 1.1, where ``2.25e3``
    and ``1e3`` (no dot, or no exponent sign) are text, so ``bf16: 2.25e3`` would read as
    a string; here they are floats, as every other YAML reader and a person take them."""


_SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
_SAFE_LOADER = _SafeLoader
_REF = re.compile(r"\[([A-Z][A-Z0-9_]*)")
# A number at the start of a text value, scientific notation included, for the hint
# "write 'key: 2.25e3'" (cutting it at the exponent would suggest a value 1000x off).
_LEADING_NUMBER = re.compile(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")
# Nodes a descriptor may expand to once its aliases are followed: the shipped ones hold
# about a thousand; a "billion laughs" file holds a few dozen nodes that expand to
# billions, so expansion is counted (in linear time) and refused before anything walks it.
_MAX_EXPANDED_NODES = 20_000
# Error messages quote at most this many characters of the text they name.
_MAX_MESSAGE_CHARS = 600
# Descriptor text and SASS patterns are printed in tables and reports, and every pattern is
# matched against every instruction: bounded, so no one value can print megabytes or cost
# seconds per kernel. (The shipped descriptors' longest text is under 700 characters, their
# longest pattern 63.)
_MAX_TEXT_CHARS = 4000
_MAX_PATTERN_CHARS = 160


@dataclass(frozen=True)
class Field:
    """One scalar key of a section: its type, unit and allowed range or choices."""

    kind: str  # int | number | bool | str | version | strlist | target
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    required: bool = True
    default: Any = None
    min_items: int = 0


def _int(lo, hi, unit="", **kw):
    return Field("int", unit, lo, hi, **kw)


def _num(lo, hi, unit, **kw):
    return Field("number", unit, lo, hi, **kw)


_BOOL = Field("bool")
_TEXT = Field("str")
_NOTES = Field("str", required=False)

# Keys every section may carry besides its figures.
_META = ("source", "notes")

SECTIONS: dict[str, dict[str, Field]] = {
    "identity": {
        "target": Field("target"),
        "min_ptx": Field("version"),
        "min_cuda": Field("version"),
        "products": Field("strlist", min_items=1),
        # The generation this one follows (a descriptor name): the base `porter target`
        # and `porter plan` port from when no --from is given. Optional.
        "previous": Field("str", required=False, default=""),
    },
    "limits": {
        "sm_count": _int(1, 1024, "SMs"),
        "smem_per_sm_kib": _int(1, 4096, "KiB"),
        "smem_per_block_kib": _int(1, 4096, "KiB"),
        "regs_per_sm": _int(1024, 1 << 20, "32-bit registers"),
        "max_regs_per_thread": _int(1, 1024, "registers"),
        "max_threads_per_block": _int(32, 4096, "threads"),
        "max_threads_per_sm": _int(32, 8192, "threads"),
        "max_blocks_per_sm": _int(1, 256, "blocks"),
        "setmaxnreg": _BOOL,
    },
    "memory": {
        "l2_mib": _num(0.001, 4096, "MiB"),
        "hbm_gb": _num(0.001, 100000, "GB (1e9 bytes)"),
        "hbm_bandwidth_tb_s": _num(0.001, 1000, "TB/s (1e12 bytes/s)"),
    },
    "tensor_core": {
        "generation": Field("str", choices=GENERATIONS),
        "instruction": _TEXT,
        "issue": Field("str", choices=ISSUERS),
        "accumulator": Field("str", choices=ACCUMULATORS),
        # "kinds" is checked by _check_kinds
    },
    "tmem": {
        "lanes": _int(0, 1024, "lanes"),
        "columns": _int(0, 1 << 16, "columns"),
        "cell_bits": _int(8, 64, "bits", required=False, default=32),
        "size_kib": _num(0, 1 << 16, "KiB"),
        "alloc_min_columns": _int(0, 1 << 16, "columns", required=False, default=0),
    },
    "cluster": {
        "max_portable": _int(1, 64, "CTAs"),
        "max_nonportable": _int(1, 64, "CTAs"),
        "distributed_smem": _BOOL,
        "cta_pair": _BOOL,
        # clusterlaunchcontrol.try_cancel / query_cancel (sm_100+): a running CTA cancels a
        # not-yet-started cluster of its grid and takes over its work (dynamic scheduling).
        # Optional so that descriptors written before it load; absent means not claimed.
        "launch_control": Field("bool", required=False, default=False),
    },
    "async_copy": {
        "tma": _BOOL,
        "tma_multicast": _BOOL,
        "mbarrier": _BOOL,
        # cp.async (sm_80+): per-thread asynchronous global -> shared copies (LDGSTS).
        # Optional so that descriptors written before it load; absent means not claimed.
        "cp_async": Field("bool", required=False, default=False),
    },
    "formats": {
        "elements": Field("strlist", choices=ELEMENT_FORMATS),
    },
}

_KIND_FIELDS: dict[str, Field] = {
    "formats": Field("strlist", choices=ELEMENT_FORMATS, min_items=1),
    "k": _int(1, 1024, "elements per instruction"),
    "block_scaled": Field("bool", required=False, default=False),
}
_SHAPE_FIELDS: dict[str, Field] = {
    "m": _int(1, 1024, "rows"),
    "n_min": _int(1, 1024, "columns"),
    "n_max": _int(1, 1024, "columns"),
    "n_step": _int(1, 1024, "columns"),
    "cta_group": _int(1, 2, "CTAs", choices=(1, 2)),
}
_SCALE_FIELDS: dict[str, Field] = {
    "scale_format": Field("str", choices=SCALE_FORMATS),
    "block_size": _int(1, 1024, "elements"),
    "kinds": Field("strlist", min_items=1),
}

# SECTIONS already holds tensor_core (its scalar keys); its kinds are checked apart.
TOP_KEYS = ("schema", "name", "summary", "sources", *SECTIONS, "block_scales", "peak",
            "sass_signatures", "sass_ops", "sass_modifiers", "products", "uncertain", "perf")
_TOP_OPTIONAL = ("summary", "sass_ops", "sass_modifiers", "products", "uncertain", "perf")


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters escaped: errors stay one line
    (and short: a message quoting a huge value is cut, so building it stays cheap)."""
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[:_MAX_MESSAGE_CHARS - 3] + "..."
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def bad_text_char(text: str) -> str | None:
    """The first character of ``text`` a terminal or a Markdown/HTML report would not show
    literally (control characters such as ESC or NUL, newlines, tabs, bidi overrides and
    other format characters), escaped for a message; None when the text is clean."""
    for ch in text:
        if not ch.isprintable():
            return ascii(ch)[1:-1]
    return None


def _err(message: str) -> PorterError:
    """A PorterError whose message is kept to one line whatever text it quotes."""
    return PorterError(one_line(message))


def _nearest(word: str, options) -> str:
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else "valid keys: " + ", ".join(map(str, options))


class _Enough(Exception):
    """Raised inside ``_show`` once it has written as much as it will show."""


def _show(value: Any, limit: int = 60) -> str:
    """A short ``repr`` of ``value`` built in bounded time and memory: containers are
    walked only until ``limit`` characters are written, so a deeply aliased list (which
    would expand to gigabytes) or a self-referencing one costs no more than a number."""
    parts: list[str] = []
    room = [limit + 1]

    def emit(text: str) -> None:
        parts.append(text[:room[0]])
        room[0] -= len(text)
        if room[0] <= 0:
            raise _Enough

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            emit("{")
            for i, (k, item) in enumerate(v.items()):
                emit(", " if i else "")
                walk(k)
                emit(": ")
                walk(item)
            emit("}")
        elif isinstance(v, (list, tuple)):
            emit("[")
            for i, item in enumerate(v):
                emit(", " if i else "")
                walk(item)
            emit("]")
        elif isinstance(v, str):
            emit(repr(v[:limit + 1]) if len(v) <= limit else repr(v[:limit + 1])[:-1])
        elif isinstance(v, (bool, int, float)) or v is None:
            emit(repr(v) if not isinstance(v, int) or abs(v) < 10**40 else f"<a {v.bit_length()}-bit integer>")
        else:
            emit(f"<{type(v).__name__}>")

    try:
        walk(value)
    except _Enough:
        pass
    text = "".join(parts)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Checker:
    """Checks one parsed descriptor; ``fail`` raises the one-line PorterError."""

    def __init__(self, file: str, lines: dict[str, int]):
        self.file = file
        self.lines = lines

    def line_of(self, dotted: str) -> int | None:
        while dotted:
            if dotted in self.lines:
                return self.lines[dotted]
            dotted = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        return None

    def fail(self, dotted: str, problem: str, fix: str) -> None:
        line = self.line_of(dotted)
        where = f"{self.file}:{line}" if line else self.file
        raise _err(f"{where}: {dotted or 'descriptor'}: {problem}; {fix}")

    # -- generic pieces -------------------------------------------------------------

    def mapping(self, value: Any, dotted: str, what: str) -> dict:
        if not isinstance(value, dict):
            # The whole file parsed as one value (a text file, a log): name its type only,
            # never echo the file's contents into a terminal.
            shown = "" if not dotted else " " + _show(value)
            self.fail(dotted, f"expected a mapping of {what}, got {type(value).__name__}{shown}",
                      f"write '{dotted.rsplit('.', 1)[-1]}:' followed by indented 'key: value' lines")
        for key in value:
            if not isinstance(key, str):
                self.fail(dotted, f"key {_show(key)} is a {type(key).__name__}, keys must be text",
                          "quote the key or rename it")
        return value

    def keys(self, data: dict, dotted: str, allowed, required) -> None:
        allowed = tuple(allowed)
        # An unknown key is most often a misspelling of a key that is missing, so
        # those are suggested first.
        missing = [k for k in allowed if k not in data]
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, missing, n=1, cutoff=0.5)
                hint = f"did you mean '{close[0]}'?" if close else _nearest(key, allowed)
                self.fail(f"{dotted}.{key}" if dotted else key, "unknown key", hint)
        for key in required:
            if key not in data:
                self.fail(f"{dotted}.{key}" if dotted else key, "missing key",
                          f"add '{key}:' to {'section ' + repr(dotted) if dotted else 'the top level'}")

    def value(self, raw: Any, field: Field, dotted: str) -> Any:
        key = dotted.rsplit(".", 1)[-1]
        kind = field.kind
        if kind in ("int", "number"):
            unit = f" in {field.unit}" if field.unit else ""
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                number = _LEADING_NUMBER.match(raw) if isinstance(raw, str) else None
                hint = f"write '{key}: {number.group(1)}'" if number else f"write a bare number{unit}"
                self.fail(dotted, f"expected a number{unit} (the unit is part of the key name), "
                          f"got {type(raw).__name__} {_show(raw)}", hint)
            if isinstance(raw, float) and not math.isfinite(raw):
                self.fail(dotted, f"expected a finite number{unit}, got {raw}", "write a real figure")
            if kind == "int":
                if isinstance(raw, float):
                    if not raw.is_integer():
                        self.fail(dotted, f"expected a whole number{unit}, got {raw}",
                                  "round it or check the unit")
                    raw = int(raw)
            if field.choices and raw not in field.choices:
                self.fail(dotted, f"expected one of {', '.join(map(str, field.choices))}, got {_show(raw)}",
                          "use one of the listed values")
            if (field.lo is not None and raw < field.lo) or (field.hi is not None and raw > field.hi):
                self.fail(dotted, f"value {raw} is out of range [{field.lo:g}, {field.hi:g}]{unit}",
                          f"check the figure and its unit (this key is{unit or ' a count'})")
            return raw
        if kind == "bool":
            if not isinstance(raw, bool):
                self.fail(dotted, f"expected true or false, got {type(raw).__name__} {_show(raw)}",
                          f"write '{key}: true' or '{key}: false'")
            return raw
        if kind in ("str", "target", "version"):
            if kind == "version" and isinstance(raw, (int, float)) and not isinstance(raw, bool):
                self.fail(dotted, f"expected a quoted version like \"8.0\", got the number {raw}",
                          f"quote it: {key}: \"{raw}\"")
            if not isinstance(raw, str) or not raw.strip():
                self.fail(dotted, f"expected text, got {type(raw).__name__} {_show(raw)}",
                          f"write '{key}: <text>'")
            self.plain_text(raw, dotted)
            if kind == "target" and not re.fullmatch(r"sm_\d{2,3}[af]?", raw):
                self.fail(dotted, f"expected a target like sm_90a or sm_100a, got {_show(raw)}",
                          "write sm_<major><minor> with an optional a/f suffix")
            if kind == "version" and not re.fullmatch(r"\d+\.\d+", raw):
                self.fail(dotted, f"expected a version like \"12.8\", got {_show(raw)}",
                          "write <major>.<minor> in quotes")
            if field.choices and raw not in field.choices:
                self.fail(dotted, f"expected one of {', '.join(field.choices)}, got {_show(raw)}",
                          _nearest(raw, field.choices))
            return raw
        if kind == "strlist":
            if not isinstance(raw, list):
                self.fail(dotted, f"expected a list, got {type(raw).__name__} {_show(raw)}",
                          f"write '{key}: [a, b]'")
            if len(raw) < field.min_items:
                self.fail(dotted, "expected a non-empty list", f"list at least {field.min_items} item(s)")
            out = []
            for i, item in enumerate(raw):
                if not isinstance(item, str) or not item.strip():
                    self.fail(f"{dotted}[{i}]", f"expected text, got {type(item).__name__} {_show(item)}",
                              "write a name")
                self.plain_text(item, f"{dotted}[{i}]")
                if field.choices and item not in field.choices:
                    self.fail(f"{dotted}[{i}]", f"unknown name {_show(item)}; known: "
                              f"{', '.join(field.choices)}", _nearest(item, field.choices))
                if item in out:
                    self.fail(f"{dotted}[{i}]", f"{_show(item)} is listed twice", "list it once")
                out.append(item)
            return out
        raise AssertionError(kind)  # pragma: no cover - schema bug

    def source(self, raw: Any, dotted: str, figure_keys, sources: dict) -> Any:
        """A section's ``source``: text citing ``[KEY]``s, or a per-figure mapping."""
        if isinstance(raw, str):
            self.plain_text(raw, dotted)
            self.cites(raw, dotted, sources)
            return raw
        if isinstance(raw, dict):
            self.mapping(raw, dotted, "figure -> source")
            allowed = (*figure_keys, "default")
            self.keys(raw, dotted, allowed, ())
            if "default" not in raw:
                for key in figure_keys:
                    if key not in raw:
                        self.fail(f"{dotted}.{key}", "figure has no source",
                                  f"add '{key}:' or 'default:' under {dotted}")
            for key, text in raw.items():
                if not isinstance(text, str):
                    self.fail(f"{dotted}.{key}", f"expected text, got {type(text).__name__}",
                              "write the source as text citing [KEY]")
                self.plain_text(text, f"{dotted}.{key}")
                self.cites(text, f"{dotted}.{key}", sources)
            return dict(raw)
        self.fail(dotted, f"expected text or a mapping, got {type(raw).__name__} {_show(raw)}",
                  "write source: \"[DS] datasheet ...\"")

    def plain_text(self, text: str, dotted: str) -> None:
        """Descriptor text is data shown in terminals and reports: a control character (an
        ESC sequence, NUL, a newline, a bidi override) would reach them raw, so it is refused."""
        if len(text) > _MAX_TEXT_CHARS:
            self.fail(dotted, f"text of {len(text):,} characters (at most {_MAX_TEXT_CHARS:,})",
                      "shorten it; long explanations belong in a document the source can cite")
        bad = bad_text_char(text)
        if bad is not None:
            self.fail(dotted, f"text holds the control character {bad}",
                      "remove it: descriptor text is one line of printable characters")

    def cites(self, text: str, dotted: str, sources: dict) -> None:
        refs = _REF.findall(text)
        if not refs:
            self.fail(dotted, f"source {_show(text)} cites no key from 'sources'",
                      f"cite one in brackets, e.g. [{next(iter(sources), 'DS')}]")
        for ref in refs:
            if ref not in sources:
                self.fail(dotted, f"source cites [{ref}], which 'sources' does not define",
                          f"define {ref} under 'sources' or cite one of {', '.join(sources)}")

    def section(self, data: dict, name: str, fields: dict[str, Field], sources: dict,
                dotted: str | None = None, with_source: bool = True) -> dict:
        dotted = dotted or name
        self.mapping(data, dotted, "keys")
        meta = _META if with_source else ("notes",)
        self.keys(data, dotted, (*fields, *meta),
                  [k for k, f in fields.items() if f.required] + (["source"] if with_source else []))
        out: dict[str, Any] = {}
        for key, field in fields.items():
            out[key] = self.value(data[key], field, f"{dotted}.{key}") if key in data else field.default
        if "notes" in data:
            out["notes"] = self.value(data["notes"], _NOTES, f"{dotted}.notes")
        if with_source:
            out["source"] = self.source(data["source"], f"{dotted}.source", tuple(fields), sources)
        return out


# -- parsing ----------------------------------------------------------------------------


def _index_lines(node: yaml.Node, prefix: str, out: dict[str, int], seen: set[int],
                 fail: Callable[[str, int, str], None]) -> None:
    """Record the 1-based line of every key and list item; reject duplicate keys."""
    if id(node) in seen:  # aliases share nodes; each is walked once
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        names: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            if key != "<<":
                if key in names:
                    fail(f"{prefix}.{key}" if prefix else key, key_node.start_mark.line + 1,
                         "duplicate key; keep one of them")
                names.add(key)
            path = f"{prefix}.{key}" if prefix else key
            out.setdefault(path, key_node.start_mark.line + 1)
            _index_lines(value_node, path, out, seen, fail)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = f"{prefix}[{i}]"
            out.setdefault(path, item.start_mark.line + 1)
            _index_lines(item, path, out, seen, fail)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int], budget: int) -> int:
    """Nodes ``node`` stands for once every alias is followed, counted in time linear in
    the number of distinct nodes (aliases share nodes, so each size is computed once);
    stops as soon as the count passes ``budget``; -1 for an alias to itself."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        return -1
    open_.add(key)
    total = 1
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    else:
        children = []
    for child in children:
        size = _expanded_size(child, sizes, open_, budget)
        if size < 0:
            return -1
        total += size
        if total > budget:
            break
    open_.discard(key)
    sizes[key] = total
    return total


def _check_aliases(node: yaml.Node, file: str) -> None:
    """Refuse alias expansion past a small budget, and aliases to themselves, before any
    code walks the data: both turn a few KB of YAML into unbounded work."""
    size = _expanded_size(node, {}, set(), _MAX_EXPANDED_NODES)
    if size < 0:
        raise _err(f"{file}: YAML alias refers to itself (a recursive structure); "
                   "a descriptor is plain mappings, lists and values")
    if size > _MAX_EXPANDED_NODES:
        raise _err(f"{file}: YAML expands to more than {_MAX_EXPANDED_NODES} values once its aliases "
                   "are followed (an alias bomb?); a descriptor holds about a thousand: write the values "
                   "out, a descriptor needs no aliases")


def parse_yaml(text: str, file: str) -> tuple[Any, dict[str, int]]:
    """Safe-load ``text``; return the data and a dotted-key -> line index."""
    if len(text) > _MAX_FILE_BYTES:
        raise _err(f"{file}: descriptor is {len(text)} bytes, over the 1 MiB limit; "
                          "is this really an arch descriptor?")
    loader = None
    try:
        loader = _SAFE_LOADER(text)
        node = loader.get_single_node()
        lines: dict[str, int] = {}
        if node is not None:
            _check_aliases(node, file)
            def dup(dotted: str, line: int, msg: str) -> None:
                raise _err(f"{file}:{line}: {dotted}: {msg}")
            _index_lines(node, "", lines, set(), dup)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if "python/" in str(exc.problem) or "could not determine a constructor" in str(exc.problem):
            fix = "remove the tag: descriptors are plain YAML (loaded with the safe loader)"
        else:
            fix = "fix the YAML syntax at that position"
        raise _err(f"{where}: YAML error: {problem}; {fix}") from None
    except yaml.YAMLError as exc:
        raise _err(f"{file}: YAML error: {' '.join(str(exc).split())}; fix the YAML syntax") from None
    except RecursionError:
        raise _err(f"{file}: YAML nests too deeply; a descriptor is a few levels of "
                          "mappings and lists") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # e.g. an impossible date (2026-13-45) that the safe loader turns into a datetime
        raise _err(f"{file}: YAML value error: {' '.join(str(exc).split())}; "
                          "quote the value if it is meant as text") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


# -- the whole descriptor -----------------------------------------------------------------


def check_descriptor(data: Any, lines: dict[str, int], file: str) -> dict[str, Any]:
    """Validate parsed descriptor data; return a normalised plain dict (defaults filled)."""
    c = _Checker(file, lines)
    if data is None:
        c.fail("", "the file is empty", "start from arch/hopper.yaml and edit it")
    c.mapping(data, "", "top-level sections")
    c.keys(data, "", TOP_KEYS, [k for k in TOP_KEYS if k not in _TOP_OPTIONAL])

    schema = data["schema"]
    if isinstance(schema, bool) or schema != SCHEMA_VERSION:
        c.fail("schema", f"expected schema version {SCHEMA_VERSION}, got {_show(schema)}",
               f"write 'schema: {SCHEMA_VERSION}' (porter reads version {SCHEMA_VERSION} only)")
    name = data["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name):
        c.fail("name", f"expected a lower-case name like 'hopper', got {_show(name)}",
               "use lower-case letters, digits, '-' and '_'")
    out: dict[str, Any] = {"schema": SCHEMA_VERSION, "name": name}
    out["summary"] = c.value(data["summary"], _TEXT, "summary") if "summary" in data else ""

    sources = c.mapping(data["sources"], "sources", "KEY -> description")
    if not sources:
        c.fail("sources", "no sources are defined", "add e.g. 'DS: vendor datasheet'")
    for key, text in sources.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            c.fail(f"sources.{key}", "source keys are upper-case like DS or PTX", "rename the key")
        if not isinstance(text, str) or not text.strip():
            c.fail(f"sources.{key}", f"expected a description, got {_show(text)}",
                   "say what the source is (document, repository path, measurement)")
        c.plain_text(text, f"sources.{key}")
    out["sources"] = dict(sources)

    for name_, fields in SECTIONS.items():
        if name_ == "tensor_core":
            continue
        out[name_] = c.section(data[name_], name_, fields, sources)

    out["tensor_core"] = _check_tensor_core(c, data["tensor_core"], sources)
    out["block_scales"] = _check_block_scales(c, data["block_scales"], sources)
    out["peak"] = _check_peak(c, data["peak"], sources)
    out["sass_signatures"] = _check_signatures(c, data["sass_signatures"], sources)
    out["sass_ops"] = _check_sass_ops(c, data.get("sass_ops"), sources)
    out["sass_modifiers"] = _check_sass_modifiers(c, data.get("sass_modifiers"), sources)
    out["products"] = _check_products(c, data.get("products"), sources, out)
    out["uncertain"] = _check_uncertain(c, data.get("uncertain", []), data)
    from porter.descriptor.perf_schema import check_perf  # the timing model's figures
    out["perf"] = check_perf(c, data.get("perf"), sources, out, data.get("products"))

    _check_consistency(c, out)
    return out


def _check_tensor_core(c: _Checker, raw: Any, sources: dict) -> dict:
    c.mapping(raw, "tensor_core", "keys")
    fields = SECTIONS["tensor_core"]
    body = {k: v for k, v in raw.items() if k != "kinds"}
    out = c.section(body, "tensor_core", fields, sources)
    if "kinds" not in raw:
        c.fail("tensor_core.kinds", "missing key", "add 'kinds:' ({} when there is no tensor core)")
    kinds_raw = c.mapping(raw["kinds"] if raw["kinds"] is not None else {}, "tensor_core.kinds",
                          "MMA kind -> formats, k, shapes")
    kinds: dict[str, dict] = {}
    for kind, spec in kinds_raw.items():
        dotted = f"tensor_core.kinds.{kind}"
        if not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
            c.fail(dotted, "kind names are lower-case like f16 or f8f6f4", "rename the kind")
        c.mapping(spec, dotted, "formats, k, sass, shapes")
        c.keys(spec, dotted, (*_KIND_FIELDS, "sass", "shapes", "notes"),
               [k for k, f in _KIND_FIELDS.items() if f.required] + ["sass", "shapes"])
        entry = {k: (c.value(spec[k], f, f"{dotted}.{k}") if k in spec else f.default)
                 for k, f in _KIND_FIELDS.items()}
        entry["sass"] = _regex_list(c, spec["sass"], f"{dotted}.sass")
        shapes_raw = spec["shapes"]
        if not isinstance(shapes_raw, list) or not shapes_raw:
            c.fail(f"{dotted}.shapes", f"expected a non-empty list of shapes, got {_show(shapes_raw)}",
                   "write '- {m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}'")
        shapes = []
        for i, shape_raw in enumerate(shapes_raw):
            sd = f"{dotted}.shapes[{i}]"
            c.mapping(shape_raw, sd, "m, n_min, n_max, n_step, cta_group")
            c.keys(shape_raw, sd, _SHAPE_FIELDS, _SHAPE_FIELDS)
            shape = {k: c.value(shape_raw[k], f, f"{sd}.{k}") for k, f in _SHAPE_FIELDS.items()}
            if shape["n_min"] > shape["n_max"]:
                c.fail(f"{sd}.n_min", f"n_min {shape['n_min']} is above n_max {shape['n_max']}",
                       "swap them or fix the range")
            if (shape["n_max"] - shape["n_min"]) % shape["n_step"]:
                c.fail(f"{sd}.n_step", f"n_max {shape['n_max']} is not n_min {shape['n_min']} plus a "
                       f"multiple of n_step {shape['n_step']}", "make the range land on n_max")
            if shape in shapes:
                c.fail(sd, "shape is listed twice", "list it once")
            shapes.append(shape)
        entry["shapes"] = shapes
        if "notes" in spec:
            entry["notes"] = c.value(spec["notes"], _NOTES, f"{dotted}.notes")
        kinds[kind] = entry
    out["kinds"] = kinds
    return out


def _regex_list(c: _Checker, raw: Any, dotted: str) -> list[str]:
    if not isinstance(raw, list):
        c.fail(dotted, f"expected a list of SASS opcode patterns, got {type(raw).__name__} {_show(raw)}",
               "write the opcode regexes nvdisasm prints, e.g. [\"^OPCODE\"] ([] when not yet known)")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not item.strip():
            c.fail(f"{dotted}[{i}]", f"expected an opcode pattern, got {_show(item)}", "write the opcode (a regex) nvdisasm prints")
        _check_pattern_length(c, item, f"{dotted}[{i}]")
        try:
            re.compile(item)
        except re.error as exc:
            c.fail(f"{dotted}[{i}]", f"pattern {_show(item)} is not a valid regular expression ({exc})",
                   "escape special characters or write a plain opcode prefix")
        problem = regex_hazard(item)
        if problem:
            c.fail(f"{dotted}[{i}]", f"pattern {_show(item)} {problem}",
                   "signatures use a linear-time subset: literals, classes, '.', anchors, "
                   "groups, '|', and ?, *, + or {m,n} on single characters; at most "
                   f"{_MAX_OPEN_REPEATS} unbounded repeats")
        out.append(item)
    return out


def _check_pattern_length(c: _Checker, pattern: str, dotted: str) -> None:
    if len(pattern) > _MAX_PATTERN_CHARS:
        c.fail(dotted, f"pattern of {len(pattern):,} characters {_show(pattern, 40)} (at most {_MAX_PATTERN_CHARS})",
               "write the opcode and the modifiers that prove the feature, not a whole instruction")


# A SASS signature is matched against every instruction of every kernel, so a pattern
# must not backtrack without bound: Python's re has no time limit, and '^(.|.)*ZZZ$'
# takes 2^n steps on an n-character line. Signatures stay within a subset whose work is
# polynomial of low degree in the (short) instruction length: a quantifier applies to a
# single-character matcher or to a group of them with no alternation or repeat inside,
# no backreferences or lookarounds, and few unbounded repeats in all.
_MAX_OPEN_REPEATS = 3


def regex_hazard(pattern: str) -> str | None:
    """Why ``pattern`` falls outside the linear-time signature subset, or None."""
    try:
        from re import _parser as sre  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as sre  # type: ignore[no-redef]
    try:
        parsed = sre.parse(pattern)
    except Exception:  # re.compile already accepted it; a parser change must not crash
        return "cannot be analysed"
    single = {"LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"}
    open_repeats = 0

    def walk(items, in_repeat: bool) -> str | None:
        nonlocal open_repeats
        for op, av in items:
            name = getattr(op, "name", str(op))
            if name in single or name == "AT":
                continue
            if name == "SUBPATTERN":
                problem = walk(av[-1], in_repeat)
            elif name == "ATOMIC_GROUP":
                problem = walk(av, in_repeat)
            elif name == "BRANCH":
                if in_repeat:
                    return "repeats an alternation (exponential backtracking)"
                problem = next((p for alt in av[1] if (p := walk(alt, in_repeat))), None)
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                if in_repeat:
                    return "nests a repeat inside a repeat (exponential backtracking)"
                low, high, body = av
                if high == sre.MAXREPEAT or high > 64:
                    open_repeats += 1
                    if open_repeats > _MAX_OPEN_REPEATS:
                        return f"has more than {_MAX_OPEN_REPEATS} unbounded repeats"
                problem = walk(body, True)
            else:
                return f"uses {name.lower().replace('_', ' ')}, which signatures do not allow"
            if problem:
                return problem
        return None

    return walk(parsed, False)


def _check_block_scales(c: _Checker, raw: Any, sources: dict) -> dict:
    c.mapping(raw if raw is not None else {}, "block_scales", "name -> scale_format, block_size, kinds")
    out = {}
    for name, spec in (raw or {}).items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            c.fail(f"block_scales.{name}", "block-scale names are lower-case like mx or nvfp4", "rename it")
        out[name] = c.section(spec, name, _SCALE_FIELDS, sources, dotted=f"block_scales.{name}")
    return out


def _check_peak(c: _Checker, raw: Any, sources: dict) -> dict:
    c.mapping(raw, "peak", "dense_tflops and source")
    c.keys(raw, "peak", ("dense_tflops", *_META), ("dense_tflops", "source"))
    rates = c.mapping(raw["dense_tflops"] if raw["dense_tflops"] is not None else {},
                      "peak.dense_tflops", "dtype -> TFLOP/s")
    field = _num(0.001, 1e6, "TFLOP/s (dense, 1e12 FLOP/s)")
    out_rates = {}
    for dtype, value in rates.items():
        if dtype not in PEAK_DTYPES:
            c.fail(f"peak.dense_tflops.{dtype}", f"unknown dtype; known: {', '.join(PEAK_DTYPES)}",
                   _nearest(dtype, PEAK_DTYPES))
        out_rates[dtype] = float(c.value(value, field, f"peak.dense_tflops.{dtype}"))
    out = {"dense_tflops": out_rates}
    if "notes" in raw:
        out["notes"] = c.value(raw["notes"], _NOTES, "peak.notes")
    out["source"] = c.source(raw["source"], "peak.source", ("dense_tflops",), sources)
    return out


def _check_signatures(c: _Checker, raw: Any, sources: dict) -> dict:
    c.mapping(raw, "sass_signatures", "feature -> SASS opcode patterns")
    c.keys(raw, "sass_signatures", (*FEATURES, *_META), ("source",))
    out = {f: _regex_list(c, raw[f], f"sass_signatures.{f}") for f in FEATURES if f in raw}
    out["source"] = c.source(raw["source"], "sass_signatures.source", (), sources)
    return out


_SPELLING_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _check_sass_ops(c: _Checker, raw: Any, sources: dict) -> dict:
    """``sass_ops``: how this target's disassembly spells instructions that kernels and
    probes check but that prove no descriptor feature on their own (tcgen05.commit, the
    TMEM loads, a spill, a 16-byte store); name -> opcode regexes, any one matches."""
    if raw is None:
        return {}
    c.mapping(raw, "sass_ops", "instruction name -> SASS opcode patterns")
    if "source" not in raw:
        c.fail("sass_ops.source", "missing key", "say where the spellings come from, citing [KEY]")
    out: dict[str, Any] = {}
    for name, pats in raw.items():
        if name in _META:
            continue
        if not _SPELLING_NAME.fullmatch(name):
            c.fail(f"sass_ops.{name}", "instruction names are lower-case like mma_commit or tmem_load",
                   "rename it")
        out[name] = _regex_list(c, pats, f"sass_ops.{name}")
        if not out[name]:
            c.fail(f"sass_ops.{name}", "lists no pattern", "write the opcode regexes nvdisasm prints for it")
    out["source"] = c.source(raw["source"], "sass_ops.source", (), sources)
    return out


def _check_sass_modifiers(c: _Checker, raw: Any, sources: dict) -> dict:
    """``sass_modifiers``: how a modifier is spelled after an opcode (the CTA-pair suffix,
    the scale-vector width): name -> one regex fragment that follows the opcode and any
    modifiers before it. ``{name}`` placeholders (letters only) are filled by the kernel."""
    if raw is None:
        return {}
    c.mapping(raw, "sass_modifiers", "modifier name -> regex fragment")
    if "source" not in raw:
        c.fail("sass_modifiers.source", "missing key", "say where the spellings come from, citing [KEY]")
    out: dict[str, Any] = {}
    for name, frag in raw.items():
        if name in _META:
            continue
        dotted = f"sass_modifiers.{name}"
        if not _SPELLING_NAME.fullmatch(name):
            c.fail(dotted, "modifier names are lower-case like pair or scale_vec_4x", "rename it")
        if not isinstance(frag, str) or not frag.strip():
            c.fail(dotted, f"expected a regex fragment, got {_show(frag)}",
                   "write the suffix nvdisasm prints after the opcode, as a regex")
        _check_pattern_length(c, frag, dotted)
        probe = re.sub(r"\{[a-z_]+\}", "0", frag)
        try:
            re.compile(probe)
        except re.error as exc:
            c.fail(dotted, f"fragment {_show(frag)} is not a valid regular expression ({exc})",
                   "escape special characters")
        problem = regex_hazard(probe)
        if problem:
            c.fail(dotted, f"fragment {_show(frag)} {problem}", "use the linear-time signature subset")
        out[name] = frag
    out["source"] = c.source(raw["source"], "sass_modifiers.source", (), sources)
    return out


# Figures a product may carry for itself (any it leaves out are the architecture's).
_PRODUCT_FIELDS: dict[str, Field] = {
    "sm_count": Field("int", "SMs", 1, 1024, required=False),
    "l2_mib": Field("number", "MiB", 0.001, 4096, required=False),
    "hbm_gb": Field("number", "GB (1e9 bytes)", 0.001, 100000, required=False),
    "hbm_bandwidth_tb_s": Field("number", "TB/s (1e12 bytes/s)", 0.001, 1000, required=False),
}


def _check_products(c: _Checker, raw: Any, sources: dict, d: dict) -> dict:
    """``products``: which product the limits / memory / peak sections describe
    (``default``), and for every other product the figures it has of its own (SM count,
    memory, peaks where they differ). Normalised: each product's full figures, the
    default's being the sections' own."""
    if raw is None:
        return {}
    c.mapping(raw, "products", "default and product name -> figures")
    if "default" not in raw:
        c.fail("products.default", "missing key", "name the product the limits and memory sections describe")
    default = raw["default"]
    if not isinstance(default, str) or not default.strip():
        c.fail("products.default", f"expected a product name, got {_show(default)}",
               "name the product the limits and memory sections describe")
    c.plain_text(default, "products.default")
    base = {"sm_count": d["limits"]["sm_count"], "l2_mib": d["memory"]["l2_mib"],
            "hbm_gb": d["memory"]["hbm_gb"], "hbm_bandwidth_tb_s": d["memory"]["hbm_bandwidth_tb_s"],
            "dense_tflops": {}}
    items: dict[str, Any] = {}
    for name, spec in raw.items():
        if name in ("default", *_META):
            continue
        dotted = f"products.{name}"
        c.plain_text(name, dotted)
        c.mapping(spec, dotted, "sm_count, l2_mib, hbm_gb, hbm_bandwidth_tb_s, dense_tflops, source")
        # perf: the timing-model figures that differ for this product (perf_schema checks them)
        c.keys(spec, dotted, (*_PRODUCT_FIELDS, "dense_tflops", "perf", *_META), ["source"])
        item = {k: c.value(spec[k], f, f"{dotted}.{k}") for k, f in _PRODUCT_FIELDS.items() if k in spec}
        rates = c.mapping(spec.get("dense_tflops") or {}, f"{dotted}.dense_tflops", "dtype -> TFLOP/s")
        peak_field = _num(0.001, 1e6, "TFLOP/s (dense, 1e12 FLOP/s)")
        item["dense_tflops"] = {}
        for dtype, value in rates.items():
            if dtype not in d["peak"]["dense_tflops"]:
                c.fail(f"{dotted}.dense_tflops.{dtype}", f"no architecture peak for {dtype} to differ from",
                       f"add peak.dense_tflops.{dtype} first ({', '.join(d['peak']['dense_tflops']) or 'none'})")
            item["dense_tflops"][dtype] = float(c.value(value, peak_field, f"{dotted}.dense_tflops.{dtype}"))
        if len(item) == 1 and not item["dense_tflops"] and name != default:
            c.fail(dotted, "a product entry with no figures of its own",
                   "give the figures that differ (sm_count, l2_mib, hbm_gb, hbm_bandwidth_tb_s, dense_tflops) "
                   "or drop the entry")
        if name == default:
            # The sections describe the default product: its entry may only repeat them.
            for key, value in item.items():
                if key != "dense_tflops" and value != base[key]:
                    c.fail(f"{dotted}.{key}", f"the default product says {value}, the architecture "
                           f"sections say {base[key]}", "make them agree (the sections describe the default product)")
            for dtype, value in item["dense_tflops"].items():
                if value != d["peak"]["dense_tflops"][dtype]:
                    c.fail(f"{dotted}.dense_tflops.{dtype}", f"the default product says {value}, "
                           f"peak.dense_tflops says {d['peak']['dense_tflops'][dtype]}", "make them agree")
        if "notes" in spec:
            item["notes"] = c.value(spec["notes"], _NOTES, f"{dotted}.notes")
        item["source"] = c.source(spec["source"], f"{dotted}.source", tuple(k for k in spec if k not in _META),
                                  sources)
        items[name] = {**base, **item}
    items.setdefault(default, dict(base))
    # The default first, then the others in the order written.
    return {"default": default, "items": {default: items[default],
                                          **{p: f for p, f in items.items() if p != default}}}


def _check_uncertain(c: _Checker, raw: Any, data: dict) -> list[str]:
    if not isinstance(raw, list):
        c.fail("uncertain", f"expected a list of dotted keys, got {_show(raw)}",
               "write '- memory.l2_mib' lines")
    out = []
    for i, item in enumerate(raw):
        node: Any = data
        for part in str(item).split(".") if isinstance(item, str) else [None]:
            if not isinstance(node, dict) or part not in node:
                c.fail(f"uncertain[{i}]", f"{_show(item)} names no key of this descriptor",
                       "write a dotted key that exists, e.g. memory.l2_mib")
            node = node[part]
        out.append(item)
    return out


# The MMA shapes the PTX ISA allows each tensor-core generation (wgmma.mma_async, tcgen05.mma
# and mma.sync shape tables; shared/ARCH_FACTS.md): the (cta_group, M) pairs, N a multiple of
# 8 between 8 and n_max, and the K values one instruction may consume. The ISA narrows N
# further per kind and M (e.g. tcgen05 M=128 takes N in steps of 16 for kind::f16); a
# descriptor lists those exact ranges, and this check only keeps them inside what the
# generation can issue at all: an M of 7 would pass every other check and reach the generator.
_LEGAL_MMA = {
    # m64nNk16 (f16/bf16), k8 (tf32), k32 (fp8, s8/u8), k256 (b1); N = 8..256
    "wgmma": {"m": {(1, 64): 8}, "n_max": 256, "k": (8, 16, 32, 256)},
    # cta_group::1: M 64 or 128; cta_group::2 (a CTA pair): M 128 or 256;
    # K = 256 bits of A: tf32 8, f16 16, f8/i8 32, fp4 64
    "tcgen05": {"m": {(1, 64): 8, (1, 128): 8, (2, 128): 8, (2, 256): 8}, "n_max": 256, "k": (8, 16, 32, 64)},
    # the m8n8 and m16n8 forms, K 4 to 256 by the operand type
    "mma_sync": {"m": {(1, 8): 8, (1, 16): 8}, "n_max": 8, "k": (4, 8, 16, 32, 64, 128, 256)},
}


def _check_mma_legality(c: _Checker, generation: str, kinds: dict) -> None:
    legal = _LEGAL_MMA.get(generation)
    if legal is None:
        return
    ms = ", ".join(f"m{m} (cta_group {g})" for g, m in legal["m"])
    for kind, spec in kinds.items():
        if spec["k"] not in legal["k"]:
            c.fail(f"tensor_core.kinds.{kind}.k", f"k {spec['k']} is not a {generation} K (the PTX ISA allows "
                   f"{', '.join(map(str, legal['k']))})", "give the elements of K one instruction consumes")
        for i, shape in enumerate(spec["shapes"]):
            sd = f"tensor_core.kinds.{kind}.shapes[{i}]"
            step = legal["m"].get((shape["cta_group"], shape["m"]))
            if step is None:
                c.fail(f"{sd}.m", f"m {shape['m']} with cta_group {shape['cta_group']} is not a {generation} "
                       f"shape (the PTX ISA allows {ms})", "list the M the instruction takes")
            if shape["n_min"] < 8 or shape["n_max"] > legal["n_max"] or shape["n_min"] % step \
                    or shape["n_step"] % step:
                c.fail(f"{sd}.n_min", f"N {shape['n_min']}..{shape['n_max']} step {shape['n_step']} leaves the "
                       f"{generation} shapes for m{shape['m']} (N a multiple of {step}, 8 to {legal['n_max']})",
                       "list only the N values the PTX ISA allows")


def _check_consistency(c: _Checker, d: dict) -> None:
    """Contradictions between sections: each would mislead a template or a check."""
    lim, tc, tmem, cl, fmt = d["limits"], d["tensor_core"], d["tmem"], d["cluster"], d["formats"]

    if lim["smem_per_block_kib"] > lim["smem_per_sm_kib"]:
        c.fail("limits.smem_per_block_kib", f"{lim['smem_per_block_kib']} KiB per block is more than "
               f"the {lim['smem_per_sm_kib']} KiB per SM", "a block cannot use more than its SM has")
    if lim["max_threads_per_block"] > lim["max_threads_per_sm"]:
        c.fail("limits.max_threads_per_block", "more threads per block than per SM",
               "check both figures")
    if cl["max_nonportable"] < cl["max_portable"]:
        c.fail("cluster.max_nonportable", f"{cl['max_nonportable']} is below max_portable "
               f"{cl['max_portable']}", "the non-portable limit is at least the portable one")

    # Tensor Memory: its size must match lanes x columns x cell bits, and it exists
    # exactly when the tensor core accumulates into it.
    tmem_bytes = tmem["lanes"] * tmem["columns"] * tmem["cell_bits"] // 8
    if abs(tmem["size_kib"] * 1024 - tmem_bytes) > 0.5:
        c.fail("tmem.size_kib", f"{tmem['size_kib']} KiB does not match lanes x columns x cell_bits "
               f"= {tmem['lanes']} x {tmem['columns']} x {tmem['cell_bits']} bit = {tmem_bytes / 1024:g} KiB",
               "fix the size or the geometry")
    if tmem_bytes > 0 and tc["accumulator"] != "tmem":
        c.fail("tmem.size_kib", f"Tensor Memory is declared but tensor_core.accumulator is "
               f"'{tc['accumulator']}'", "set tensor_core.accumulator: tmem, or set the tmem sizes to 0")
    if tc["accumulator"] == "tmem" and tmem_bytes == 0:
        c.fail("tensor_core.accumulator", "accumulator is tmem but the tmem section has size 0",
               "declare tmem lanes, columns and size_kib, or use accumulator: registers")
    if tmem["alloc_min_columns"] > tmem["columns"]:
        c.fail("tmem.alloc_min_columns", "the smallest allocation is larger than Tensor Memory",
               "check alloc_min_columns against columns")

    # CTA pairs and distributed shared memory need clusters.
    if cl["cta_pair"] and cl["max_portable"] < 2:
        c.fail("cluster.cta_pair", "CTA pairs are claimed but clusters are limited to 1 CTA",
               "set cluster.max_portable to at least 2, or cta_pair: false")
    if cl["distributed_smem"] and cl["max_portable"] < 2:
        c.fail("cluster.distributed_smem", "distributed shared memory is claimed without clusters",
               "set cluster.max_portable to at least 2, or distributed_smem: false")

    kinds = tc["kinds"]
    if tc["generation"] == "none" and kinds:
        c.fail("tensor_core.kinds", "MMA kinds are listed but the generation is 'none'",
               "name the tensor-core generation or empty the kinds")
    if tc["generation"] != "none" and not kinds:
        c.fail("tensor_core.kinds", f"generation '{tc['generation']}' lists no MMA kinds",
               "add the kinds this tensor core executes")
    # The reverse of the per-shape check below: a CTA-pair claim is only usable through an
    # MMA shape that spans the pair, so a claim without one is a claim nothing can exercise.
    if cl["cta_pair"] and not any(shape["cta_group"] == 2 for spec in kinds.values() for shape in spec["shapes"]):
        c.fail("cluster.cta_pair", "cta_pair: true but no MMA shape with cta_group 2",
               "add the cta_group 2 shapes the pair executes to tensor_core.kinds, or set cta_pair: false")
    _check_mma_legality(c, tc["generation"], kinds)
    for kind, spec in kinds.items():
        for i, shape in enumerate(spec["shapes"]):
            if shape["cta_group"] == 2 and not cl["cta_pair"]:
                c.fail(f"tensor_core.kinds.{kind}.shapes[{i}].cta_group",
                       "a cta_group 2 shape needs CTA pairs, but cluster.cta_pair is false",
                       "set cluster.cta_pair: true or drop the shape")
        for j, f in enumerate(spec["formats"]):
            if f not in fmt["elements"]:
                c.fail(f"tensor_core.kinds.{kind}.formats[{j}]", f"format {f} is not in formats.elements",
                       f"add {f} to formats.elements or remove it from the kind")

    consumed = {f for spec in kinds.values() for f in spec["formats"]}
    for j, f in enumerate(fmt["elements"]):
        if f not in consumed:
            c.fail(f"formats.elements[{j}]", f"format {f} is listed but no MMA kind consumes it",
                   f"add {f} to a tensor_core kind's formats, or remove it")

    scaled_by: dict[str, list[str]] = {}
    for name, scale in d["block_scales"].items():
        for j, kind in enumerate(scale["kinds"]):
            dotted = f"block_scales.{name}.kinds[{j}]"
            if kind not in kinds:
                c.fail(dotted, f"block scale '{name}' names MMA kind '{kind}', which tensor_core.kinds "
                       "lacks", f"add the kind or remove it ({_nearest(kind, kinds) if kinds else 'no kinds'})")
            if not kinds[kind]["block_scaled"]:
                c.fail(dotted, f"kind '{kind}' is not marked block_scaled", 
                       f"set tensor_core.kinds.{kind}.block_scaled: true or remove it here")
            scaled_by.setdefault(kind, []).append(name)
    for kind, spec in kinds.items():
        if spec["block_scaled"] and kind not in scaled_by:
            c.fail(f"tensor_core.kinds.{kind}.block_scaled",
                   "a block-scaled kind that no block_scales entry consumes",
                   "list the kind under a block_scales entry's kinds, or set block_scaled: false")

    for dtype in d["peak"]["dense_tflops"]:
        if not set(PEAK_DTYPES[dtype]) & set(fmt["elements"]):
            c.fail(f"peak.dense_tflops.{dtype}", f"a peak for {dtype} but formats.elements has none of "
                   f"{', '.join(PEAK_DTYPES[dtype])}", "add the format or drop the peak")

    claimed = derive_features(d)
    for feature in d["sass_signatures"]:
        if feature != "source" and feature not in claimed:
            c.fail(f"sass_signatures.{feature}", f"a signature for '{feature}', which this descriptor "
                   "does not claim", "drop the signature or declare the feature")


def derive_features(d: dict) -> frozenset[str]:
    """The features a normalised descriptor claims, derived from its content."""
    tc, tmem, cl, ac = d["tensor_core"], d["tmem"], d["cluster"], d["async_copy"]
    formats = set(d["formats"]["elements"])
    tmem_bytes = tmem["lanes"] * tmem["columns"] * tmem["cell_bits"] // 8
    have = {
        # The arch's own tensor core is the warp-level mma.sync (sm_80, sm_120a). Later
        # generations keep mma.sync in PTX beside wgmma / tcgen05, but it is not their path.
        "mma_sync": tc["generation"] == "mma_sync",
        "wgmma": tc["generation"] == "wgmma",
        "tcgen05": tc["generation"] == "tcgen05",
        "tmem": tmem_bytes > 0,
        "cta_pair": cl["cta_pair"],
        "clusters": cl["max_portable"] > 1,
        "dsmem": cl["distributed_smem"],
        "tma": ac["tma"],
        "mbarrier": ac["mbarrier"],
        "cp_async": ac.get("cp_async", False),
        "fp8": bool(formats & {"e4m3", "e5m2"}),
        "fp6": bool(formats & {"e2m3", "e3m2"}),
        "fp4": "e2m1" in formats,
        "block_scale_mx": "mx" in d["block_scales"],
        "block_scale_nvfp4": "nvfp4" in d["block_scales"],
        "setmaxnreg": d["limits"]["setmaxnreg"],
        "cluster_launch_control": cl.get("launch_control", False),
    }
    assert set(have) == set(FEATURES)
    return frozenset(f for f, on in have.items() if on)


def load_descriptor(text: str, file: str) -> dict[str, Any]:
    """Parse and validate descriptor text; the normalised dict or one PorterError."""
    data, lines = parse_yaml(text, file)
    return check_descriptor(data, lines, file)
