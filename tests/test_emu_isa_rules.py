"""Every error of the simulator that enforces a PTX ISA rule names the section that states it
(issue 18 item 4): the walk below finds each ``CheckFailed(...)`` and ``EmuError(...)`` raise
site, each ``Unsupported`` whose message invokes the ISA, and each ``launch.warn(...)`` site in
porter/emu, and checks that porter.emu.isa_rules covers it (a plain error that enforces no ISA
rule names what states it instead, in ``isa_rules.NOT_ISA``)."""

import ast
from pathlib import Path

import numpy as np

from porter.emu import isa_rules
from porter.emu.errors import CheckFailed

EMU = Path(__file__).resolve().parents[1] / "porter" / "emu"

# raise sites whose message is another EmuError's (already cited where it was raised)
PASS_THROUGH = {
    ("ops/mma_sync.py", "{exc}"): "re-raises a unit's EmuError as a CheckFailed",
    ("ops/mma_sync.py", "{where}: {exc}"): "re-raises a unit's EmuError with the instruction's place",
    ("ops/tcgen05.py", "{cta.launch.prog.file}: {exc} (missing tcgen05.dealloc?)"): "TMEM's exit check, cited there",
}


def _template(node) -> str | None:
    """The message's literal text, each interpolated value as \\x00 (None: not a literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "\x00" for v in node.values)
    if isinstance(node, ast.Call) and node.args:      # self._at(f"..."), a message helper
        return _template(node.args[0])
    if isinstance(node, ast.BinOp):                   # f"..." + self._nearest(addr)
        left, right = _template(node.left), _template(node.right)
        if left is not None or right is not None:
            return (left or "\x00") + (right or "\x00")
    return None


def _sites(kind: str):
    for path in sorted(EMU.rglob("*.py")):
        src = path.read_text()
        for n in ast.walk(ast.parse(src)):
            if not isinstance(n, ast.Call) or not n.args:
                continue
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == kind:
                yield path.relative_to(EMU).as_posix(), n.lineno, n.args[0], ast.get_source_segment(src, n.args[0])


def _helper_messages():
    """Messages built by a helper method (raise CheckFailed(self._diverged_collective(w)))."""
    src = (EMU / "machine.py").read_text()
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.FunctionDef) and n.name == "_diverged_collective":
            return ["".join(_template(r.value) or "" for r in ast.walk(n) if isinstance(r, ast.Return))]
    raise AssertionError("machine.py has no _diverged_collective")


def _poison_reasons() -> list[str]:
    """Every reason a register is poisoned with (w.poisoned[i] = ... or a local named why)."""
    out = []
    for path in sorted(EMU.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                t = n.targets[0]
                poisoned = isinstance(t, ast.Subscript) and getattr(t.value, "attr", None) == "poisoned"
                if (poisoned or getattr(t, "id", None) == "why") and _template(n.value) is not None:
                    out.append(_template(n.value))
    assert len(out) >= 1
    return out


def _warn_only_poison_reasons() -> list[str]:
    """Every reason built by a ``warn_only`` poison class (a str subclass; Warp.poison_read
    warns on it instead of raising): ``_UnwaitedLd(f"...")``."""
    out = []
    for path in sorted(EMU.rglob("*.py")):
        tree = ast.parse(path.read_text())
        classes = {c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                   and any(isinstance(b, ast.Assign) and any(getattr(t, "id", None) == "warn_only" for t in b.targets)
                           for b in c.body)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) in classes and n.args:
                out.append(_template(n.args[0]))
    assert out
    return out


def test_every_warn_only_poison_has_a_listed_reason_and_no_isa_rule():
    for reason in _warn_only_poison_reasons():
        assert reason is not None
        assert isa_rules.warning_reason(reason) is not None, reason
        assert isa_rules.cite(reason.replace("\x00", "")) is None, reason


def test_every_checker_error_names_its_isa_section():
    sites = list(_sites("CheckFailed"))
    assert len(sites) > 80                      # the walk finds the checkers (not an empty pass)
    missing = []
    for file, line, arg, seg in sites:
        text = _template(arg)
        if "self.poisoned[i]" in seg:            # a poisoned register: the reason its poison names
            for reason in _poison_reasons():
                assert isa_rules.cite(reason.replace("\x00", "")) is not None, f"poison reason {reason!r}"
            continue
        if text is None:
            assert "_diverged_collective" in seg, f"{file}:{line}: a message the walk cannot read: {seg}"
            text = _helper_messages()[0]
        plain = text.replace("\x00", "")
        key = seg.strip().lstrip("f").strip('"')
        if (file, key) in PASS_THROUGH:
            continue
        if "PTX ISA" in text or "ISA Table" in text:
            continue
        if isa_rules.cite(text) is None and isa_rules.cite(plain) is None:
            missing.append(f"{file}:{line}: {text!r}")
    assert not missing, "checker errors with no PTX ISA section:\n" + "\n".join(missing)


# plain-error sites whose rule-naming text is interpolated: (file, a piece of the site's source)
# -> a message of the shape the site builds
HELPER_MESSAGES = {
    ("units/tcgen05.py", 'f"{where}: {field}: {why}"'):
        "tcgen05.mma.cta_group::1.kind::f16 idesc 0x00000000: dtype (bits 4-5): 3 is not a D type",
    ("units/tmem.py", "needs {('.' + needs) if needs else 'no multicast qualifier'}"):
        "tcgen05.cp.cta_group::1.4x256b [0x0]: .4x256b needs no multicast qualifier",
}


def _helper_message(file: str, seg: str) -> str | None:
    return next((m for (f, piece), m in HELPER_MESSAGES.items() if f == file and piece in seg), None)


def test_every_plain_emu_error_names_its_isa_section_or_what_states_it():
    sites = list(_sites("EmuError"))
    assert len(sites) > 80                      # the walk finds the units' errors
    missing = []
    for file, line, arg, seg in sites:
        text = _template(arg)
        assert text is not None, f"{file}:{line}: a message the walk cannot read: {seg}"
        if _helper_message(file, seg) is not None:
            text = _helper_message(file, seg)
        assert text.replace("\x00", "").strip(" :"), f"{file}:{line}: a message built elsewhere: {seg}"
        plain = text.replace("\x00", "")
        if "PTX ISA" in text:
            continue
        cited = isa_rules.cite_plain(text) or isa_rules.cite_plain(plain)
        reason = isa_rules.not_isa_reason(text) or isa_rules.not_isa_reason(plain)
        if cited is None and reason is None:
            missing.append(f"{file}:{line}: {text!r}")
        assert not (cited and reason), f"{file}:{line}: both an ISA rule and not one: {text!r}"
    assert not missing, "plain errors neither citing a PTX ISA section nor naming what states them:\n" + \
        "\n".join(missing)


def test_every_unsupported_form_that_invokes_the_isa_cites_it():
    sites = [s for kind in ("unsupported", "Unsupported") for s in _sites(kind)]
    assert len(sites) > 50
    invoking = [(f, ln, _template(a)) for f, ln, a, _ in sites if _template(a) and "ISA" in _template(a)]
    assert len(invoking) >= 4
    for file, line, text in invoking:
        if "ISA Table" in text or "ISA Figure" in text or "PTX ISA" in text:
            continue
        assert isa_rules.cite_plain(text.replace("\x00", "")) is not None, f"{file}:{line}: {text!r}"


def test_plain_errors_carry_their_section_and_subset_limits_do_not():
    from porter.emu.errors import Deadlock, EmuError, Unsupported

    e = EmuError("tmem: tcgen05.alloc: nCols must be a power of 2 in [32, 512]")
    assert e.args[0].endswith('[PTX ISA 9.7.16.7.1 "tcgen05.alloc / tcgen05.dealloc / '
                              'tcgen05.relinquish_alloc_permit"]'), str(e)
    u = Unsupported("k.ptx:3: PTX form `cvt.rz.e4m3x2.f32` (the ISA requires .rn.satfinite for f32 -> FP8 pairs) "
                    "is outside the simulator's subset")
    assert "[PTX ISA 9.7.9 \"cvt\"" in str(u)
    plain = Unsupported("k.ptx:3: PTX form `tcgen05.cp.cta_group::1.4x256b` (a lane offset) is outside the subset")
    assert "PTX ISA" not in str(plain)
    assert "PTX ISA" not in str(Deadlock("deadlock: every live warp is parked (mbarrier at 0x10, tx-count 4)"))
    assert "PTX ISA" not in str(EmuError("launch: block (2048, 1, 1) has 2048 threads; at most 1024"))


def test_every_citation_names_the_ptx_isa():
    for fragment, section in isa_rules.RULES + isa_rules.PLAIN_RULES:
        assert fragment and section.startswith("PTX ISA "), (fragment, section)
    for fragment, reason in isa_rules.NOT_ISA:
        assert fragment and "PTX ISA" not in reason, (fragment, reason)
    for fragment, reason in isa_rules.WARNINGS:
        assert fragment and "PTX ISA" in reason, (fragment, reason)


def _warn_once_sites():
    """``launch.warn_once(key, message)`` calls: the message (a string or a lambda's body)."""
    for path in sorted(EMU.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "warn_once" and len(n.args) == 2:
                msg = n.args[1].body if isinstance(n.args[1], ast.Lambda) else n.args[1]
                yield path.relative_to(EMU).as_posix(), n.lineno, msg, None


def test_every_warning_site_has_a_listed_reason():
    sites = [s for s in _sites("warn") if s[0] != "machine.py" or "message" not in s[3]]
    once = [s for s in _warn_once_sites() if s[0] != "machine.py"]   # (relaxed_error: its own message)
    assert len(sites) >= 2 and len(once) >= 5
    for file, line, arg, _seg in sites + once:
        text = _template(arg)
        assert text is not None and isa_rules.warning_reason(text) is not None, f"{file}:{line}: {text!r}"
        assert isa_rules.cite(text) is None, f"{file}:{line}: a warning that is also an ISA rule"


def test_the_message_carries_its_section():
    exc = CheckFailed("t.ptx:3: mbarrier address 0x4 is not 8-byte aligned")
    assert str(exc).endswith('[PTX ISA 9.7.13.15.1 "Size and alignment of mbarrier object" (8 bytes, 8-byte aligned)]')
    already = CheckFailed('x (PTX ISA "mbarrier.arrive": ...)')
    assert str(already) == 'x (PTX ISA "mbarrier.arrive": ...)'


WGMMA_NO_WAIT = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .f32 %f<8>;
  .reg .b64 %rd<4>;
  .shared .align 1024 .b8 smem[4096];
  mov.u32 %r1, smem;
  cvt.u64.u32 %rd1, %r1;
  shr.u64 %rd1, %rd1, 4;
  and.b64 %rd1, %rd1, 16383;
  or.b64 %rd1, %rd1, 68720001024;
  mov.f32 %f0, 0f00000000;
  mov.f32 %f1, 0f00000000;
  mov.f32 %f2, 0f00000000;
  mov.f32 %f3, 0f00000000;
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd1, %rd1, 0, 1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  ret;
}
"""


def test_a_wgmma_never_waited_for_is_a_warning_not_an_error():
    from porter.emu.launch import launch

    res = launch(WGMMA_NO_WAIT, "k", 1, 128, [np.zeros(4, np.float32)], races=False)
    assert any("never waited for" in w and "a warning: the PTX ISA states no rule" in w
               for w in res.summary.warnings), res.summary.warnings
    assert res.warnings == list(res.summary.warnings)


def test_porter_emu_run_prints_the_warning_and_passes(capsys, tmp_path):
    from porter.cli import main

    ptx = tmp_path / "nowait.ptx"
    ptx.write_text(WGMMA_NO_WAIT)
    harness = tmp_path / "h.py"
    harness.write_text("import numpy as np\n\ndef arguments(emu):\n    return [np.zeros(4, np.float32)]\n")
    code = main(["emu", "run", str(ptx), "--entry", "k", "--block", "128", "--harness", str(harness)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "warnings (the run is not failed for them" in out and "never waited for" in out
    assert "diagnostics: none" in out


CLUSTER_INIT = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out) .reqnctapercluster 2, 1, 1
{
  .reg .b32 %r<8>;
  .reg .pred %p<6>;
  .shared .align 8 .b64 bar;
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %cluster_ctarank;
  mov.u32 %r2, bar;
  setp.eq.u32 %p1, %r0, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r2], 1;
FENCE
  barrier.cluster.arriveARRIVE;
  barrier.cluster.wait.aligned;
  setp.eq.u32 %p2, %r1, 1;
  and.pred %p3, %p1, %p2;
  mapa.shared::cluster.u32 %r3, %r2, 0;
  @%p3 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r3];
  @%p2 bra DONE;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r2], 0;
  @!%p4 bra WAIT;
DONE:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  ret;
}
"""


def _cluster_init(fence: str, arrive: str):
    from porter.emu.launch import launch

    ptx = CLUSTER_INIT.replace("FENCE", fence).replace("ARRIVE", arrive)
    return launch(ptx, "k", 2, 32, [np.zeros(1, np.float32)], file="init.ptx")


def test_a_release_cluster_arrive_publishes_the_mbarrier_init():
    # the default barrier.cluster.arrive is .release: it orders the init before the peer's arrive
    # without fence.mbarrier_init (the ISA states no rule asking for both)
    _cluster_init("", ".aligned")
    _cluster_init("  fence.mbarrier_init.release.cluster;", ".relaxed.aligned")


def test_a_relaxed_cluster_arrive_without_the_fence_is_an_error_citing_the_fence():
    import pytest

    with pytest.raises(CheckFailed, match=r"before its init was made visible to the cluster .*PTX ISA 9\.7\.13\.4"):
        _cluster_init("", ".relaxed.aligned")


def test_validate_device_emu_prints_a_kernels_warnings():
    from porter.commands.validate import _text

    report = {"arch": "hopper", "target": "sm_90a", "device": {"index": None, "name": "porter PTX simulator"},
              "results": [{"name": "k", "passed": True, "level": "emulated", "checks": [],
                           "warnings": ["CTA 0 warp 0 exits with 1 wgmma.mma_async operation(s) never waited for "
                                        "(a warning: ...)"]}],
              "unsupported": []}
    out = _text(report)
    assert "k: passed (level emulated)" in out and "  warning: CTA 0 warp 0 exits with 1 wgmma" in out


def test_a_cp_async_read_before_the_wait_and_barrier_cites_cp_async_not_the_barrier():
    # the message names "a barrier after it"; the rule it enforces is cp.async's (found running
    # FlashAttention-2 with a weakened wait: it cited 9.7.13.1 "bar, barrier" before)
    message = ("t.ptx:9: CTA 0 warp 1: ldmatrix.x4 of lane 0 accesses shared bytes 0xc00..0xc10 that an asynchronous "
               "copy is still writing by CTA 0 warp 0 lane 0 (the cp.async at t.ptx:4), before that thread's "
               "cp.async.wait_group and a barrier after it")
    assert isa_rules.cite(message).startswith('PTX ISA 9.7.9.25.3.1 "cp.async" and "cp.async.wait_group"')
