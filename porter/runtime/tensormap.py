"""TMA tensor maps: the parameters of ``cuTensorMapEncodeTiled``, checked before the driver sees them.

``TensorMapParams`` holds what the driver call takes (data type, dims and box innermost
first, byte strides of the outer dims, swizzle). ``check()`` applies the driver's
documented rules with one-line PorterErrors that say which map and which rule, so a
wrong map is caught on a machine without a GPU; ``encode()`` makes the 128-byte
CUtensorMap through cuda.bindings.driver (needs the NVIDIA driver library).
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.errors import PorterError

# CUtensorMapDataType names and element sizes in bytes.
DATA_TYPES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
              "FLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2}
# Swizzle name -> the span (bytes) one box row may cover.
SWIZZLE_SPAN = {"NONE": None, "32B": 32, "64B": 64, "128B": 128, "128B_ATOM_32B": 128}
MAX_RANK = 5
MAX_BOX = 256
GLOBAL_ALIGN = 16
MAX_DIM = 1 << 32
MAX_STRIDE = 1 << 40


@dataclass(frozen=True)
class TensorMapParams:
    name: str                          # which map, for messages ("gemm.bf16 tma_a")
    data_type: str                     # a DATA_TYPES key
    dims: tuple[int, ...]              # elements, innermost first
    strides: tuple[int, ...]           # bytes between consecutive indices of dims[1:]
    box: tuple[int, ...]               # elements per TMA copy, innermost first
    swizzle: str = "NONE"
    element_strides: tuple[int, ...] = ()
    l2_promotion: str = "L2_256B"
    oob_fill: str = "NONE"

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def element_bytes(self) -> int:
        return DATA_TYPES[self.data_type]

    @property
    def box_bytes(self) -> int:
        n = self.element_bytes
        for b in self.box:
            n *= b
        return n

    def check(self, address: int | None = None) -> "TensorMapParams":
        """Raise PorterError naming the rule a driver would reject (or silently mis-copy)."""
        where = f"tensor map {self.name}"
        if self.data_type not in DATA_TYPES:
            raise PorterError(f"{where}: data type {self.data_type!r} unknown; use one of {', '.join(DATA_TYPES)}")
        if not 1 <= self.rank <= MAX_RANK:
            raise PorterError(f"{where}: rank {self.rank} must be 1..{MAX_RANK}")
        if len(self.strides) != self.rank - 1 or len(self.box) != self.rank:
            raise PorterError(f"{where}: {self.rank} dims need {self.rank - 1} strides and {self.rank} box sizes, "
                              f"got {len(self.strides)} and {len(self.box)}")
        if self.element_strides and (len(self.element_strides) != self.rank
                                     or not all(1 <= e <= 8 for e in self.element_strides)):
            raise PorterError(f"{where}: element strides {self.element_strides} must be {self.rank} values in 1..8")
        for i, d in enumerate(self.dims):
            if not 0 < d <= MAX_DIM:
                raise PorterError(f"{where}: dim {i} = {d} must be in 1..2^32")
        for i, s in enumerate(self.strides):
            if s % GLOBAL_ALIGN or not 0 < s < MAX_STRIDE:
                raise PorterError(f"{where}: stride of dim {i + 1} = {s} B must be a positive multiple of "
                                  f"{GLOBAL_ALIGN} B (pad the row to {-(-s // GLOBAL_ALIGN) * GLOBAL_ALIGN} B)")
        inner = self.dims[0] * self.element_bytes
        if self.strides and self.strides[0] < inner:
            raise PorterError(f"{where}: stride of dim 1 = {self.strides[0]} B is smaller than a row of "
                              f"dim 0 ({inner} B): rows would overlap")
        for i, b in enumerate(self.box):
            if not 0 < b <= MAX_BOX:
                raise PorterError(f"{where}: box size {b} in dim {i} must be in 1..{MAX_BOX}")
            if b > self.dims[i]:
                raise PorterError(f"{where}: box size {b} in dim {i} exceeds the tensor's {self.dims[i]}")
        row = self.box[0] * self.element_bytes
        if row % 16:
            raise PorterError(f"{where}: the inner box row is {row} B; it must be a multiple of 16 B")
        if self.swizzle not in SWIZZLE_SPAN:
            raise PorterError(f"{where}: swizzle {self.swizzle!r} unknown; use one of {', '.join(SWIZZLE_SPAN)}")
        span = SWIZZLE_SPAN[self.swizzle]
        if span is not None and row > span:
            raise PorterError(f"{where}: the inner box row is {row} B but {self.swizzle} swizzle covers "
                              f"at most {span} B; shrink box[0] to {span // self.element_bytes}")
        if address is not None and address % GLOBAL_ALIGN:
            raise PorterError(f"{where}: global address 0x{address:x} is not {GLOBAL_ALIGN}-byte aligned")
        return self

    def encode_args(self, address: int, drv=None) -> tuple:
        """The positional arguments of ``cuTensorMapEncodeTiled`` for the tensor at ``address``,
        in the binding's own types: dims and strides as ``cuuint64_t``, box and element
        strides as ``cuuint32_t`` (cuda.bindings refuses plain ints there, ARCH_FACTS
        "Host side"). Needs only the binding module, not the driver library."""
        self.check(address)
        if drv is None:
            from porter.runtime import driver

            drv = driver.bindings()
        u64, u32 = drv.cuuint64_t, drv.cuuint32_t
        return (getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{self.data_type}"), self.rank,
                int(address),
                [u64(d) for d in self.dims], [u64(s) for s in self.strides],
                [u32(b) for b in self.box], [u32(e) for e in (self.element_strides or (1,) * self.rank)],
                drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{self.swizzle}"),
                getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{self.l2_promotion}"),
                getattr(drv.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{self.oob_fill}"))

    def encode(self, address: int) -> bytes:
        """The 128-byte CUtensorMap for the tensor at device ``address`` (needs the driver)."""
        from porter.runtime import driver

        drv = driver.bindings()
        result = driver.call(drv.cuTensorMapEncodeTiled, *self.encode_args(address, drv),
                             what=f"cuTensorMapEncodeTiled for {self.name}")
        tensor_map = driver.check(result, f"cuTensorMapEncodeTiled for {self.name}")
        return driver.tensor_map_bytes(tensor_map)

    def to_dict(self) -> dict:
        return {"name": self.name, "data_type": self.data_type, "dims": list(self.dims),
                "strides": list(self.strides), "box": list(self.box), "swizzle": self.swizzle}


def matrix_map(name: str, data_type: str, rows: int, cols: int, row_stride_bytes: int,
               box_cols: int, box_rows: int, swizzle: str) -> TensorMapParams:
    """A 2-D row-major matrix (cols innermost) loaded in box_rows x box_cols tiles."""
    return TensorMapParams(name, data_type, (cols, rows), (row_stride_bytes,), (box_cols, box_rows),
                           swizzle).check()
