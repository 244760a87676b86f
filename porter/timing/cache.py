"""Predictions cached on disk, content-keyed: `porter predict` and the `prediction` stage of
`porter target` pay for the model once per input, then read it back.

A key covers everything a prediction depends on: the descriptor's bytes (its perf: section
and the product's figures), the selected product, the kernel spec (its configuration with
any --set knobs), the shape, and the source of the timing model itself (porter/timing, the
megakernel queue simulation it runs, the descriptor loader that checks perf:, and the
model configs the megakernel plans from). An edit to any of them is a miss, never a stale hit.
An entry that does not parse is treated as a miss and rewritten.

An L1 prediction (the per-tile period from the simulator's timed mode) is keyed on the
same inputs, its level, and what the timed run reads besides: the simulator's source
(porter/emu, its timed mode included), the kernel's source (templates, kernels_src, the
families' code and the build's), and the toolchain whose SASS sets the expansion table.
"""

from __future__ import annotations

import functools
import json

from porter.fsutil import atomic_write

_MODEL_CODE = ("timing/*.py", "megakernel/*.py", "descriptor/perf_schema.py", "descriptor/arch_schema.py",
               "descriptor/arch.py", "kernels/knobs.py")


@functools.lru_cache(maxsize=1)
def model_digest() -> str:
    """Digest of the code and data a prediction is computed from."""
    from porter.pipeline import keys

    files = [p for pattern in _MODEL_CODE for p in keys._PKG.glob(pattern) if p.is_file()]
    return keys.digest([keys.file_digest(files), keys.data_digest("validation")])


@functools.lru_cache(maxsize=1)
def l1_digest() -> str:
    """Digest of what an L1 prediction reads beyond L0's inputs: the simulator that times the
    kernel, the kernel's source and build, the toolchain that compiles it."""
    from porter.kernels import FAMILIES
    from porter.pipeline import keys

    emu = [p for p in keys._PKG.glob("emu/**/*.py") if p.is_file()]
    runtime = [p for p in keys._PKG.glob("runtime/emulated*.py") if p.is_file()]
    return keys.digest([keys.file_digest(emu + runtime), keys.render_sources_digest(),
                        keys.family_files_digest(sorted(FAMILIES)), keys.code_version("build"),
                        keys.toolchain_fingerprint(), keys.data_digest("validation")])


def _spec_dict(spec) -> dict:
    from porter.pipeline.work import jsonable

    return jsonable(spec.to_dict() if hasattr(spec, "to_dict") else vars(spec))


def key(arch, spec, product: str, shape: str, level: str = "L0") -> str:
    from porter.pipeline import keys

    k = {"arch": arch.digest, "arch_product": arch.product or "", "product": product,
         "shape": shape, "spec": _spec_dict(spec), "model": model_digest()}
    if level != "L0":
        k.update(level=level, simulator=l1_digest())
    return keys.digest(k)


def _folder():
    from porter import paths

    return paths.cache_dir() / "predict"


def cached_predict(arch, spec, *, product: str, shape: str, stats: dict | None = None, level: str = "L0") -> dict:
    """``Prediction.to_dict()`` for (spec, product, shape) at ``level``, from the cache when
    present. ``stats`` (optional) counts {"hits", "misses"}."""
    from .predict import predict

    k = key(arch, spec, product, shape, level)
    path = _folder() / k[:2] / f"{k}.json"
    out = _read_entry(path, k)
    if isinstance(out, dict) and out.get("kernel") == spec.name and out.get("shape") == shape:
        if stats is not None:
            stats["hits"] = stats.get("hits", 0) + 1
        return out
    out = predict(arch, spec, product=product, shape=shape, level=level).to_dict()
    _write_entry(path, k, out)
    if stats is not None:
        stats["misses"] = stats.get("misses", 0) + 1
    return out


def l1_cached(inputs: dict, compute) -> dict:
    """An L1 measurement (a JSON-able dict) for ``inputs``, from disk when present: keyed on
    ``inputs`` plus what every L1 run reads (``l1_digest``: the simulator, the kernel's
    sources and build, the toolchain) and the timing model's code (``model_digest``)."""
    from porter.pipeline import keys

    k = keys.digest({"inputs": json.loads(json.dumps(inputs, sort_keys=True, default=str)),
                     "simulator": l1_digest(), "model": model_digest()})
    path = paths_l1() / k[:2] / f"{k}.json"
    found = _read_entry(path, k)
    if found is not None:
        return found
    value = compute()
    _write_entry(path, k, value)
    return value


def _read_entry(path, k: str):
    """The value stored under key ``k`` at ``path``, or None (absent, another format, or
    corrupt: bytes that fail the entry's sha256 are discarded and counted, never used)."""
    from porter.compile.cache_entry import content_digest, discard

    try:
        entry = json.loads(path.read_text())
    except OSError:
        return None
    except ValueError:
        discard(path)
        return None
    if not isinstance(entry, dict) or entry.get("key") != k or "sha256" not in entry:
        return None
    if content_digest(json.dumps(entry.get("value"), sort_keys=True)) != entry["sha256"]:
        discard(path)
        return None
    return entry["value"]


def _write_entry(path, k: str, value) -> None:
    from porter.compile.cache_entry import content_digest

    text = json.dumps(value, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"key": k, "sha256": content_digest(text), "value": value}, sort_keys=True))


def paths_l1():
    from porter import paths

    return paths.cache_dir() / "predict-l1"
