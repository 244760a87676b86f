"""Host side: read arrays, build TMA tensor maps, load cubins and launch porter kernels.

GPU-free parts (argument validation, tensor-map parameters, launch plans) live in
``arrays``, ``tensormap`` and ``gemm.plan_gemm``; ``driver`` is the only module that
talks to the CUDA driver, and without a GPU it raises "no CUDA device: ...".
``device`` is the seam validation runs through (``Device``: a GPU via ``CudaDevice``,
or porter's emulator); ``cubins`` reads and checks the prepared manifest;
``device_check`` is the one-visit GPU run (``benchmarks/device_check.py``);
``fakedriver`` is the rehearsal GPU behind the real cuda.bindings argument conversion.
"""

from porter.runtime.arrays import TensorInfo, tensor_info
from porter.runtime.gemm import GemmPlan, gemm, plan_gemm
from porter.runtime.tensormap import TensorMapParams

__all__ = ["TensorInfo", "tensor_info", "GemmPlan", "gemm", "plan_gemm", "TensorMapParams"]
