"""Unified diffs of generated kernel sources, each hunk labelled with the descriptor
feature that drove it.

How a line's origin is known: the source is rendered a second time through a Jinja
environment whose loader marks, in the template *text*, (a) the body of every
``{% if ... arch.has("X") ... %}`` / ``elif`` / ``else`` branch and (b) the whole of
every included file, with marker comment lines. The marked render is split into
plain lines plus, for each line, the stack of regions it sits in; the markers are
dropped and the result must equal the normal render line for line (checked: when a
template defeats the marking, the diff is still shown, with the hunks unlabelled and
a note saying why). A changed line is labelled with the innermost feature branch it
came from, else with the features of the primitive folder it was included from
(porter.planning.plan's folder -> feature table), else "template" (configuration such as tile
shapes, which no single feature decides). This follows the code that produced a line
rather than guessing from its text, and it needs nothing from template authors
beyond the ``arch.has`` tests they already write.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from dataclasses import dataclass, field

_MARK = "@@porter-origin"
_BEGIN = re.compile(rf"^\s*//{_MARK} begin (\S+)\s*$")
_END = re.compile(rf"^\s*//{_MARK} end\s*$")
_TAG = re.compile(r"\{%-?\s*(if|elif|else|endif)\b(.*?)-?%\}", re.S)
_HAS = re.compile(r"""\bhas\(\s*["'](\w+)["']\s*\)""")


def mark_template(text: str, name: str = "") -> str:
    """``text`` with marker lines around the branches of feature conditionals. Every
    branch of a chain whose ``if``/``elif`` tests ``arch.has("X")`` is labelled X (the
    ``else`` too: it is the code for archs without X). Tags that share their line with
    other text (inline conditionals) are left unmarked."""
    out, pos = [], 0
    stack: list[dict] = []          # per open if: chain features, region open?

    def bounds(start, end):
        ls = text.rfind("\n", 0, start) + 1
        le = text.find("\n", end)
        le = len(text) if le < 0 else le
        return ls, le, text[ls:start].strip() == "" and text[end:le].strip() == ""

    def open_region(m, le, feats):
        nonlocal pos
        out.append(text[pos:m.start()] + m.group(0) + text[m.end():le + 1]
                   + f"//{_MARK} begin feature:{'+'.join(feats)}\n")
        pos = le + 1

    for m in _TAG.finditer(text):
        tag, expr = m.group(1), m.group(2)
        ls, le, alone = bounds(m.start(), m.end())
        if tag == "if":
            feats = _HAS.findall(expr)
            entry = {"feats": feats, "open": False}
            stack.append(entry)
            if alone and feats:
                open_region(m, le, feats)
                entry["open"] = True
            continue
        if not stack:
            continue
        entry = stack[-1]
        if entry["open"]:
            if alone:
                out.append(text[pos:ls] + f"//{_MARK} end\n")
                pos = ls
            entry["open"] = False
        if tag == "endif":
            stack.pop()
            continue
        feats = _HAS.findall(expr) if tag == "elif" else []
        entry["feats"] = entry["feats"] + [f for f in feats if f not in entry["feats"]]
        if alone and entry["feats"]:
            open_region(m, le, feats or entry["feats"])
            entry["open"] = True
    out.append(text[pos:])
    return "".join(out)


def _marked_environment(env):
    """A copy of ``env`` whose loader marks feature branches and included files."""
    import jinja2

    inner = env.loader

    class MarkingLoader(jinja2.BaseLoader):
        def get_source(self, environment, template):
            source, filename, uptodate = inner.get_source(environment, template)
            body = mark_template(source, template)
            if not body.endswith("\n"):
                body += "\n"
            wrapped = f"//{_MARK} begin include:{template}\n{body}//{_MARK} end\n"
            return wrapped, filename, uptodate

    marked = env.overlay(loader=MarkingLoader(), cache_size=0)
    return marked


@contextlib.contextmanager
def marked_rendering():
    """While active, porter.compile.render.render uses the marking environment."""
    from porter.compile import render as render_mod

    original = render_mod.environment
    env = _marked_environment(original())
    render_mod.environment = lambda: env
    try:
        yield
    finally:
        render_mod.environment = original


def split_marked(text: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """Plain lines and, per line, the stack of origins (outermost first)."""
    lines, origins, stack = [], [], []
    for line in text.splitlines():
        b = _BEGIN.match(line)
        if b:
            stack.append(b.group(1))
            continue
        if _END.match(line):
            if stack:
                stack.pop()
            continue
        lines.append(line)
        origins.append(tuple(stack))
    return lines, origins


def folder_features(origin: str) -> list[str]:
    """Features an included file stands for: its primitive folder's (tmem/ -> tmem) or the
    feature its name starts with (gemm/tcgen05.cu.j2, the mainloop chosen for tcgen05)."""
    from porter.planning.plan import file_needs

    path = origin.split(":", 1)[1]
    return list(file_needs(path)) if "/" in path else []


def label_of(origin: tuple[str, ...]) -> str:
    """The innermost region that names a feature: a feature branch, or an included
    primitive whose folder needs features; "template" when none does."""
    for o in reversed(origin):
        if o.startswith("feature:"):
            return o.split(":", 1)[1]
        if o.startswith("include:"):
            feats = folder_features(o)
            if feats:
                return "+".join(feats) + f" ({o.split(':', 1)[1]})"
    return "template"


@dataclass
class Source:
    text: str
    origins: list[tuple[str, ...]] | None   # None: marking failed; see note
    note: str = ""

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def render_with_origins(family_module, spec, arch) -> Source:
    """The normal render plus each line's origin (checked against the normal render)."""
    plain = family_module.render(spec, arch)
    try:
        with marked_rendering():
            marked = family_module.render(spec, arch)
    except Exception as exc:
        return Source(plain, None, f"origin tracking failed ({type(exc).__name__}: {exc})")
    lines, origins = split_marked(marked)
    if lines != plain.splitlines():
        return Source(plain, None, "origin tracking changed the rendered text; hunks left unlabelled")
    return Source(plain, origins)


@dataclass
class Hunk:
    header: str
    lines: list[str]
    labels: list[str] = field(default_factory=list)
    # Each line's own label ("" for context lines), aligned with ``lines``.
    line_labels: list[str] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"header": self.header, "labels": self.labels, "lines": self.lines}


def labelled_diff(a: Source, b: Source, a_name: str, b_name: str, context: int = 3) -> list[Hunk]:
    """Unified-diff hunks of a -> b; each carries the features of its changed lines."""
    al, bl = a.lines, b.lines
    hunks = []
    matcher = difflib.SequenceMatcher(None, al, bl, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        header = f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@"
        lines, labels, line_labels = [], [], []
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                lines += [" " + l for l in al[x1:x2]]
                line_labels += [""] * (x2 - x1)
                continue
            for i in range(x1, x2):
                lines.append("-" + al[i])
                labels.append(label_of(a.origins[i]) if a.origins else "unknown")
                line_labels.append(labels[-1])
            for j in range(y1, y2):
                lines.append("+" + bl[j])
                labels.append(label_of(b.origins[j]) if b.origins else "unknown")
                line_labels.append(labels[-1])
        uniq = []
        for lab in labels:
            if lab not in uniq:
                uniq.append(lab)
        hunks.append(Hunk(header, lines, uniq, line_labels))
    return hunks


def format_hunks(hunks: list[Hunk], a_name: str, b_name: str) -> str:
    out = [f"--- {a_name}", f"+++ {b_name}"]
    for h in hunks:
        out.append(f"{h.header}  [feature: {', '.join(h.labels)}]")
        out += h.lines
    return "\n".join(out)


# Descriptor figures a configuration line may carry (tile budgets, grids, launch bounds).
_FIGURES = (("sm_count", "sm_count"), ("smem_per_block_bytes", "smem_per_block"),
            ("smem_per_sm_bytes", "smem_per_sm"), ("max_threads_per_sm", "max_threads_per_sm"),
            ("max_regs_per_thread", "max_regs_per_thread"), ("l2_bytes", "l2"), ("tmem_bytes", "tmem"))


def label_configuration(hunks: list[Hunk], a, b) -> None:
    """Name what drove the "template" (configuration) lines of each hunk, in place.

    Such lines come from no feature branch: they print values the family chose from the
    descriptor (the mainloop, the grid, the shared-memory budget). A changed feature
    drove them when its name leaves with the removed lines or arrives with the added ones
    (``mainloop: tcgen05`` -> ``mainloop: mma_sync``); a figure did when its value on
    ``a`` is in the removed lines and its value on ``b`` in the added ones (``grid =
    min(#tiles, 148)`` -> ``170``). What neither explains stays "template".
    """
    from porter.descriptor.arch import FEATURES

    fa, fb = set(getattr(a, "features", ())), set(getattr(b, "features", ()))
    changed = [f for f in FEATURES if (f in fa) != (f in fb)]
    for hunk in hunks:
        if "template" not in hunk.labels:
            continue
        # Only the configuration lines themselves: a primitive's text may name a feature too.
        own = [l for l, lab in zip(hunk.lines, hunk.line_labels or ["template"] * len(hunk.lines))
               if lab == "template"]
        removed = "\n".join(l[1:] for l in own if l.startswith("-"))
        added = "\n".join(l[1:] for l in own if l.startswith("+"))
        drivers = []
        for feat in changed:
            word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(feat)}(?![A-Za-z0-9_])", re.I)
            if word.search(removed if feat in fa else added):
                drivers.append(f"{feat} ({'lost' if feat in fa else 'gained'})")
        for attr, name in _FIGURES:
            va, vb = getattr(a, attr, None), getattr(b, attr, None)
            if not isinstance(va, int) or not isinstance(vb, int) or va == vb:
                continue
            num = lambda v: re.compile(rf"(?<![0-9.]){v}(?![0-9.])")
            if num(va).search(removed) and num(vb).search(added):
                drivers.append(f"{name} ({va} -> {vb})")
        if drivers:
            at = hunk.labels.index("template")
            rest = [l for l in hunk.labels if l != "template" and l not in drivers]
            hunk.labels = rest[:at] + drivers + rest[at:]
