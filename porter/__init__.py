"""porter: retarget GPU kernels to a new GPU generation.

Arch descriptors (arch/*.yaml) are loaded into typed ``Arch`` objects, kernel
templates (templates/*.cu.j2) are rendered from descriptor features, compiled with
NVRTC, disassembled with nvdisasm and checked against SASS signatures, limits and
numerics references.
"""

__version__ = "0.1.0"
