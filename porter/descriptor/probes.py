"""Feature probes: let the compiler judge what an arch descriptor claims.

Each ``kernels_src/probes/*.cu`` is a tiny real kernel that uses one descriptor
feature and declares, in its leading comment block::

    // probe: tcgen05_f16           (the file's stem)
    // feature: tcgen05             (the feature it proves; decides whether it must compile)
    // also-needs: tmem             (prerequisites it uses too)
    // kind: f16                    (the descriptor's MMA kind it issues, if any)
    // generation: mma_sync         (the tensor-core generation whose MMA it issues; a probe
                                    with a kind that needs tcgen05 or wgmma implies it)
    // shows: kind:f16, op:mma_commit   (descriptor SASS spellings that must all appear)
    // proves: / note: / seen: / denied:   (free text; indented '//   ' lines continue it)

A probe spells no SASS itself: each ``shows:`` entry names a spelling in the descriptor
(``Arch.sass_patterns``): a feature's ``sass_signatures``, an MMA kind's ``sass``
(``kind:f16``), an instruction of ``sass_ops`` (``op:tmem_copy``), optionally with
``sass_modifiers`` after it (``kind:f16/pair``, ``kind:mxf4nvf4/scale_vec_4x``). So a target
whose disassembly spells a feature differently is checked by editing its YAML alone.

``check_arch(arch)`` compiles every probe for ``arch.target`` and compares with the
descriptor: a claimed feature must compile and show what the probe names; a denied one
must be rejected by the compiler *because of the target*. Every claimed feature needs
at least one probe of it that is confirmed on the target: a claim that no probe can
confirm (none exists, or each one is rejected or not judged) is a contradiction,
"claimed but unproven". Per feature, the
descriptor's own ``sass_signatures`` must show up in at least one compiled probe
that uses the feature (a conversion probe for fp8 shows F2FP, not the QGMMA the
descriptor lists, so the signature is judged over all probes using fp8).

A probe that issues another tensor-core generation's MMA than the arch's (an mma.sync
fp8 probe on a tcgen05 arch, a tcgen05 block-scale probe on an mma.sync arch) neither
proves nor refutes the arch's claim of its feature: it is "not judged" there, and a
probe of the arch's own generation must prove the feature.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from porter import paths
from porter.compile import sass as sasslib
from porter.descriptor.arch import FEATURES
from porter.descriptor.arch_schema import GENERATIONS
from porter.errors import CompileError, PorterError
from porter.compile.toolchain import compile_cuda

_HEADER = re.compile(r"^//\s?(?P<key>[a-z][a-z-]*):\s*(?P<value>.*)$")
_CONTINUATION = re.compile(r"^//\s{2,}(?P<text>\S.*)$")
_LIST_KEYS = ("shows",)
# One spelling a probe names: FEATURE, kind:KIND or op:NAME, then /MODIFIER or /!MODIFIER parts.
_SHOWS_REF = re.compile(r"(?:kind:|op:)?[a-z][a-z0-9_]*(?:/!?[a-z][a-z0-9_]*)*")
_TEXT_KEYS = ("proves", "note", "seen", "denied")
NOT_JUDGED = "not judged"   # a probe whose prerequisites the arch denies proves nothing either way
# Tensor-core generations and their accumulator storage: the routes a probe takes to a capability.
_MMA_MACHINERY = {"wgmma", "tcgen05", "tmem"}
# Tensor-core generations the PTX ISA keeps on later targets beside their own MMA:
# warp-level mma.sync (sm_80+) still compiles on sm_90a, sm_100a and sm_120a.
_RETAINED_GENERATIONS = {"mma_sync"}
_KNOWN_KEYS = ("probe", "feature", "also-needs", "kind", "generation", *_LIST_KEYS, *_TEXT_KEYS)
# A rejection counts as "the target lacks the feature" only when the compiler says so;
# a probe with a typo must not pass as a confirmed denial.
_TARGET_REJECTION = re.compile(r"not supported|unsupported|requires|not available", re.I)
# "/*0090*/   @!P0 UTCQMMA gdesc[UR4], ... ;" -> "UTCQMMA gdesc[UR4], ..."
_INSTR_TEXT = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:T|\d+)\s+)?(?P<text>[A-Z].*?)\s*;?\s*$")


@dataclass(frozen=True)
class Probe:
    name: str
    path: Path
    feature: str
    also_needs: tuple[str, ...]
    kind: str
    shows: tuple[str, ...]         # descriptor spellings (Arch.sass_patterns refs) it must show
    text: dict
    source: str = field(repr=False, default="")
    declared_generation: str = ""

    @property
    def needs(self) -> tuple[str, ...]:
        return (self.feature, *self.also_needs)

    @property
    def generation(self) -> str:
        """The tensor-core generation whose MMA this probe issues ("" if it issues none)."""
        if self.declared_generation or not self.kind:
            return self.declared_generation
        # An MMA probe needing tcgen05 or wgmma (generations that are feature names) issues
        # that generation's MMA; a TMEM-only probe (no kind) issues none.
        return next((gen for gen in ("tcgen05", "wgmma") if gen in self.needs), "")


class _Judged:
    """A result with a verdict: anything but a contradiction is agreement."""

    verdict: str

    @property
    def ok(self) -> bool:
        return not self.verdict.startswith("contradicted")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ProbeResult(_Judged):
    probe: str
    feature: str
    needs: list[str]
    target: str
    claimed: bool                  # the descriptor claims the probe's feature
    denied_prereqs: list[str]      # prerequisites the descriptor denies
    compiled: bool
    sass_found: dict               # shows ref -> matching opcodes / instruction texts
    sass_missing: list[str]
    signature_hits: dict           # needed feature -> descriptor patterns seen here
    verdict: str
    error: str = ""
    seconds: float = 0.0


@dataclass
class FeatureResult(_Judged):
    feature: str
    claimed: bool
    probes: list[str]              # probes whose feature this is
    signature: list[str]           # the descriptor's sass_signatures for it
    signature_seen_in: list[str]   # compiled probes using the feature that show it
    verdict: str


@dataclass
class ArchCheck:
    arch: str
    target: str
    probes: list[ProbeResult]
    features: list[FeatureResult]
    kinds_without_probe: list[str]
    seconds: float
    compile_seconds: float = 0.0       # NVRTC (or cache reads), all probes in order
    disassemble_seconds: float = 0.0   # nvdisasm (or SASS cache reads), wall time of the pool

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.probes) and all(f.ok for f in self.features)

    @property
    def contradictions(self) -> list[str]:
        return ([f"{r.probe}: {r.verdict}" for r in self.probes if not r.ok]
                + [f"feature {f.feature}: {f.verdict}" for f in self.features if not f.ok])

    def to_dict(self) -> dict:
        return {"arch": self.arch, "target": self.target, "ok": self.ok, "seconds": round(self.seconds, 3),
                "compile_seconds": round(self.compile_seconds, 3),
                "disassemble_seconds": round(self.disassemble_seconds, 3),
                "probes": [r.to_dict() for r in self.probes],
                "features": [f.to_dict() for f in self.features],
                "kinds_without_probe": self.kinds_without_probe,
                "contradictions": self.contradictions}


# -- discovery ------------------------------------------------------------------------


def probes_dir() -> Path:
    return paths.data_dir("kernels_src") / "probes"


_LOCAL_INCLUDE = re.compile(r'^#include "(?P<name>[\w.-]+)"\s*$', re.M)


def _inline_local_includes(path: Path, source: str) -> str:
    """Replace ``#include "x.cuh"`` of a header beside the probe with its text, so the
    compiled source is self-contained and the compile cache key covers the header too."""
    def expand(match: re.Match) -> str:
        header = path.parent / match.group("name")
        if not header.is_file():
            raise PorterError(f"{path}: included file {match.group('name')!r} not found beside the probe")
        return f"// ---- {header.name} (inlined) ----\n{header.read_text(encoding='utf-8')}// ---- end {header.name} ----"
    return _LOCAL_INCLUDE.sub(expand, source)


def parse_probe(path: Path, source: str | None = None) -> Probe:
    """Read a probe's header block; a malformed header is a PorterError naming file:line."""
    source = path.read_text(encoding="utf-8") if source is None else source
    source = _inline_local_includes(path, source)
    values: dict[str, list[str]] = {}
    last_text_key = None
    for lineno, line in enumerate(source.splitlines(), 1):
        if not line.startswith("//"):
            break
        cont = _CONTINUATION.match(line)
        if cont and last_text_key:
            values[last_text_key][-1] += " " + cont.group("text").strip()
            continue
        head = _HEADER.match(line)
        if not head:
            if line.strip("/ "):
                raise PorterError(f"{path}:{lineno}: probe header line is not '// key: value': {line.strip()}")
            continue
        key, value = head.group("key"), head.group("value").strip()
        if key not in _KNOWN_KEYS:
            raise PorterError(f"{path}:{lineno}: unknown probe header key '{key}'; "
                              f"known: {', '.join(_KNOWN_KEYS)}")
        if key in _LIST_KEYS:
            refs = [v.strip() for v in value.split(",") if v.strip()]
            for ref in refs:
                if not _SHOWS_REF.fullmatch(ref):
                    raise PorterError(f"{path}:{lineno}: '// shows: {ref}' is not a descriptor spelling; write "
                                      "FEATURE, kind:KIND or op:NAME, optionally with /MODIFIER (SASS itself "
                                      "lives in arch/*.yaml)")
                base = ref.split("/")[0]
                if ":" not in base and base not in FEATURES:
                    raise PorterError(f"{path}:{lineno}: '// shows: {ref}': '{base}' is not a feature porter "
                                      f"knows; known: {', '.join(FEATURES)} (or kind:KIND, op:NAME)")
            values.setdefault(key, []).extend(refs)
            last_text_key = None
            continue
        values.setdefault(key, []).append(value)
        last_text_key = key if key in _TEXT_KEYS else None

    def one(key: str, required: bool = True) -> str:
        got = values.get(key, [])
        if len(got) > 1 or (required and not got):
            raise PorterError(f"{path}: probe header needs exactly one '// {key}:' line, found {len(got)}")
        return got[0] if got else ""

    name = one("probe")
    if name != path.stem:
        raise PorterError(f"{path}: '// probe: {name}' must match the file name '{path.stem}'")
    needs = [one("feature")] + [f.strip() for v in values.get("also-needs", []) for f in v.split(",") if f.strip()]
    for feature in needs:
        if feature not in FEATURES:
            raise PorterError(f"{path}: feature '{feature}' is not one porter knows; known: {', '.join(FEATURES)}")
    if not values.get("shows"):
        raise PorterError(f"{path}: a probe must name at least one descriptor SASS spelling it shows "
                          "('// shows: kind:f16, op:mma_commit')")
    generation = one("generation", False)
    if generation and generation not in GENERATIONS:
        raise PorterError(f"{path}: generation '{generation}' is not one porter knows; known: {', '.join(GENERATIONS)}")
    return Probe(name=name, path=path, feature=needs[0], also_needs=tuple(needs[1:]), kind=one("kind", False),
                 shows=tuple(values["shows"]),
                 text={k: " ".join(values[k]) for k in _TEXT_KEYS if k in values}, source=source,
                 declared_generation=generation)


def discover(folder: Path | None = None) -> list[Probe]:
    folder = probes_dir() if folder is None else folder
    probes = [parse_probe(p) for p in sorted(folder.glob("*.cu"))]
    if not probes:
        raise PorterError(f"{folder}: no probe .cu files found")
    return probes


# -- one probe ----------------------------------------------------------------------------


def instruction_texts(sass_text: str) -> list[str]:
    out = []
    for line in sass_text.splitlines():
        m = _INSTR_TEXT.match(line)
        if m:
            out.append(m.group("text"))
    return out


def judge(probe: Probe, arch, compiled: bool, sass_text: str, error: str, seconds: float = 0.0) -> ProbeResult:
    """Compare one probe's compile outcome and SASS with what ``arch`` claims."""
    claimed = arch.has(probe.feature)
    denied_prereqs = [f for f in probe.also_needs if not arch.has(f)]
    own_generation = arch.tensor_core.generation
    # Another generation's MMA probe (a probe of the generation feature itself, like
    # wgmma_bf16, still judges that claim; but PTX keeps mma.sync on every target after
    # sm_80, so an mma.sync probe that compiles on a wgmma or tcgen05 arch says nothing
    # about that arch's own tensor core).
    foreign = probe.generation not in ("", own_generation) and (
        probe.generation != probe.feature or (compiled and probe.generation in _RETAINED_GENERATIONS))
    found: dict[str, list[str]] = {}
    missing: list[str] = []
    hits: dict[str, list[str]] = {}
    unspelled: list[str] = []
    if compiled:
        hist = sasslib.opcode_histogram(sass_text)
        texts = instruction_texts(sass_text)
        if not foreign:
            # Each named spelling is the descriptor's: regexes matched (re.match) against the
            # instruction texts, opcode first, so a spelling may reach into the operands
            # (block-scale TMEM or register operands). Another generation's probe is not
            # judged here, so the arch need not spell what it shows.
            for ref in probe.shows:
                try:
                    pats = arch.sass_patterns(ref)
                except PorterError as exc:
                    unspelled.append(f"{ref} ({exc})")
                    missing.append(ref)
                    continue
                regexes = [re.compile(p) for p in pats]
                # The opcode, or the whole instruction where the match reaches into operands.
                seen = sorted({t if m.end() > len(t.split()[0]) else t.split()[0]
                               for t in texts for r in regexes if (m := r.match(t))})[:3]
                if seen:
                    found[ref] = seen
                else:
                    missing.append(ref)
        for feature in probe.needs:
            pats = arch.sass_signatures.get(feature, ())
            seen = [p for p in pats if sasslib.count_matching(hist, p)]
            if pats:
                hits[feature] = seen
        if probe.kind and probe.kind in arch.tensor_core.kind_sass:
            pats = arch.tensor_core.kind_sass[probe.kind]
            if pats:
                hits[f"kind:{probe.kind}"] = [p for p in pats if sasslib.count_matching(hist, p)]

    if foreign and (compiled or (claimed and _TARGET_REJECTION.search(error))):
        # It proves its feature for its own generation only; a denied feature that the
        # compiler rejects still falls through to denied-confirmed, a broken probe to
        # a contradiction.
        verdict = (f"{NOT_JUDGED}: it issues {probe.generation} MMA and this arch's tensor core is "
                   f"{own_generation} (the compiler {'accepts' if compiled else 'rejects'} it for {arch.target})")
    elif claimed and compiled:
        if unspelled:
            verdict = f"contradicted: the descriptor does not spell what the probe shows: {'; '.join(unspelled)}"
        elif missing:
            pats = "; ".join(f"{ref} = {', '.join(arch.sass_patterns(ref))}" for ref in missing)
            verdict = f"contradicted: compiles but its SASS lacks the descriptor's {pats}"
        elif denied_prereqs:
            verdict = (f"contradicted: the compiler accepts it, yet the descriptor denies "
                       f"{', '.join(denied_prereqs)}, which it uses")
        elif probe.kind and probe.kind not in arch.tensor_core.kind_sass:
            verdict = f"contradicted: the compiler accepts MMA kind {probe.kind}, which the descriptor does not list"
        elif hits.get(f"kind:{probe.kind}") == []:
            pats = ", ".join(arch.tensor_core.kind_sass[probe.kind])
            verdict = f"contradicted: the descriptor's SASS for kind {probe.kind} ({pats}) is not in the probe"
        else:
            verdict = "confirmed"
    elif (claimed and denied_prereqs and probe.feature not in _MMA_MACHINERY
          and set(denied_prereqs) <= _MMA_MACHINERY and _TARGET_REJECTION.search(error)):
        # The probe reaches a capability (a format, block scales) through tensor-core
        # machinery this arch does not have (block scales via tcgen05 on an mma.sync
        # arch): the rejection says nothing about the capability, so the probe cannot
        # judge it here. Claiming the machinery itself while denying its partner (tcgen05
        # without tmem) stays a contradiction.
        verdict = (f"{NOT_JUDGED}: it also uses {', '.join(denied_prereqs)}, which the descriptor denies; "
                   f"{probe.feature} needs a probe that reaches it the way {arch.target} does")
    elif claimed:
        why = f" (the descriptor also denies {', '.join(denied_prereqs)})" if denied_prereqs else ""
        verdict = f"contradicted: descriptor claims {probe.feature} but the compiler rejects it{why}: {error}"
    elif compiled:
        verdict = f"contradicted: descriptor denies {probe.feature} but the compiler accepts it for {arch.target}"
    elif _TARGET_REJECTION.search(error):
        verdict = "denied-confirmed"
    else:
        verdict = f"contradicted: rejected for a reason other than the target (a broken probe?): {error}"
    return ProbeResult(probe=probe.name, feature=probe.feature, needs=list(probe.needs), target=arch.target,
                       claimed=claimed, denied_prereqs=denied_prereqs, compiled=compiled,
                       sass_found=found, sass_missing=missing, signature_hits=hits, verdict=verdict,
                       error=error, seconds=round(seconds, 3))


def _feature_results(arch, probes: list[Probe], results: list[ProbeResult]) -> list[FeatureResult]:
    by_name = {r.probe: r for r in results}
    out = []
    for feature in FEATURES:
        every_owner = [p.name for p in probes if p.feature == feature]
        owners = [name for name in every_owner if not by_name[name].verdict.startswith(NOT_JUDGED)]
        users = [p.name for p in probes if feature in p.needs and by_name[p.name].compiled
                 and not by_name[p.name].verdict.startswith(NOT_JUDGED)]
        pats = list(arch.sass_signatures.get(feature, ()))
        seen_in = [u for u in users if by_name[u].signature_hits.get(feature)]
        claimed = arch.has(feature)
        bad = [o for o in owners if not by_name[o].ok]
        if claimed and not any(by_name[o].verdict == "confirmed" for o in owners):
            # A claim needs positive evidence on this target: with no probe, or only probes
            # that cannot judge it here (they reach it through machinery the descriptor
            # denies), nothing shows the feature compiles, so the claim is unproven.
            if every_owner:
                why = "; ".join(f"{o}: {by_name[o].verdict}" for o in every_owner)
            else:
                why = "no probe in kernels_src/probes declares it as its feature"
            verdict = (f"contradicted: claimed but unproven: no probe for {feature} compiles and shows its "
                       f"SASS on {arch.target} ({why})")
        elif not owners:
            # Probes that exist but cannot judge it here are not "no probe".
            verdict = f"{NOT_JUDGED} on {arch.target}" if every_owner else "no probe"
        elif bad:
            verdict = f"contradicted: probe {', '.join(bad)} disagrees with the descriptor"
        elif claimed and pats and not seen_in:
            verdict = (f"contradicted: the descriptor's SASS signature ({', '.join(pats)}) appears in no "
                       f"compiled probe that uses {feature} ({', '.join(users) or 'none'})")
        else:
            verdict = "confirmed" if claimed else "denied-confirmed"
        out.append(FeatureResult(feature, claimed, owners, pats, seen_in, verdict))
    return out


def check_arch(arch, probes: list[Probe] | None = None, jobs: int | None = None) -> ArchCheck:
    """Compile every probe for ``arch.target`` and judge it against the descriptor."""
    started = time.perf_counter()
    probes = discover() if probes is None else probes
    from porter.pipeline.context import cap_jobs

    jobs = cap_jobs(jobs) if jobs else min(len(probes), os.cpu_count() or 1)   # threads that each run nvdisasm

    # NVRTC runs under the GIL (threads measured no faster), so compile in order;
    # nvdisasm (~0.7-1 s per cubin, the dominant cold cost) runs in threads, whose
    # subprocesses overlap across cores, and its text is cached by compile key.
    compiled: list[tuple] = []
    for probe in probes:
        t0 = time.perf_counter()
        try:
            result, error = compile_cuda(probe.source, arch.target, probe.path.name), ""
        except CompileError as exc:
            result, error = None, str(exc)
        compiled.append((result, error, time.perf_counter() - t0))

    def disassemble(item) -> tuple[str, float]:
        t0 = time.perf_counter()
        text = sasslib.disassemble(item[0].cubin) if item[0] is not None else ""
        return text, time.perf_counter() - t0

    compiled_at = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        texts = list(pool.map(disassemble, compiled))
    disassembled_at = time.perf_counter()
    results = [judge(p, arch, result is not None, text, error, compile_s + disasm_s)
               for p, (result, error, compile_s), (text, disasm_s) in zip(probes, compiled, texts)]
    # Kind names repeat across generations: only a probe of the arch's own generation probes one.
    probed_kinds = {p.kind for p in probes if p.kind and p.generation == arch.tensor_core.generation}
    kinds_without = [k for k in arch.tensor_core.mma_shapes if k not in probed_kinds]
    return ArchCheck(arch=arch.name, target=arch.target, probes=results,
                     features=_feature_results(arch, probes, results),
                     kinds_without_probe=kinds_without, seconds=time.perf_counter() - started,
                     compile_seconds=compiled_at - started, disassemble_seconds=disassembled_at - compiled_at)

