"""report.json: its schema (JSON-Schema-like, as data) and a small validator for it.

Consumers (dashboards, the next session's diff) read report.json by this schema;
``SCHEMA_VERSION`` changes when a field is removed or changes meaning;
``SCHEMA_MINOR`` (report.json "schema_minor", absent = 0) when a field keeps its
meaning but its documented values change, so a reader can tell which values to expect.
Minor 1: the level above sass-checked is labelled "numerics-model" (was "numerics").
"""

from __future__ import annotations

from porter.levels import Level

SCHEMA_VERSION = 1
SCHEMA_MINOR = 1

_STR, _INT, _NUM, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
_NULLSTR = {"type": ["string", "null"]}
_CHECK = {"type": "object", "required": ["name", "detail"], "properties": {"name": _STR, "detail": _STR}}
_CASE = {"type": "object", "required": ["label", "error", "tolerance", "passed"],
         "properties": {"label": _STR, "error": {"type": ["number", "null"]},
                        "tolerance": {"type": ["number", "null"]}, "passed": {"type": ["boolean", "null"]},
                        "measure": _STR}}
_BAR = {"type": "object", "required": ["name", "used", "limit", "unit"],
        "properties": {"name": _STR, "used": _NUM, "limit": _NUM, "unit": _STR, "note": _STR}}   # note: optional
LEVELS = [lvl.label for lvl in Level]     # lowest to highest (porter.levels)
STATUSES = ["passed", "failed", "skipped", "not-run"]

REPORT_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "porter_version", "arch", "base", "runbook", "device", "run",
                 "stages", "kernels", "before", "unsupported", "plan"],
    "properties": {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        # Optional (added within schema 1): which documented values to expect (see above).
        "schema_minor": {"type": "integer", "enum": list(range(SCHEMA_MINOR + 1))},
        "porter_version": _STR,
        "arch": {"type": "object", "required": ["name", "target", "digest", "features"],
                 # path (optional): the descriptor file, resolved; digest: the sha256 of its text
                 # limits_checked (optional): how far the limits were checked (known figures, compiler proof)
                 "properties": {"name": _STR, "target": _STR, "digest": _STR, "path": _STR, "limits_checked": _STR,
                                "features": {"type": "array", "items": _STR}}},
        "base": {"type": ["object", "null"], "required": ["name", "target"],
                 "properties": {"name": _STR, "target": _STR}},
        "runbook": _STR,
        # base_why (optional): how the base arch was chosen (--from, the runbook, identity.previous, none)
        "base_why": _STR,
        "device": {"type": "object", "required": ["ran", "detail"],
                   # required_but_absent (optional): --device on found no GPU of the arch
                   "properties": {"ran": _BOOL, "detail": _STR, "required_but_absent": _BOOL}},
        # Optional (added within schema 1): the answer a person reads first.
        "summary": {"type": "object",
                    "required": ["highest_level", "levels", "kernels", "unsupported", "device_ran", "next_steps"],
                    "properties": {"highest_level": {"type": ["string", "null"], "enum": LEVELS + [None]},
                                   "levels": {"type": "object"}, "kernels": _INT, "unsupported": _INT,
                                   "device_ran": _BOOL, "next_steps": {"type": "array", "items": _STR}}},
        # cold_run (optional, null when unknown): the run that built everything, kept across cached reruns
        "cold_run": {"type": ["object", "null"], "required": ["seconds", "nvrtc_calls", "units_run"]},
        # kernel_filter (optional): the --kernel pattern of a partial run (report.kernel-<pattern>.*)
        "kernel_filter": _NULLSTR,
        "run": {"type": "object", "required": ["seconds", "nvrtc_calls", "units_run", "units_cached"],
                # cache_corrupt (optional): cache entries that failed their digest, discarded and rebuilt
                "properties": {"seconds": _NUM, "nvrtc_calls": _INT, "units_run": _INT, "units_cached": _INT,
                               "cache_corrupt": _INT}},
        "stages": {"type": "array", "items": {
            "type": "object", "required": ["id", "kind", "title", "day", "needs", "status", "summary", "seconds"],
            "properties": {"id": _STR, "kind": _STR, "title": _STR, "day": _INT,
                           "needs": {"type": "array", "items": _STR},
                           "status": {"type": "string", "enum": STATUSES}, "summary": _STR, "seconds": _NUM}}},
        "kernels": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "variant", "family", "target", "level", "checks_failed", "resources", "numerics"],
            "properties": {
                "name": _STR, "variant": _STR, "family": _STR, "target": _STR,
                "level": {"type": "string", "enum": LEVELS},
                "checks_failed": {"type": "array", "items": _CHECK},
                "resources": {"type": "array", "items": _BAR},
                "numerics": {"type": ["object", "null"], "required": ["passed", "cases"],
                             # note (optional): why errors near the tolerance are by design, where they are
                             "properties": {"passed": {"type": ["boolean", "null"]},
                                            "cases": {"type": "array", "items": _CASE}, "note": _NULLSTR}},
                # schedule (optional): a persistent kernel's plan on this arch (megakernel)
                "schedule": {"type": ["object", "null"],
                             "required": ["model", "queues", "instructions", "per_sm",
                                          "predicted_latency_us", "memory_floor_us", "floor_ratio"]},
                # emulation (optional): the kernel's runs in porter's PTX simulator (executed there,
                # not on a GPU): status, reason, seconds, runs (one summary per launch), note, and
                # where recorded shapes, seeds (input sets), checks_on, sm_count, warp_order_seed
                "emulation": {"type": ["object", "null"], "required": ["status", "runs"],
                              "properties": {"status": _STR, "seconds": _NUM,
                                             "runs": {"type": "array", "items": {"type": "object"}},
                                             "shapes": {"type": "array"}, "seeds": {"type": "array"},
                                             "checks_on": {"type": "array", "items": _STR}}},
                "device": {"type": ["object", "null"]},
                "bench": {"type": ["object", "null"]}}}},
        "before": {"type": "array", "items": {
            "type": "object", "required": ["name", "compiled", "error"],
            # checks_failed (optional): a kernel that compiles can still fail the target's limits
            "properties": {"name": _STR, "compiled": _BOOL, "error": _STR,
                           "checks_failed": {"type": "array", "items": _CHECK}}}},
        "unsupported": {"type": "array", "items": {
            "type": "object", "required": ["name", "variant", "family", "missing"],
            "properties": {"name": _STR, "variant": _STR, "family": _STR,
                           "missing": {"type": "array", "items": _STR}}}},
        "plan": {"type": ["object", "null"]},
        # prediction (optional): the prediction stage's rows, each predicted by porter's timing model,
        # not measured (label), with its range (low/high us) and the binding resource
        "prediction": {"type": ["object", "null"], "required": ["label", "products", "rows"],
                       "properties": {"label": _STR, "products": {"type": "array", "items": _STR},
                                      "rows": {"type": "array", "items": {
                                          "type": "object",
                                          "required": ["kernel", "product", "shape", "time_us", "low", "high",
                                                       "bound", "label"],
                                          "properties": {"kernel": _STR, "product": _STR, "shape": _STR,
                                                         "time_us": _NUM, "low": _NUM, "high": _NUM,
                                                         "bound": _STR, "label": _STR}}}}},
    },
}

_PY = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
       "object": dict, "array": list, "null": type(None)}


def validate(instance, schema=REPORT_SCHEMA, where: str = "report") -> list[str]:
    """Every way ``instance`` breaks ``schema`` (empty when it conforms)."""
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        ok = any(isinstance(instance, _PY[t]) and not (t in ("integer", "number") and isinstance(instance, bool))
                 for t in names)
        if not ok:
            return [f"{where}: expected {'/'.join(names)}, got {type(instance).__name__}"]
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{where}: {instance!r} not one of {schema['enum']}")
    if isinstance(instance, dict):
        for key in schema.get("required", ()):
            if key not in instance:
                errors.append(f"{where}: missing '{key}'")
        for key, sub in schema.get("properties", {}).items():
            if key in instance:
                errors += validate(instance[key], sub, f"{where}.{key}")
    if isinstance(instance, list) and "items" in schema:
        for i, item in enumerate(instance):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors
