"""More PTX forms public kernels use, each with a small kernel written here.

* A recursive ``.func`` with ``.local`` variables (the ``__local_depot`` frame NVCC gives a
  recursive device function with a local array): each activation has its own frame (PTX ISA
  5.1.5 "Local State Space": local memory holds the stack frames of function calls), so what
  an activation stored before its recursive call is what it reads after it. A function that
  lets the address of its own frame out (a pointer argument, a stored address) is refused in
  one line naming the PTX line.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import Unsupported

HEAD = ".version 8.7\n.target sm_90a\n.address_size 64\n"


def _callseq(fn: str, arg: str, ret: str, argtype: str = "b32") -> str:
    return ("{\n"
            f".param .{argtype} param0;\nst.param.{argtype} [param0], {arg};\n.param .b32 retval0;\n"
            f"call (retval0), {fn}, (param0);\nld.param.b32 {ret}, [retval0];\n}}\n")


# acc(n): buf[0] = 3n, buf[1] = n (its own .local frame), then acc(n - 1), then buf[0] + buf[1] +
# acc(n - 1): 4n + acc(n - 1) = 2n(n + 1). One frame shared by all activations would read the
# innermost activation's buf after each return.
_ACC = """.func (.param .b32 func_retval0) acc(.param .b32 acc_param_0)
{
.local .align 4 .b8 __local_depot0[8];
.reg .b64 %SPL;
.reg .pred %p<2>;
.reg .b32 %r<8>;
mov.u64 %SPL, __local_depot0;
ld.param.u32 %r1, [acc_param_0];
mul.lo.u32 %r2, %r1, 3;
st.local.u32 [%SPL], %r2;
st.local.u32 [%SPL+4], %r1;
mov.u32 %r5, 0;
setp.eq.u32 %p1, %r1, 0;
@%p1 bra DONE;
sub.u32 %r3, %r1, 1;
""" + _callseq("acc", "%r3", "%r5") + """DONE:
ld.local.u32 %r6, [%SPL];
ld.local.u32 %r7, [%SPL+4];
add.u32 %r6, %r6, %r7;
add.u32 %r6, %r6, %r5;
st.param.b32 [func_retval0], %r6;
ret;
}
"""


def _kernel(funcs: str, call: str) -> str:
    return (HEAD + funcs + ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n"
            "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\nmov.u32 %r1, %tid.x;\n"
            "rem.u32 %r2, %r1, 9;\n" + call + "mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n"
            "st.global.u32 [%rd3], %r3;\nret;\n}\n")


@pytest.mark.parametrize("seed", [None, 1])
def test_recursive_function_keeps_a_local_frame_per_activation(seed):
    out = np.zeros(32, np.uint32)
    src = _kernel(_ACC, _callseq("acc", "%r2", "%r3"))
    got = emu.launch(src, "k", grid=1, block=32, args=[out], seed=seed, budget=2_000_000).outputs[0]
    n = np.arange(32) % 9                        # each lane recurses to its own depth
    np.testing.assert_array_equal(got, 2 * n * (n + 1))


# leak(n, p): writes n through the pointer it gets, then passes its own frame's address down
_LEAK = """.func (.param .b32 func_retval0) leak(.param .b64 leak_param_0)
{
.local .align 4 .b8 __local_depot1[4];
.reg .b64 %SPL;
.reg .b64 %SP;
.reg .pred %p<2>;
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
mov.u64 %SPL, __local_depot1;
cvta.local.u64 %SP, %SPL;
ld.param.u64 %rd1, [leak_param_0];
cvt.u32.u64 %r1, %rd1;
st.local.u32 [%SPL], %r1;
mov.u32 %r5, 0;
setp.eq.u32 %p1, %r1, 0;
@%p1 bra DONE;
sub.u32 %r3, %r1, 1;
""" + _callseq("leak", "%SP", "%r5", "b64") + """DONE:
st.param.b32 [func_retval0], %r5;
ret;
}
"""


def test_a_recursive_function_passing_its_frames_address_is_refused_in_one_line():
    src = _kernel(_LEAK, "cvt.u64.u32 %rd4, %r2;\n" + _callseq("leak", "%rd4", "%r3", "b64"))
    with pytest.raises(Unsupported) as e:
        emu.launch(src, "k", grid=1, block=32, args=[np.zeros(32, np.uint32)], budget=200_000)
    msg = str(e.value)
    line = next(i + 1 for i, s in enumerate(src.splitlines()) if s.startswith("call (retval0), leak"))
    assert "\n" not in msg and f":{line}:" in msg and "recursive" in msg and "address of its own .local" in msg, msg


_WALK_CU = r"""
__device__ __noinline__ int walk(int n, int k) {
    int frame[4];                                   // indexed by a value: stays in local memory
    for (int i = 0; i < 4; ++i) frame[i] = n * (i + 1) + k;
    int below = n > 0 ? walk(n - 1, frame[(n + k) & 3] & 7) : 0;
    int s = 0;
    for (int i = 0; i < 4; ++i) s += frame[(i + n) & 3] * (i + 1);
    return s + below;
}
extern "C" __global__ void k(int* out) { out[threadIdx.x] = walk(threadIdx.x % 7, threadIdx.x); }
"""


def _walk(n: int, k: int) -> int:
    frame = [n * (i + 1) + k for i in range(4)]
    below = _walk(n - 1, frame[(n + k) & 3] & 7) if n > 0 else 0
    return sum(frame[(i + n) & 3] * (i + 1) for i in range(4)) + below


def test_nvrtc_recursion_with_a_local_array():
    from porter.compile.toolchain import compile_cuda

    ptx = compile_cuda(_WALK_CU, "sm_90a", "walk.cu").ptx
    assert "__local_depot" in ptx and ".func" in ptx
    got = emu.launch(ptx, "k", grid=1, block=32, args=[np.zeros(32, np.int32)], budget=2_000_000).outputs[0]
    np.testing.assert_array_equal(got, [_walk(t % 7, t) for t in range(32)])
