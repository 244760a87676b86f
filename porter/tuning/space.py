"""The combinations a sweep screens: the knob space's cartesian product, less the ones the
knob rules reject for a reason that holds whatever the other knobs are.

Two knobs apply only when another knob has a value (``porter.kernels.knob_rules``):
``grid_ctas`` only with ``persistent=true`` (a non-persistent launch runs one CTA per tile,
and any grid_ctas is refused), ``promote_every_k`` only with ``accumulation=promoted``
(any other accumulation refuses a non-zero value). Where the condition fails, every
combination that differs only in the dependent knob is one configuration: the sweep
screens it once, with the dependent knob at its neutral spelling (left out, or 0), and
counts the others as collapsed, with the rule as their reason. Without this, half of a
Hopper GEMM's 645,120 combinations were refusals found one spec at a time, and no
non-persistent launch was ever legal (each carried a grid_ctas).

``tests/test_tune.py`` checks each rule against the knob rules themselves on every kernel
that has both knobs: the neutral spelling is legal, every other value is refused.
"""

from __future__ import annotations

import itertools

OMIT = object()    # the dependent knob is left out (its rule picks the value)

# (dependent knob, the knob it depends on, the value it needs, the dependent's neutral spelling)
APPLIES = (
    ("grid_ctas", "persistent", True, OMIT),
    ("promote_every_k", "accumulation", "promoted", 0),
)


def reason(dependent: str, on: str, value) -> str:
    return f"{dependent} applies only with {on}={str(value).lower() if isinstance(value, bool) else value} (collapsed)"


def combinations(space: dict, default: dict) -> tuple[list[dict], dict, int]:
    """(the distinct combinations to screen, the default first; {reason: combinations
    collapsed}; the cartesian product's size)."""
    names = list(space)
    rules = [r for r in APPLIES if r[0] in space and r[1] in space]
    raw = 1
    for n in names:
        raw *= len(space[n])
    out, seen, collapsed = [], set(), {}

    def add(knobs: dict) -> bool:
        key = tuple(sorted((k, repr(v)) for k, v in knobs.items()))
        if key in seen:
            return False
        seen.add(key)
        out.append(knobs)
        return True

    add(normal(default, rules))
    for values in itertools.product(*(space[n] for n in names)):
        knobs = dict(zip(names, values))
        norm = normal(knobs, rules)
        if norm != knobs:   # refused by a rule whatever the other knobs: screened as its neutral spelling
            dep, on, need, _ = next(r for r in rules if knobs.get(r[1]) != r[2] and knobs.get(r[0]) != norm.get(r[0], OMIT))
            why = reason(dep, on, need)
            collapsed[why] = collapsed.get(why, 0) + 1
        add(norm)
    return out, collapsed, raw


def normal(knobs: dict, rules=APPLIES) -> dict:
    """``knobs`` with each dependent knob whose condition fails at its neutral spelling."""
    out = dict(knobs)
    for dep, on, need, neutral in rules:
        if dep in out and on in out and out[on] != need:
            if neutral is OMIT:
                out.pop(dep)
            else:
                out[dep] = neutral
    return out
