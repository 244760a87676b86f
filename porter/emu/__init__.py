"""porter's functional PTX simulator: runs the PTX porter generates on the CPU.

Results are "emulated": executed in porter's PTX simulator, not on a GPU. The
simulator is untimed and sequentially consistent; layouts and descriptors are read
from the PTX ISA independently of porter's generator.
"""

from porter.emu.errors import CheckFailed, Deadlock, EmuError, Unsupported  # noqa: E402
from porter.emu.launch import Buffer, LaunchResult, Memory, launch, tensor_map  # noqa: E402

__all__ = ["launch", "tensor_map", "Memory", "Buffer", "LaunchResult", "EmuError", "CheckFailed", "Deadlock",
           "Unsupported"]
