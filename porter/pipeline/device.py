"""Is a GPU of the target arch here? Asked of the CUDA driver through cuda.bindings."""

from __future__ import annotations


def list_devices() -> tuple[list[dict], str]:
    """Every visible GPU as {index, name, compute_capability}, plus why none when empty."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return [], f"cuda.bindings not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return [], f"CUDA driver unavailable (cuInit: {err.name if hasattr(err, 'name') else int(err)})"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return [], "the CUDA driver sees no GPU"
        out = []
        attr = driver.CUdevice_attribute
        for i in range(count):
            _, dev = driver.cuDeviceGet(i)
            _, name = driver.cuDeviceGetName(64, dev)
            _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            out.append({"index": i, "name": name.split(b"\0")[0].decode(errors="replace"),
                        "compute_capability": [int(major), int(minor)]})
        return out, ""
    except Exception as exc:  # no libcuda.so: the bindings raise when first called
        return [], f"CUDA driver unavailable ({type(exc).__name__}: {exc})"


def find_device(arch) -> tuple[dict | None, str]:
    """The first GPU whose compute capability is the descriptor's target, or (None, why)."""
    devices, why = list_devices()
    want = list(arch.compute_capability)
    for dev in devices:
        if dev["compute_capability"] == want:
            return dev, ""
    if devices:
        seen = ", ".join(f"{d['name']} (cc {d['compute_capability'][0]}.{d['compute_capability'][1]})" for d in devices)
        return None, f"no GPU of compute capability {want[0]}.{want[1]}; found {seen}"
    return None, why
