"""porter's functional PTX simulator: runs the PTX porter generates on the CPU.

Results are "emulated": executed in porter's PTX simulator, not on a GPU. The
simulator is untimed and sequentially consistent; layouts and descriptors are read
from the PTX ISA independently of porter's generator.
"""
