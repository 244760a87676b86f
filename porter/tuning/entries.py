"""Tuned entries, read back: the result of tuning as data: ``tuning/ARCH[.PRODUCT].yaml``, and how kernel variants
pick it up.

One file per arch and product (``blackwell.B200.yaml``; ``ARCH.yaml`` applies to every
product of the arch without its own file), one entry per kernel and shape bucket: the
chosen knobs, their predicted time and TFLOP/s with the range, the default's prediction
beside them, the level the chosen configuration reached (``emulated``), porter's commit
and the hash of the sources it was tuned on. An entry whose sources have changed since
is stale: it is ignored, with a one-line warning, and the hand-chosen configuration is
used.

Kernel variants use the entry of their default bucket (the bucket of the kernel's first
standard shape) through ``tuned_variants``, called at the end of each family's
``variants(arch)``. ``PORTER_TUNING_DIR`` moves the folder (tests, a scratch sweep).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import sys
from pathlib import Path

import yaml

from porter.errors import PorterError

ENV = "PORTER_TUNING_DIR"
LABEL = "predicted by porter's timing model, not measured"

_guard = contextvars.ContextVar("porter_untuned", default=False)
_files: dict = {}          # path -> (mtime_ns, size, parsed)
_warned: set = set()
_notes: dict = {}          # (arch digest, kernel name, config) -> "tuning/x.yaml, bucket b"


@contextlib.contextmanager
def untuned():
    """Inside: variants are the hand-chosen ones (the tuner's default and space, and the
    hook's own spec_with_knobs calls, which look variants up again)."""
    token = _guard.set(True)
    try:
        yield
    finally:
        _guard.reset(token)


def tuning_dir() -> Path:
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    from porter import paths

    try:
        return paths.data_dir("tuning")
    except (FileNotFoundError, ValueError):
        return Path(__file__).resolve().parent.parent.parent / "tuning"


def product_slug(product: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", product).strip("-")


def file_for(arch, product: str) -> Path:
    return tuning_dir() / f"{arch.name}.{product_slug(product)}.yaml"


def files_for(arch, product: str) -> list[Path]:
    """Where an arch and product's entries are looked up, most specific first."""
    return [file_for(arch, product), tuning_dir() / f"{arch.name}.yaml"]


def files_digest(arch) -> str:
    """The content of the tuning files ``arch`` (its product) reads, for a cache key: a
    stage whose kernels a tuning file may change is rebuilt when one appears or changes."""
    from porter.pipeline.keys import file_digest

    return file_digest(files_for(arch, product_of(arch)))


def shown(path: Path) -> str:
    """tuning/x.yaml for the shipped folder; the full path for any other."""
    try:
        return f"tuning/{Path(path).relative_to(tuning_dir()).as_posix()}" if not os.environ.get(ENV) else str(path)
    except ValueError:
        return str(path)


def read(path: Path) -> dict | None:
    """The parsed file (memoized by mtime), None when absent; PorterError when malformed."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return None
    memo = _files.get(path)
    if memo and memo[0] == (st.st_mtime_ns, st.st_size):
        return memo[1]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PorterError(f"{path}: not a readable tuning file ({str(exc).splitlines()[0]}); "
                          "delete it or rerun porter tune") from None
    if not isinstance(data, dict) or not isinstance(data.get("kernels", {}), dict):
        raise PorterError(f"{path}: a tuning file has a 'kernels:' mapping; delete it or rerun porter tune")
    _files[path] = ((st.st_mtime_ns, st.st_size), data)
    return data


def _warn(path: Path, kernel: str, why: str) -> None:
    if (path, kernel) in _warned:
        return
    _warned.add((path, kernel))
    print(f"porter: warning: {shown(path)}: {kernel}: {why}; using the hand-chosen configuration", file=sys.stderr)


def entry(arch, spec, render, bucket: str | None = None, product: str | None = None):
    """(path, bucket, bucket entry) of the tuned configuration of ``spec`` (the kernel's
    hand-chosen spec; ``render`` its family's render, for the source hash), or None (no
    file, no entry, or a stale one: warned once)."""
    from porter.tuning.digests import source_hash

    kernel = spec.name
    prod = product_of(arch, product)
    for path in files_for(arch, prod):
        data = read(path)
        if not data:
            continue
        k = (data.get("kernels") or {}).get(kernel)
        if not isinstance(k, dict):
            continue
        want = bucket or k.get("default_bucket")
        b = (k.get("buckets") or {}).get(want)
        if not isinstance(b, dict) or not isinstance(b.get("knobs"), dict) or b.get("same_as_default"):
            continue   # no entry, or tuning confirmed the hand-chosen configuration: nothing to apply
        now = source_hash(arch, spec, render)
        if k.get("source_hash") != now:
            _warn(path, kernel, f"tuned on other sources (source hash {k.get('source_hash')}, now {now}): stale, "
                                f"ignored (porter tune {arch.name} --kernel {kernel} renews it)")
            return None
        return path, want, b
    return None


def tuned_variants(arch, specs: list, render, with_knobs) -> list:
    """``specs`` with each kernel's tuned configuration (its default bucket's entry) applied:
    called by a family's ``variants`` with its own ``render`` and ``spec_with_knobs`` (so
    this module never imports a family back)."""
    if _guard.get() or not any(p.is_file() for p in files_for(arch, _product(arch))):
        return specs
    from porter.kernels.base import KernelSpec, Unsupported
    out = []
    with untuned():
        for spec in specs:
            hit = entry(arch, spec, render) if isinstance(spec, KernelSpec) else None
            if hit is None:
                out.append(spec)
                continue
            path, bucket, b = hit
            try:
                tuned = with_knobs(arch, spec.name, norm_knobs(b["knobs"]))
            except PorterError as exc:
                tuned = Unsupported(spec.family, spec.name, spec.variant, (), str(exc).splitlines()[0])
            if isinstance(tuned, Unsupported):
                _warn(path, spec.name, f"its knobs no longer apply ({tuned.reason})")
                out.append(spec)
                continue
            _notes[(arch.digest, tuned.name, _config_key(tuned))] = f"{shown(path)}, bucket {bucket}"
            out.append(tuned)
    return out


def _product(arch) -> str:
    return product_of(arch)


def product_of(arch, product: str | None = None) -> str:
    """The product a sweep or a lookup is for: the one given, else the arch's own."""
    # getattr: a family's variants() also runs on hand-built stand-in descriptors (tests,
    # tools) that carry only the features it reads; they have no products and no tuning.
    products = getattr(arch, "products", None) or ()
    return (product or getattr(arch, "product", None) or getattr(arch, "default_product", None)
            or (products[0] if products else ""))


def norm_knobs(knobs: dict) -> dict:
    """Knob values as porter.kernels.knobs takes them: shapes are tuples (JSON and YAML
    give lists back)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items()}


def _config_key(spec) -> str:
    import json

    return json.dumps(dict(spec.config), sort_keys=True, default=str)


def tuned_note(arch, spec) -> str:
    """"tuning/x.yaml, bucket b" when ``spec`` is the tuned configuration, else ""."""
    return _notes.get((arch.digest, spec.name, _config_key(spec)), "")
