"""The megakernel CUDA against its contract (porter/megakernel/isa.py), without a GPU.

What the kernel cannot check for itself at run time is checked here: the constants
the template emits are isa.py's, the TensorDesc record is the documented one (and
the compiler rejects a mismatch), every opcode has a case in the interpreter, the
launch is cooperative, waits have a deadline, and the planned programs stay inside
the limits the kernel's ``__trap()`` guards enforce.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from porter.compile import render as renderlib
from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import megakernel
from porter.kernels.build import build_kernel
from porter.megakernel import isa
from porter.megakernel.isa import EPILOGUE_MASK, Epilogue, Flag, Opcode, W
from porter.megakernel.plan import build_plan
from porter.compile.toolchain import CompileError, compile_cuda

ARCHS = ("hopper", "blackwell")


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ARCHS}


@pytest.fixture(scope="module")
def specs(archs):
    return {name: megakernel.variants(arch)[0] for name, arch in archs.items()}


@pytest.fixture(scope="module")
def sources(archs, specs):
    return {name: megakernel.render(specs[name], archs[name]) for name in ARCHS}


def _constants(src: str, prefix: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2))
            for m in re.finditer(rf"inline constexpr int {prefix}(\w+) = (-?\d+);", src)}


@pytest.mark.parametrize("name", ARCHS)
def test_emitted_constants_are_isa_py(sources, name):
    src = sources[name]
    assert _constants(src, "W_") == {m.name: int(m) for m in W}
    assert _constants(src, "OP_") == {m.name: int(m) for m in Opcode}
    assert _constants(src, "EPI_") == {m.name: int(m) for m in Epilogue}
    assert _constants(src, "FLAG_") == {m.name: int(m) for m in Flag if m is not Flag.NONE}
    assert _constants(src, "DT_") == {m.name: int(m) for m in isa.DType}
    assert f"inline constexpr int EPILOGUE_MASK = {EPILOGUE_MASK};" in src
    assert f"inline constexpr int WORDS = {isa.WORDS};" in src
    assert f"inline constexpr int MAX_WAITS = {isa.MAX_WAITS};" in src
    offsets = _constants(src, "TENSOR_DESC_OFF_")
    assert offsets == {n.upper(): isa.TENSOR_DESC.fields[n][1] for n in isa.TENSOR_DESC.names}


@pytest.mark.parametrize("name", ARCHS)
def test_every_opcode_has_an_interpreter_case(sources, name):
    # a new opcode in isa.py without CUDA would reach the default: __trap()
    cases = set(re.findall(r"case isa::OP_(\w+):", sources[name]))
    assert cases == {op.name for op in Opcode if op is not Opcode.STOP}


def test_tensor_desc_is_part_of_the_isa_contract():
    assert "TensorDesc" in isa.__doc__ and "void* tensors" not in isa.__doc__
    assert isa.TENSOR_DESC.itemsize == isa.TENSOR_DESC_BYTES == 32
    assert megakernel.TENSOR_DESC_DTYPE == isa.TENSOR_DESC
    assert ("tensors", "const TensorDesc*") in megakernel.PARAMS


def test_tensor_desc_records_bytes(archs):
    program = build_plan(archs["hopper"], "tiny", pos=5)["program"]
    base = 0x7F00_0000_0000
    recs = megakernel.tensor_table_records(program, [base + t.offset for t in program.tensors])
    raw = recs.tobytes()
    for t in program.tensors:
        rec = raw[32 * t.id:32 * (t.id + 1)]
        assert int.from_bytes(rec[0:8], "little") == base + t.offset
        assert int.from_bytes(rec[8:12], "little") == int(t.dtype)
        rows, cols = int.from_bytes(rec[12:16], "little"), int.from_bytes(rec[16:20], "little")
        assert cols == t.shape[-1] and rows * cols == t.numel
        assert rec[20:32] == bytes(12)
    bad = [base + t.offset for t in program.tensors]
    bad[3] += 8
    with pytest.raises(PorterError, match="16-byte aligned"):
        megakernel.tensor_table_records(program, bad)


def test_compiler_rejects_a_tensor_desc_that_differs_from_isa(archs, specs):
    # the static_asserts in context.cuh are live: move `cols` in the isa table and
    # the kernel must no longer compile (front-end error, no full compile needed)
    arch, spec = archs["hopper"], specs["hopper"]
    fmt = isa.describe()
    fmt["epilogue_mask"] = isa.EPILOGUE_MASK
    fmt["tensor_desc_offsets"] = dict(fmt["tensor_desc_offsets"], cols=20)
    src = renderlib.render(spec.template, spec=spec, cfg=dict(spec.config), arch=arch, isa=fmt)
    with pytest.raises(CompileError, match="cols"):
        compile_cuda(src, arch.target, spec.entry)


def test_launch_is_cooperative(archs, specs):
    from porter.runtime import driver

    program = build_plan(archs["hopper"], "tiny", pos=5)["program"]
    assert megakernel.launch_config(specs["hopper"], program)["cooperative"] is True
    param = inspect.signature(driver.launch).parameters["cooperative"]
    assert param.default is False
    assert "CU_LAUNCH_ATTRIBUTE_COOPERATIVE" in inspect.getsource(driver.launch_config)   # launch builds it there


@pytest.mark.parametrize("name", ARCHS)
def test_waits_have_a_deadline(archs, specs, name):
    build = build_kernel(specs[name], archs[name])
    ptx = build.compiled.ptx
    assert "%globaltimer" in ptx and "trap;" in ptx
    assert "kWaitDeadlineNs" in build.source


# ---- the planned programs stay inside the kernel's guards --------------------------------

def _rows_per_page(k: int, page_bytes: int, y_rows: int) -> int:
    """matvec.cuh rows_per_page."""
    r = min(page_bytes // (2 * k), y_rows)
    return 0 if r < 1 else 1 << (r.bit_length() - 1)


def kernel_guard_violations(program, config: dict) -> list[str]:
    """Every reason the compiled kernel (config = its KernelSpec.config) would trap on,
    or silently mis-handle, an instruction of ``program``."""
    t = program.tensors
    out = []
    for spec in t:
        if spec.offset % 16:
            out.append(f"tensor {spec.name} offset {spec.offset} not 16-byte aligned")
    y_rows, page = config["y_rows"], config["page_bytes"]
    for sm, slot in zip(*np.nonzero(program.instructions[:, :, W.OP])):
        w = program.instructions[sm, slot]
        op, what = Opcode(int(w[W.OP])), f"SM{sm}#{slot} id {int(w[W.ID])}"
        if not 0 <= w[W.NWAIT] <= isa.MAX_WAITS:
            out.append(f"{what}: NWAIT {int(w[W.NWAIT])}")
        if op == Opcode.MATVEC:
            wt = t[int(w[W.T0])]
            k = wt.shape[-1]
            epi = int(w[W.FLAGS]) & EPILOGUE_MASK
            if wt.kind != "weight" or (epi == Epilogue.SILU_MUL and t[int(w[W.T0 + 4])].kind != "weight"):
                out.append(f"{what}: MATVEC streams a non-weight ahead of its waits")
            if k > config["max_k"] or k % 8 or _rows_per_page(k, page, y_rows) == 0:
                out.append(f"{what}: K {k} outside the kernel's input buffer / page")
            if t[int(w[W.T0 + 1])].numel < k:
                out.append(f"{what}: input shorter than K")
            if epi == Epilogue.ROPE:
                hd = int(w[W.I0 + 2])
                if hd % 2 or y_rows % hd or w[W.R0] % hd or w[W.R1] % hd:
                    out.append(f"{what}: ROPE rows not whole heads of {hd} in {y_rows}-row windows")
        elif op == Opcode.ATTN_PARTIAL:
            hd, gs = int(w[W.I0 + 2]), int(w[W.I0 + 3])
            if hd > config["max_head_dim"] or gs > config["max_group"] or hd % 2:
                out.append(f"{what}: head dim {hd} / group {gs} beyond the kernel's registers")
    return out


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("model, pos, fuse", [("tiny", 0, True), ("tiny", 40, True), ("tiny", 9, False),
                                               ("tiny-gqa4", 70, True)])
def test_planned_programs_fit_the_kernel(archs, specs, name, model, pos, fuse):
    program = build_plan(archs[name], model, pos=pos, fuse=fuse)["program"]
    assert kernel_guard_violations(program, specs[name].config) == []


def test_guard_model_catches_a_bad_program(archs, specs):
    program = build_plan(archs["hopper"], "tiny", pos=3)["program"]
    ins = program.instructions
    sm, slot = map(int, np.argwhere(ins[:, :, W.OP] == Opcode.MATVEC)[0])
    ins[sm, slot, W.T0] = program.tensor("buf.h").id           # an activation as the weight
    assert any("non-weight" in v for v in kernel_guard_violations(program, specs["hopper"].config))


@pytest.mark.parametrize("name", ARCHS)
def test_one_cta_per_sm_and_pages_owned_by_slot(archs, specs, name):
    spec, arch = specs[name], archs[name]
    assert 2 * spec.smem_bytes > arch.smem_per_sm_bytes            # isa.py: one CTA per SM
    # page_ring.cuh: the consumer of a page is its slot's owner (the mirror tests
    # in test_megakernel_cuda_mirror.py simulate exactly this rule)
    assert "return slot_of(seq) % static_cast<uint32_t>(kComputeWarps)" in megakernel.render(spec, arch)
