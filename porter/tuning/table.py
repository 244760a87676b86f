"""Writing tuning/ARCH[.PRODUCT].yaml from a sweep (``porter.tuning.entries`` reads it
back for the kernel variants)."""

from __future__ import annotations

from pathlib import Path

import yaml

from porter.fsutil import atomic_write
from porter.tuning.entries import LABEL, file_for, product_slug, read, shown, untuned  # noqa: F401 (re-exported)


def entry_for(sweep, arch) -> dict | None:
    """The file entry of one kernel's sweep (None when no bucket has an eligible choice)."""
    from porter.tuning.buckets import default_bucket
    from porter.tuning.digests import porter_commit
    from porter.kernels.knobs import spec_with_knobs

    buckets = {}
    for b, row in sweep.buckets.items():
        chosen, dflt = row["chosen"], row["default"]
        if not chosen or (dflt and chosen["time_us"] > dflt["time_us"]):
            continue   # never an entry slower than the default, by the level it was ranked by
        buckets[b] = {
            "shape": row["shape"], "knobs": _plain(chosen["knobs"]), "level": chosen["level"],
            "same_as_default": bool(dflt) and chosen["knobs"] == dflt["knobs"],
            # ranked by L1; does L0 agree it is no slower? (false: the two levels disagree,
            # worth a GPU A/B before trusting either)
            "l0_agrees": (not dflt) or chosen["l0"]["time_us"] <= dflt["l0"]["time_us"] * (1 + 1e-9),
            "predicted": _pred(chosen), "predicted_l0": _pred_l0(chosen),
            "default": ({"knobs": _plain(dflt["knobs"]), "level": dflt["level"], "predicted": _pred(dflt),
                         "predicted_l0": _pred_l0(dflt)} if dflt else None),
        }
    if not buckets:
        return None
    with untuned():
        dflt_bucket = default_bucket(spec_with_knobs(arch, sweep.kernel, {}))
    return {"source_hash": sweep.source_hash, "porter_commit": porter_commit(), "ranking": sweep.ranker_note,
            "candidates": len(sweep.candidates), "space": sweep.space_size, "raw_space": sweep.raw_space,
            "legal": sweep.legal,
            "default_bucket": dflt_bucket if dflt_bucket in buckets else next(iter(buckets)),
            "buckets": buckets}


def _plain(knobs: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in knobs.items()}


def _pred(brief: dict) -> dict:
    """The prediction the candidates were ranked by (L1: the central time from the timed
    simulation; L0 where the family has no tiles to time, or --rank L0)."""
    return {"time_us": round(brief["time_us"], 3),
            "tflops": None if brief["tflops"] is None else round(brief["tflops"], 1),
            "gb_s": round(brief["gb_s"], 1), "bound": brief["bound"], "model": brief.get("level_model", "L0"),
            "label": LABEL}


def _pred_l0(brief: dict) -> dict:
    """L0's prediction with its range (every uncertain figure at its fast end, then its slow end)."""
    p = brief["l0"]
    return {"time_us": round(p["time_us"], 3), "tflops": None if p["tflops"] is None else round(p["tflops"], 1),
            "gb_s": round(p["gb_s"], 1), "low_us": round(p["low"], 3), "high_us": round(p["high"], 3),
            "bound": p["bound"], "model": "L0", "label": LABEL}


def write(arch, product: str, sweeps: list, path: Path | None = None) -> Path:
    """Merge ``sweeps`` into the arch and product's file (other kernels' entries kept)."""
    path = Path(path) if path else file_for(arch, product)
    old = read(path) or {}
    kernels = dict(old.get("kernels") or {})
    for s in sweeps:
        e = entry_for(s, arch)
        if e is not None:
            kernels[s.kernel] = e
    data = {"arch": arch.name, "product": product, "label": LABEL,
            "note": "written by porter tune: the chosen knobs per kernel and shape bucket; every time and "
                    "TFLOP/s here is predicted by porter's timing model, not measured",
            "kernels": dict(sorted(kernels.items()))}
    atomic_write(path, yaml.safe_dump(data, sort_keys=False, width=110))
    return path


def tuned_line(tuned: dict, names: list[str]) -> str:
    """One line for ``porter target``: which of ``names`` ran a tuned configuration
    (``tuned``: kernel -> "tuning/x.yaml, bucket b", the kernels stage's record)."""
    hits = [f"{n} ({tuned[n]})" for n in names if tuned.get(n)]
    if not hits:
        return "tuned: none (every kernel ran its hand-chosen configuration; porter tune writes tuning/)"
    return f"tuned: {', '.join(hits)}; the others ran their hand-chosen configuration"
