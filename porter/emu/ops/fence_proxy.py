"""The uni-directional proxy fences of PTX ISA 8.6+ (PTX ISA 9.0, 9.7.13.4 "membar/fence"):
``fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster`` orders the executing
thread's prior generic-proxy writes to its CTA's shared memory before later async-proxy
operations (a TMA store's read of the tile it wrote: CuTe DSL's fence before a TMA store);
``fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster`` orders async-proxy
writes before later generic reads, which this sequentially consistent machine always does.

The plain fence builder took them as ordinary fences, so the async-proxy checker
(``ops.memory.check_async_read``) still saw the generic writes as unfenced and stopped a
correct kernel: here the release form clears them, as ``fence.proxy.async`` does.
"""

from __future__ import annotations

from porter.emu.ops.memory import clear_generic_written


def build_fence_async_generic(ins, d):
    parts = ins.parts
    release = "release" in parts
    if not release and "acquire" not in parts:
        raise d.unsupported("(fence.proxy.async::generic takes .release or .acquire)")

    def fence(w, m):
        if release:
            clear_generic_written(w.cta)
        return None
    return fence


build_fence_async_generic.n_dst = 0

BUILDERS: dict = {}
FORMS = [("fence", lambda ins: "async::generic" in ins.parts, build_fence_async_generic)]
