"""Megakernel planning: one persistent kernel runs a whole batch-1 decode step.

Modules, in the order data flows through them:

* ``isa``       the instruction format (the contract with the CUDA interpreter and the VM)
* ``hw``        the arch figures the planner reads (SM count, HBM bandwidth, smem ring)
* ``dag``       the instruction DAG of one Llama decode step, sized for an arch
* ``scheduler`` per-SM queues: round-robin or critical-path list scheduling
* ``checker``   proofs: every instruction once, no circular wait, no data race
* ``latency``   queue simulation -> predicted step latency vs the memory floor
* ``encode``    scheduled DAG -> int32 instruction tensor + counters + tensor table
* ``plan``      ``build_plan(arch, model_cfg, pos=...)``: all of the above in one call

The Python VM that executes an encoded program is ``porter.validation.megakernel_vm``.
"""
