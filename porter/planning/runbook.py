"""Runbooks: the bring-up as data (runbooks/*.yaml) loaded into a checked stage DAG.

A runbook lists stages; each has an ``id``, a ``title``, the ``day`` (1..5) of the
one-week plan it belongs to, the stages it ``needs``, what it ``proves`` and the
``kind`` of stage function that runs it (see ``STAGE_KINDS``). ``kernels`` stages
also name their ``family`` ("*" = every registered family no other stage names).
Any problem ends in one PorterError line naming the file and the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from porter.errors import PorterError

# kind -> what the stage function does (porter.pipeline.stages implements each).
STAGE_KINDS = {
    "descriptor-check": "load the arch descriptor and check its internal consistency",
    "probes": "compile one probe per claimed feature and read its SASS",
    "plan": "feature diff against the base arch: primitives and kernels that must change",
    "baseline": "the base arch's kernels compiled for the target (the 'before' picture)",
    "primitives": "the primitive headers the target's features need compile for the target",
    "kernels": "every variant of a kernel family rendered, compiled and SASS/limit-checked",
    "numerics": "each variant's arithmetic against the fp64 reference on the CPU",
    "emulation": "each kernel's PTX executed in porter's simulator against the fp64 reference (not on a GPU)",
    "prediction": "each kernel's speed per product from porter's timing model (predicted, not measured)",
    "device": "kernels run on a GPU of the target arch (when one is present)",
    "bench": "kernels timed on a GPU against the roofline (when one is present)",
    "report": "report.md, report.json and report.html from every stage's results",
}
REQUIRED_FIELDS = ("id", "title", "day", "needs", "proves", "kind")


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    day: int
    needs: tuple[str, ...]
    proves: str
    kind: str
    family: str | None = None      # kernels stages: the family, or "*"

    def to_dict(self) -> dict:
        d = {"id": self.id, "title": self.title, "day": self.day, "needs": list(self.needs),
             "proves": self.proves, "kind": self.kind}
        if self.family is not None:
            d["family"] = self.family
        return d


@dataclass
class Runbook:
    name: str
    path: Path
    summary: str
    base: str | None               # the arch the bring-up starts from, if the runbook names one
    stages: dict[str, Stage] = field(default_factory=dict)
    text: str = ""

    def graph(self):
        """The stages as a networkx DiGraph (edge need -> stage), nodes carry ``stage``."""
        import networkx as nx

        g = nx.DiGraph()
        for stage in self.stages.values():
            g.add_node(stage.id, stage=stage)
        for stage in self.stages.values():
            for need in stage.needs:
                g.add_edge(need, stage.id)
        return g

    def generations(self) -> list[list[str]]:
        import networkx as nx

        return [sorted(gen) for gen in nx.topological_generations(self.graph())]

    def subset(self, keep: set[str]) -> "Runbook":
        """Only the stages in ``keep`` and everything they need."""
        import networkx as nx

        g = self.graph()
        wanted = set(keep)
        for sid in keep:
            wanted |= nx.ancestors(g, sid)
        stages = {sid: s for sid, s in self.stages.items() if sid in wanted}
        return Runbook(self.name, self.path, self.summary, self.base, stages, self.text)


def resolve_runbook_path(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if "/" in text or text.endswith((".yaml", ".yml")):
        path = Path(text)
    else:
        from porter import paths

        path = paths.data_dir("runbooks") / f"{text}.yaml"
    if not path.is_file():
        raise PorterError(f"{path}: runbook not found; give a path or one of: {', '.join(list_runbooks())}")
    return path


def list_runbooks() -> list[str]:
    from porter import paths

    try:
        return sorted(p.stem for p in paths.data_dir("runbooks").glob("*.yaml"))
    except FileNotFoundError:
        return []


def load_runbook(name_or_path: str | Path) -> Runbook:
    path = resolve_runbook_path(name_or_path)
    return runbook_from_text(path.read_text(encoding="utf-8"), path)


def runbook_from_text(text: str, path: str | Path = "<text>") -> Runbook:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise PorterError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}); fix the syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list) or not data["stages"]:
        raise PorterError(f"{path}: a runbook is a mapping with a non-empty 'stages' list")
    base = data.get("base")
    if base is not None and not isinstance(base, str):
        raise PorterError(f"{path}: 'base' must be an arch name, got {base!r}")
    book = Runbook(str(data.get("name") or path.stem), path, str(data.get("summary", "")), base, {}, text)
    for index, raw in enumerate(data["stages"]):
        stage = _parse_stage(raw, index, path)
        if stage.id in book.stages:
            raise PorterError(f"{path}: stage '{stage.id}': duplicate id (also stage "
                              f"{list(book.stages).index(stage.id) + 1}); give each stage its own id")
        book.stages[stage.id] = stage
    for stage in book.stages.values():
        for need in stage.needs:
            if need not in book.stages:
                import difflib

                close = difflib.get_close_matches(need, list(book.stages), n=1)
                hint = f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(book.stages)
                raise PorterError(f"{path}: stage '{stage.id}': needs unknown stage '{need}'; {hint}")
    _reject_cycles(book, path)
    return book


def _parse_stage(raw, index: int, path: Path) -> Stage:
    if not isinstance(raw, dict):
        raise PorterError(f"{path}: stage {index + 1}: expected a mapping with {', '.join(REQUIRED_FIELDS)}")
    label = f"stage '{raw['id']}'" if isinstance(raw.get("id"), str) else f"stage {index + 1}"
    missing = [f for f in REQUIRED_FIELDS if f not in raw]
    if missing:
        raise PorterError(f"{path}: {label}: missing field{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)}")
    unknown = set(raw) - set(REQUIRED_FIELDS) - {"family"}
    if unknown:
        raise PorterError(f"{path}: {label}: unknown field(s) {', '.join(sorted(unknown))}; "
                          f"allowed: {', '.join(REQUIRED_FIELDS)}, family")
    if not isinstance(raw["id"], str) or not raw["id"]:
        raise PorterError(f"{path}: stage {index + 1}: 'id' must be a non-empty string")
    if raw["kind"] not in STAGE_KINDS:
        import difflib

        close = difflib.get_close_matches(str(raw["kind"]), list(STAGE_KINDS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(STAGE_KINDS)
        raise PorterError(f"{path}: {label}: unknown stage kind '{raw['kind']}'; {hint}")
    if not isinstance(raw["day"], int) or not 1 <= raw["day"] <= 5:
        raise PorterError(f"{path}: {label}: 'day' must be 1..5 (a day of the one-week plan), got {raw['day']!r}")
    needs = raw["needs"] or []
    if isinstance(needs, str):
        needs = [needs]
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise PorterError(f"{path}: {label}: 'needs' must be a list of stage ids")
    family = raw.get("family")
    if raw["kind"] == "kernels" and not isinstance(family, str):
        raise PorterError(f"{path}: {label}: a kernels stage needs 'family' (gemm, attention, megakernel or '*')")
    if raw["kind"] != "kernels" and family is not None:
        raise PorterError(f"{path}: {label}: 'family' only applies to kernels stages")
    return Stage(raw["id"], str(raw["title"]), raw["day"], tuple(needs), str(raw["proves"]),
                 raw["kind"], family)


def _reject_cycles(book: Runbook, path: Path) -> None:
    import networkx as nx

    try:
        cycle = nx.find_cycle(book.graph())
    except nx.NetworkXNoCycle:
        return
    ids = [edge[0] for edge in cycle] + [cycle[0][0]]
    raise PorterError(f"{path}: stage '{ids[0]}': dependency cycle {' -> '.join(ids)}; "
                      "remove one of these 'needs'")
