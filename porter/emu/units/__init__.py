"""The simulator's functional units, each a plain module testable alone.

Units know the PTX ISA and numpy only: no warps, no scheduler, and never porter's
generator encoders (``porter.kernels.encodings_*``, ``block_scale_layout``), so a
misreading shared by generator and simulator cannot pass both.
"""
