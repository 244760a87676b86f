""".func device functions and calls to them (PTX ISA 9.7.12.5 "call", 9.7.12.6 "ret"): what
``__noinline__`` functions, recursion and low-optimisation builds compile to. Each a small
kernel written here, in the call-sequence shape NVCC emits (a ``{ }`` block declaring the
``.param`` slots, ``st.param`` / ``call`` / ``ld.param``), checked against numpy; and the
errors (runaway recursion, an undefined callee, a body without ret) as one line naming the PTX
line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CallStackOverflow, Deadlock, Unsupported

HEAD = ".version 8.7\n.target sm_90a\n.address_size 64\n"
T = np.arange(32, dtype=np.int64)


def entry(body: str, funcs: str = "", pre: str = "") -> str:
    """Entry ``k(out)``: %rd3 = &out[tid] (u32), %r1 = tid."""
    return (HEAD + pre + funcs + ".visible .entry k(.param .u64 out)\n{\n.reg .pred %p<8>;\n.reg .b32 %r<24>;\n"
            ".reg .b64 %rd<8>;\nld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\nmov.u32 %r1, %tid.x;\n"
            "mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n" + body + "\nret;\n}\n")


def callseq(fn: str, args: list[tuple[str, str]], ret: tuple[str, str] | None, uni: bool = False) -> str:
    """NVCC's call sequence: a block with one .param slot per argument and the return slot."""
    lines = ["{"]
    for i, (typ, val) in enumerate(args):
        lines += [f".param .{typ} param{i};", f"st.param.{typ} [param{i}], {val};"]
    if ret is not None:
        lines.append(f".param .{ret[0]} retval0;")
    names = ", ".join(f"param{i}" for i in range(len(args)))
    call = "call.uni" if uni else "call"
    lines.append(f"{call} {'(retval0), ' if ret else ''}{fn}, ({names});")
    if ret is not None:
        lines.append(f"ld.param.{ret[0]} {ret[1]}, [retval0];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def run(src: str, n: int = 32, block: int = 32, **kw) -> np.ndarray:
    out = np.zeros(n, np.uint32)
    return emu.launch(src, "k", grid=1, block=block, args=[out], budget=2_000_000, **kw).outputs[0]


# mad3(a, b, c) = a * b + c, calling sq() for nothing but to clobber names the caller uses too
MAD3 = """.func (.param .b32 func_retval0) mad3(.param .b32 mad3_param_0, .param .b32 mad3_param_1,
    .param .b32 mad3_param_2);
.func (.param .b32 func_retval0) sq(.param .b32 sq_param_0)
{
.reg .b32 %r<4>;
ld.param.u32 %r1, [sq_param_0];
mul.lo.u32 %r2, %r1, %r1;
mov.u32 %r3, 0;
st.param.b32 [func_retval0+0], %r2;
ret;
}
.func (.param .b32 func_retval0) mad3(.param .b32 mad3_param_0, .param .b32 mad3_param_1,
    .param .b32 mad3_param_2)
{
.reg .b32 %r<8>;
ld.param.u32 %r1, [mad3_param_0];
ld.param.u32 %r2, [mad3_param_1];
ld.param.u32 %r3, [mad3_param_2];
mad.lo.u32 %r4, %r1, %r2, %r3;
""" + callseq("sq", [("b32", "%r1")], ("b32", "%r5")) + """add.u32 %r4, %r4, %r5;
st.param.b32 [func_retval0+0], %r4;
ret;
}
"""


def test_a_call_passes_arguments_returns_a_value_and_keeps_the_callers_registers():
    # the callees name %r1..%r5 too: each function has its own registers (PTX namespaces)
    body = ("mov.u32 %r2, 7;\nmov.u32 %r3, 100;\n" + callseq("mad3", [("b32", "%r1"), ("b32", "%r2"), ("b32", "%r3")],
                                                            ("b32", "%r4"), uni=True)
            + "add.u32 %r5, %r4, %r2;\nadd.u32 %r5, %r5, %r1;\nst.global.u32 [%rd3], %r5;\n")
    got = run(entry(body, MAD3)).astype(np.int64)
    np.testing.assert_array_equal(got, T * 7 + 100 + T * T + 7 + T)


STORE = """.func store2(.param .b64 store2_param_0, .param .b32 store2_param_1)
{
.reg .b32 %r<4>;
.reg .b64 %rd<4>;
ld.param.u64 %rd1, [store2_param_0];
ld.param.u32 %r1, [store2_param_1];
st.global.u32 [%rd1], %r1;
shl.b32 %r2, %r1, 1;
st.global.u32 [%rd1+128], %r2;
ret;
}
"""


def test_a_void_function_takes_a_pointer_and_stores_through_it():
    body = "add.u32 %r2, %r1, 3;\n" + callseq("store2", [("b64", "%rd3"), ("b32", "%r2")], None)
    got = run(entry(body, STORE), n=64).astype(np.int64)
    np.testing.assert_array_equal(got[:32], T + 3)
    np.testing.assert_array_equal(got[32:], 2 * (T + 3))


def test_divergent_calls_of_one_function_from_two_sites_return_each_lane_to_its_own():
    # lanes < 12 call mad3 at site A, the others at site B with other arguments; both groups
    # meet inside mad3 (one pc) and its ret splits them back to their call sites
    body = ("mov.u32 %r2, 2;\nmov.u32 %r3, 5;\nsetp.lt.u32 %p1, %r1, 12;\n@%p1 bra A;\n"
            + callseq("mad3", [("b32", "%r1"), ("b32", "%r3"), ("b32", "%r2")], ("b32", "%r6"))
            + "add.u32 %r6, %r6, 1000;\nbra J;\nA:\n"
            + callseq("mad3", [("b32", "%r1"), ("b32", "%r2"), ("b32", "%r3")], ("b32", "%r6"))
            + "J:\nst.global.u32 [%rd3], %r6;\n")
    got = run(entry(body, MAD3)).astype(np.int64)
    want = np.where(T < 12, T * 2 + 5 + T * T, T * 5 + 2 + T * T + 1000)
    np.testing.assert_array_equal(got, want)


FIB = """.func (.param .b32 func_retval0) fib(.param .b32 fib_param_0)
{
.reg .pred %p<2>;
.reg .b32 %r<8>;
ld.param.u32 %r1, [fib_param_0];
setp.lt.u32 %p1, %r1, 2;
mov.u32 %r5, %r1;
@%p1 bra DONE;
sub.u32 %r2, %r1, 1;
""" + callseq("fib", [("b32", "%r2")], ("b32", "%r3"), uni=False) + """sub.u32 %r2, %r1, 2;
""" + callseq("fib", [("b32", "%r2")], ("b32", "%r4")) + """add.u32 %r5, %r3, %r4;
DONE:
st.param.b32 [func_retval0+0], %r5;
ret;
}
"""


def test_recursion_keeps_each_activations_registers():
    # fib(n) = fib(n-1) + fib(n-2): %r1 and %r3 live across the second recursive call, and each
    # lane recurses to its own depth (n = tid % 13)
    body = "rem.u32 %r2, %r1, 13;\n" + callseq("fib", [("b32", "%r2")], ("b32", "%r3")) + "st.global.u32 [%rd3], %r3;\n"
    got = run(entry(body, FIB)).astype(np.int64)

    def fib(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a
    np.testing.assert_array_equal(got, [fib(int(t) % 13) for t in T])


def test_a_guarded_call_runs_only_the_lanes_whose_guard_holds():
    body = ("mov.u32 %r6, 9;\nsetp.ge.u32 %p2, %r1, 20;\n{\n.param .b32 param0;\nst.param.b32 [param0], %r1;\n"
            ".param .b32 retval0;\nmov.u32 %r7, 9;\n@%p2 call (retval0), sq, (param0);\n"
            "@%p2 ld.param.b32 %r6, [retval0];\n}\nst.global.u32 [%rd3], %r6;\n")
    got = run(entry(body, MAD3)).astype(np.int64)
    np.testing.assert_array_equal(got, np.where(T >= 20, T * T, 9))


def test_nested_calls_in_a_loop():
    # sum over i < 5 of mad3(tid, i, 1) (which itself calls sq)
    body = ("mov.u32 %r10, 0;\nmov.u32 %r11, 0;\nmov.u32 %r12, 1;\nL:\n"
            + callseq("mad3", [("b32", "%r1"), ("b32", "%r11"), ("b32", "%r12")], ("b32", "%r13"))
            + "add.u32 %r10, %r10, %r13;\nadd.u32 %r11, %r11, 1;\nsetp.lt.u32 %p3, %r11, 5;\n@%p3 bra L;\n"
            "st.global.u32 [%rd3], %r10;\n")
    got = run(entry(body, MAD3)).astype(np.int64)
    np.testing.assert_array_equal(got, sum(T * i + 1 + T * T for i in range(5)))


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_runaway_recursion_stops_at_the_depth_limit_in_one_line():
    funcs = (".func down(.param .b32 down_param_0)\n{\n.reg .b32 %r<3>;\nld.param.u32 %r1, [down_param_0];\n"
             "add.u32 %r2, %r1, 1;\n" + callseq("down", [("b32", "%r2")], None) + "ret;\n}\n")
    src = entry(callseq("down", [("b32", "%r1")], None), funcs)
    with pytest.raises(CallStackOverflow) as e:         # its own error: no warp is parked, so not a Deadlock
        run(src)
    assert not isinstance(e.value, Deadlock)
    msg = _one_line(e)
    line = next(i + 1 for i, s in enumerate(src.splitlines()) if s.startswith("call down"))
    assert f"<ptx>:{line}" in msg and "runaway recursion" in msg and "1024 nested calls" in msg
    assert "deadlock" not in msg.lower()


def test_a_call_of_an_undefined_function_is_one_line_naming_the_call():
    src = entry(callseq("nowhere", [("b32", "%r1")], ("b32", "%r2")))
    with pytest.raises(Unsupported) as e:
        run(src)
    msg = _one_line(e)
    line = next(i + 1 for i, s in enumerate(src.splitlines()) if s.startswith("call "))
    assert f"<ptx>:{line}: call of nowhere" in msg and "neither defined nor declared" in msg
    # declared (a prototype) but defined nowhere in the module: an external function
    src = entry(callseq("ext", [("b32", "%r1")], None), pre=".extern .func ext(.param .b32 a);\n")
    with pytest.raises(Unsupported) as e:
        run(src)
    assert "declared here but not defined" in _one_line(e)


def test_a_function_without_ret_and_a_mismatched_call_are_one_line():
    funcs = ".func nor(.param .b32 a)\n{\n.reg .b32 %r<3>;\nld.param.u32 %r1, [a];\n}\n"
    with pytest.raises(Unsupported) as e:
        run(entry(callseq("nor", [("b32", "%r1")], None), funcs))
    assert "ran past the end of .func nor" in _one_line(e)
    with pytest.raises(Unsupported) as e:
        run(entry(callseq("sq", [("b32", "%r1"), ("b32", "%r1")], ("b32", "%r2")), MAD3))
    msg = _one_line(e)
    assert "call of sq with 1 return value(s) and 2 argument(s)" in msg and "has 1 and 1" in msg


# swap(p: {f32 x; u32 n}) -> {u32 n + 1; f32 x * 2}: a by-value struct in and out (8-byte .param
# arrays, read and written at byte offsets, the call site writing it as one .v2 store)
SWAP = """.func (.param .align 8 .b8 func_retval0[8]) swap(.param .align 8 .b8 swap_param_0[8])
{
.reg .f32 %f<4>;
.reg .b32 %r<4>;
ld.param.u32 %r1, [swap_param_0+4];
ld.param.f32 %f1, [swap_param_0];
add.u32 %r2, %r1, 1;
add.f32 %f2, %f1, %f1;
st.param.b32 [func_retval0+0], %r2;
st.param.f32 [func_retval0+4], %f2;
ret;
}
"""


def test_a_struct_passed_and_returned_by_value():
    body = (".reg .f32 %f<4>;\ncvt.rn.f32.u32 %f1, %r1;\nmul.lo.u32 %r2, %r1, 3;\n{\n.param .align 8 .b8 param0[8];\n"
            "st.param.v2.b32 [param0+0], {%f1, %r2};\n.param .align 8 .b8 retval0[8];\n"
            "call.uni (retval0), swap, (param0);\nld.param.v2.b32 {%r3, %r4}, [retval0+0];\n}\n"
            "st.global.u32 [%rd3], %r3;\nst.global.u32 [%rd3+128], %r4;\n")
    got = run(entry(body, SWAP), n=64)
    np.testing.assert_array_equal(got[:32].astype(np.int64), 3 * T + 1)
    np.testing.assert_array_equal(got[32:].view(np.float32), 2 * T.astype(np.float32))
    # a .param access outside the array is one line naming it
    bad = body.replace("ld.param.v2.b32 {%r3, %r4}, [retval0+0]", "ld.param.v2.b32 {%r3, %r4}, [retval0+4]")
    with pytest.raises(Unsupported) as e:
        run(entry(bad, SWAP), n=64)
    assert "outside the 8-byte .param retval0" in _one_line(e)


CUDA = r"""
struct Pair { float s; int n; };
__device__ __noinline__ float horner(float x, int k) {
  float s = 0.f;
  for (int i = 0; i < k; ++i) s = s * x + (float)(i + 1);
  return s;
}
__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__device__ __noinline__ Pair bump(Pair p, float x) { p.s += x; p.n += 1; return p; }
__device__ __noinline__ void put(float* o, int i, float v) { o[i] = v; }
extern "C" __global__ void calls(float* out, int* iout) {
  int t = threadIdx.x;
  float v = (t & 1) ? horner(0.5f * t, 4) : horner(1.0f + t, 3);
  Pair p = {0.f, 0};
  for (int i = 0; i <= (t & 3); ++i) p = bump(p, v);
  put(out, t, v);
  put(out + 32, t, p.s);
  iout[t] = fib(t % 11) + 100 * p.n;
}
"""


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "device-debug"])
def test_nvrtc_noinline_functions_recursion_and_structs(options):
    # what NVRTC makes of __noinline__ helpers (a loop, recursion, a struct by value, a void
    # store), optimised and at -G (every function kept, unoptimised)
    from porter.compile.toolchain import compile_cuda
    ptx = compile_cuda(CUDA, "sm_90a", "calls.cu", options=options).ptx
    assert ".func" in ptx and "call" in ptx
    out, iout = np.zeros(64, np.float32), np.zeros(32, np.int32)
    res = emu.launch(ptx, "calls", grid=1, block=32, args=[out, iout], budget=2_000_000)

    def horner(x, k):
        s = np.float32(0)
        for i in range(k):
            s = np.float32(s * np.float32(x) + np.float32(i + 1))
        return s
    v = np.array([horner(np.float32(0.5) * np.float32(t), 4) if t & 1 else horner(np.float32(1 + t), 3) for t in T])
    n = (T & 3) + 1
    np.testing.assert_allclose(res.outputs[0][:32], v, rtol=1e-6)
    np.testing.assert_allclose(res.outputs[0][32:], v * n, rtol=1e-5)
    fibs = [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55]
    np.testing.assert_array_equal(res.outputs[1], [fibs[t % 11] + 100 * n[t] for t in T])


INDIRECT = r"""
typedef float (*op_t)(float, int);
__device__ __noinline__ float twice(float x, int k) { return 2.f * x + k; }
__device__ __noinline__ float sq(float x, int k) { return x * x - k; }
extern "C" __global__ void ind(float* out, const int* sel) {
  int t = threadIdx.x;
  op_t f = sel[t] ? twice : sq;
  out[t] = f((float)t, 3);
}
"""


def test_an_indirect_call_through_a_function_pointer_splits_by_target():
    # NVRTC: mov.u64 of each function's address, selp, and `call (r), %rd, (args), prototype_0`
    from porter.compile.toolchain import compile_cuda
    ptx = compile_cuda(INDIRECT, "sm_90a", "indirect.cu").ptx
    assert ".callprototype" in ptx
    sel = (T % 3 == 0).astype(np.int32)
    out = np.zeros(32, np.float32)
    got = emu.launch(ptx, "ind", grid=1, block=32, args=[out, sel], budget=200_000).outputs[0]
    t = T.astype(np.float32)
    np.testing.assert_array_equal(got, np.where(sel == 1, 2 * t + 3, t * t - 3))


def test_an_indirect_call_of_an_address_that_is_no_function_is_one_line():
    body = ("mov.u64 %rd5, sq;\nadd.u64 %rd5, %rd5, 8;\n{\n.param .b32 param0;\nst.param.b32 [param0], %r1;\n"
            ".param .b32 retval0;\nproto: .callprototype (.param .b32 _) _ (.param .b32 _);\n"
            "call (retval0), %rd5, (param0), proto;\nld.param.b32 %r2, [retval0];\n}\n")
    with pytest.raises(Unsupported) as e:
        run(entry(body, MAD3))
    msg = _one_line(e)
    assert "indirect call of address 0x" in msg and "no function of the module taking 1 argument(s)" in msg


FRAG = r"""
struct Frag { float v[6]; short s; char c; };
__device__ __noinline__ void fill(float* dst, int n, float base) { for (int i = 0; i < n; ++i) dst[i] = base + i; }
__device__ __noinline__ Frag mk(const float* src, short s) {
  Frag f;
  for (int i = 0; i < 6; ++i) f.v[i] = src[i] * 2;
  f.s = s; f.c = (char)(s & 7);
  return f;
}
__device__ __noinline__ float sum(Frag f) { float a = f.s + f.c; for (int i = 0; i < 6; ++i) a += f.v[i]; return a; }
__device__ __noinline__ bool odd(int x) { return x & 1; }
extern "C" __global__ void frag(float* out) {
  int t = threadIdx.x;
  float loc[6];
  fill(loc, 6, (float)t);
  Frag f = mk(loc, (short)t);
  out[t] = odd(t) ? sum(f) : -sum(f);
}
"""


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "device-debug"])
def test_nvrtc_stack_frames_pointers_to_the_callers_locals_and_a_28_byte_struct(options):
    # at -G every function keeps a __local_depot frame behind %SP (cvta.local), the caller passes
    # a generic pointer into its own frame, and a 28-byte struct (float[6], short, char) travels by
    # value both ways
    from porter.compile.toolchain import compile_cuda
    ptx = compile_cuda(FRAG, "sm_90a", "frag.cu", options=options).ptx
    out = np.zeros(32, np.float32)
    got = emu.launch(ptx, "frag", grid=1, block=32, args=[out], budget=2_000_000).outputs[0]
    want = [(1 if t & 1 else -1) * (t + (t & 7) + sum(2 * (t + i) for i in range(6))) for t in range(32)]
    np.testing.assert_array_equal(got, np.array(want, np.float32))


def test_call_slots_declared_at_the_bodys_top_level_and_a_register_argument():
    # hand-written PTX may declare the .param slots outside any { } block, and pass a register
    # or an immediate straight as an argument (PTX ISA 9.7.12.5 allows both)
    body = (".param .b32 slot;\n.param .b32 rv;\nst.param.b32 [slot], %r1;\ncall (rv), sq, (slot);\n"
            "ld.param.b32 %r2, [rv];\ncall (%r3), sq, (5);\nadd.u32 %r2, %r2, %r3;\nst.global.u32 [%rd3], %r2;\n")
    got = run(entry(body, MAD3)).astype(np.int64)
    np.testing.assert_array_equal(got, T * T + 25)
