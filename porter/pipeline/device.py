"""Is a GPU of the target arch here? Asked of the CUDA driver through porter.runtime.driver
(cuda.bindings, or the rehearsal GPU when one is installed)."""

from __future__ import annotations


def list_devices() -> tuple[list[dict], str]:
    """Every visible GPU as {index, name, compute_capability}, plus why none when empty."""
    try:
        from porter.errors import PorterError
        from porter.runtime import driver as runtime_driver

        driver = runtime_driver.bindings()
    except (ImportError, PorterError) as exc:
        return [], f"cuda.bindings not importable: {exc}"
    try:
        try:
            (err,) = driver.cuInit(0)
        except Exception:  # no libcuda.so: cuda.bindings raises when it first needs it
            return [], "no NVIDIA driver on this machine: libcuda not found"
        if int(err) != 0:
            name = err.name if hasattr(err, "name") else str(int(err))
            if name == "CUDA_ERROR_NO_DEVICE":
                return [], "the NVIDIA driver sees no GPU"
            return [], f"the NVIDIA driver did not start ({name})"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return [], "the NVIDIA driver sees no GPU"
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
    except Exception as exc:  # a driver too old for the bindings, or a broken install
        return [], f"the NVIDIA driver could not be queried ({type(exc).__name__})"


def find_device(arch) -> tuple[dict | None, str]:
    """The first GPU whose compute capability is the descriptor's target, or (None, why)."""
    devices, why = list_devices()
    want = list(arch.compute_capability)
    for dev in devices:
        if dev["compute_capability"] == want:
            return dev, ""
    if devices:
        seen = ", ".join(f"{d['name']} (cc {d['compute_capability'][0]}.{d['compute_capability'][1]})" for d in devices)
        return None, f"no GPU of compute capability {want[0]}.{want[1]} here (found {seen})"
    return None, why
