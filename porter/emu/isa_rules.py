"""Which PTX ISA section states each rule the simulator enforces.

Numbering: PTX ISA 9.0 (CUDA 13.0). Chapter 9.7's sections there are 9.7.1 Integer, 9.7.2
Extended-Precision Integer, 9.7.3 Floating-Point, 9.7.4 Half Precision, 9.7.5 Mixed Precision
Floating-Point, 9.7.6 Comparison and Selection, 9.7.7 Half Precision Comparison, 9.7.8 Logic
and Shift, 9.7.9 Data Movement and Conversion, 9.7.10 Texture, 9.7.11 Surface, 9.7.12 Control
Flow, 9.7.13 Parallel Synchronization and Communication, 9.7.14 Warp Level Matrix Multiply-
Accumulate, 9.7.15 Asynchronous Warpgroup Level Matrix Multiply-Accumulate (wgmma), 9.7.16
TensorCore 5th Generation Family (tcgen05), 9.7.17 Stack Manipulation, 9.7.18 Video, 9.7.19
Miscellaneous. Sub-section numbers were checked against the online edition's section titles
(the 9.0-era edition, whose sm_101a notes say "renamed to sm_110a from PTX ISA version 9.0"):
9.7.1.8 div, 9.7.1.9 rem, 9.7.9.12 st.async, 9.7.9.25.3.1 cp.async, 9.7.9.25.4.1
cp.async.bulk, 9.7.9.25.4.2 cp.reduce.async.bulk, 9.7.9.27.1.2 cp.async.bulk.tensor,
9.7.9.27.1.3 cp.reduce.async.bulk.tensor, 9.7.9.28 tensormap.replace, 9.7.13.3
barrier.cluster, 9.7.13.14 elect.sync, 9.7.13.15.1 / .15.6 / .15.9 / .15.13 (mbarrier object size,
phase completion, mbarrier.init, mbarrier.arrive), 9.7.14.5.15 ldmatrix,
9.7.14.5.17 movmatrix, 9.7.16.7.1 tcgen05.alloc, 9.7.16.12.1 tcgen05.commit, 9.7.19.4 trap,
9.7.19.5 setmaxnreg. Other editions number differently (PTX ISA 9.2 puts the tensor copies at
9.7.9.25.5 and tensormap.replace at 9.7.9.26; the CUDA 13.4-era edition moves Data Movement to
9.7.10 and tcgen05 to 9.7.18; the 8.x editions, which CUDA 13.0's
CCCL headers still cite, lack 9.7.5 and 9.7.16, so their Data Movement is 9.7.8 and their
Parallel Synchronization 9.7.12). Where a sub-section's number could not be pinned, a citation
gives the section above it and the instruction's title (``PTX ISA 9.7.14 "mma"``), never a
guessed number.

A checker's error (``CheckFailed``) names the section that states the rule it caught the
kernel breaking (``RULES``); a unit's plain ``EmuError`` refusing an operand the ISA forbids,
and an ``Unsupported`` that states an ISA rule, name theirs from ``PLAIN_RULES``. The tables
live here, one place, rather than at each raise site: the checkers sit on the simulator's hot
paths, and a message's text is only built when a check fails. ``porter.emu.errors`` appends
the citation of the first fragment the message contains (a message that already names
"PTX ISA" keeps its own).

A plain error that enforces no ISA rule (the Python API's argument checks, porter's emulated
host encoding of tensor maps, the CUDA driver's tensor-map and launch limits, the simulator's
own limits) is listed in ``NOT_ISA`` with what states it instead. A check for something the
ISA does not state is not an error: it goes to the run's warnings (``LaunchState.warn``,
``LaunchResult.warnings``) with its reason, listed in ``WARNINGS``.
tests/test_emu_isa_rules.py walks every ``CheckFailed`` and ``EmuError`` raise site, every
``Unsupported`` whose message invokes the ISA, and every ``warn`` site of ``porter/emu``, and
fails on one these tables do not cover.
"""

from __future__ import annotations

# sections (PTX ISA 9.0 numbering; see the module doc)
_STATE = 'PTX ISA 5.1 "State Spaces"'
_GLOBAL = 'PTX ISA 5.1.4 "Global State Space"'
_PARAM = 'PTX ISA 5.1.6 "Parameter State Space"'
_SHARED = 'PTX ISA 5.1.7 "Shared State Space" (a CTA\'s shared window; in a cluster, its peers\' while they run)'
_GENERIC = 'PTX ISA 6.4.1 "Generic Addressing"'
_TENSOR = 'PTX ISA 5.5 "Tensors" (the tensor map)'
_MCM_RACE = 'PTX ISA 8 "Memory Consistency Model": a data race between weak accesses leaves the values undefined'
_UNDEFINED = ('PTX ISA 8 "Memory Consistency Model": a data race between weak accesses leaves the values undefined '
              '(the wgmma.mma_async read its operand bytes as an unordered write changed them, so its D is undefined)')
_PROXY = 'PTX ISA 8 "Memory Consistency Model: Proxies" and 9.7.13.4 "membar/fence"'
_DIV = 'PTX ISA 9.7.1.8 "div" / 9.7.1.9 "rem": division by zero yields an unspecified value'
_LDST = 'PTX ISA 9.7.9 "ld"/"st": the address must be naturally aligned to the access size'
_CVTA = 'PTX ISA 9.7.9 "cvta" and 6.4.1 "Generic Addressing"'
_MAPA = 'PTX ISA 9.7.9 "mapa": the target CTA rank must exist in the cluster'
_MAPA_GENERIC = ('PTX ISA 9.7.9 "mapa" / "getctarank" (without .shared::cluster, a holds a generic address '
                 'pointing to shared memory)')
_CP_ASYNC = ('PTX ISA 9.7.9.25.3.1 "cp.async" and "cp.async.wait_group" (the destination may be accessed only after '
             'the wait that covers it, by other threads only after a barrier that follows that wait)')
_CP_ASYNC_SIZE = 'PTX ISA 9.7.9.25.3.1 "cp.async": src-size larger than cp-size is undefined behaviour'
_BULK = 'PTX ISA 9.7.9.25.4.1 "cp.async.bulk" / 9.7.9.27.1.2 "cp.async.bulk.tensor"'
_BULK_MCAST = 'PTX ISA 9.7.9.27.1.2 "cp.async.bulk.tensor": ctaMask names CTAs of the cluster'
_BULK_DST = ('PTX ISA 9.7.9.27.1.2 "cp.async.bulk.tensor": the destination may be rewritten only after the mbarrier '
             'phase that covers the copy')
_BULK_ALIGN = ('PTX ISA 9.7.9.25.4.1 "cp.async.bulk" / 9.7.9.27.1.2 "cp.async.bulk.tensor" (shared::cta tensor boxes 128-byte '
               'aligned; bulk sizes and addresses multiples of 16 bytes)')
_LDMATRIX = 'PTX ISA 9.7.14.5.15 "ldmatrix" (each row address 16-byte aligned, in the shared window)'
_WGMMA_DESC = 'PTX ISA 9.7.15 "Matrix Descriptor Format" and 5.1.7 "Shared State Space" (operands in the CTA\'s shared memory)'
_TC_DESC = 'PTX ISA 9.7.16 "Shared memory descriptor" (Table 40: its fixed and reserved fields, swizzle modes)'
_REDUCE = 'PTX ISA 9.7.9.27.1.3 "cp.reduce.async.bulk.tensor" (its .redOp / type combinations)'
_BRA = 'PTX ISA 9.7.12.3 "bra": .uni asserts that the branch is non-divergent'
_BRX = ('PTX ISA 9.7.12.4 "brx.idx" (an index past the .branchtargets list is undefined; .uni asserts the same '
        'guard and index in every active thread)')
_TRAP = 'PTX ISA 9.7.19.4 "trap": aborts the kernel'
_BAR = 'PTX ISA 9.7.13.1 "bar, barrier" (barriers 0..15; b a multiple of the warp size, the same in every thread)'
_BAR_CLUSTER = 'PTX ISA 9.7.13.3 "barrier.cluster" (each thread arrives once, then waits, per phase)'
_FENCE_INIT = 'PTX ISA 9.7.13.4 "membar/fence": fence.mbarrier_init makes an mbarrier.init visible to the cluster'
_ELECT = 'PTX ISA 9.7.13.14 "elect.sync": the executing thread must be in membermask'
_MBAR_OBJ = 'PTX ISA 9.7.13.15.1 "Size and alignment of mbarrier object" (8 bytes, 8-byte aligned)'
_MBAR_INIT = 'PTX ISA 9.7.13.15.9 "mbarrier.init" (count 1..2^20-1; an mbarrier is used only after its init)'
_MBAR_TX = 'PTX ISA 9.7.13.15.2 "Contents of the mbarrier object" (tx-count range -(2^20-1)..2^20-1)'
_MBAR_ARRIVE = ('PTX ISA 9.7.13.15.6 "Phase Completion of the mbarrier object" and 9.7.13.15.13 "mbarrier.arrive" '
                '(arrivals beyond the pending count are undefined)')
_MBAR_NOCOMPLETE = ('PTX ISA 9.7.13.15.13 "mbarrier.arrive" (a .noComplete arrive-on that completes the phase '
                    'is undefined)')
_MBAR_PENDING = ('PTX ISA 9.7.13.15.17 "mbarrier.pending_count" (state must come from mbarrier.arrive.noComplete or '
                 'arrive_drop.noComplete)')
_ALIGNED = 'PTX ISA 9.7.14 "mma" (.sync.aligned: every thread of the warp executes the same instruction)'
_MMA_SCALE = 'PTX ISA 9.7.14 "mma" block scaling (Table 37: the selector values)'
_WGMMA = 'PTX ISA 9.7.15 "wgmma.mma_async" (.sync.aligned: every warp of the warpgroup, the same operands)'
_WGMMA_WAIT = ('PTX ISA 9.7.15 "wgmma.wait_group": accumulators and shared-memory operands may be accessed only '
               'after the wait that covers the wgmma')
_UNIFORM = ('PTX ISA 9.7.15 "wgmma.mma_async" / 9.7.16 "tcgen05.alloc" (.sync.aligned: every thread of the '
            'warp executes the instruction with the same operand values)')
_ST_BULK = 'PTX ISA 9.7.9 "st.bulk" (size a multiple of 8, the address 8-byte aligned)'
_SETMAXNREG = 'PTX ISA 9.7.19.5 "setmaxnreg" (a multiple of 8 in 24..256, executed by the whole warpgroup)'
_CLC = 'PTX ISA 9.7 "clusterlaunchcontrol.try_cancel" / "clusterlaunchcontrol.query_cancel"'
_TC_ALLOC = 'PTX ISA 9.7.16.7.1 "tcgen05.alloc / tcgen05.dealloc / tcgen05.relinquish_alloc_permit"'
_TC_TMEM = 'PTX ISA 9.7.16 "Tensor Memory" (128 lanes x 512 columns; access within allocated columns)'
_TC_LANES = 'PTX ISA 9.7.16 "Tensor Memory": warp i%4 of a warpgroup accesses lanes 32*(i%4)..32*(i%4)+31'
_TC_GROUP = 'PTX ISA 9.7.16 ".cta_group": all tcgen05 instructions of a kernel use the same .cta_group'
_TC_MMA = 'PTX ISA 9.7.16 "tcgen05.mma" (its operands and instruction descriptor)'
_TC_SCALE = 'PTX ISA 9.7.16 "tcgen05.mma" block scaling (scale factors in TMEM, ue4m3/ue8m0)'
_TC_WAIT = ('PTX ISA 9.7.16 "tcgen05.ld / tcgen05.st / tcgen05.wait" (a tcgen05.ld / tcgen05.st is complete '
            'after its tcgen05.wait::ld / ::st); 9.7.16.6.4.4 "Non-pipelined instructions, different thread" (the '
            'thread that issued an asynchronous tcgen05 operation waits for its completion before it synchronizes '
            'with the consumer: tcgen05.wait, tcgen05.fence::before_thread_sync, then the arrive) and 9.7.16.6.4.2 '
            '"Non-pipelined instructions, same thread" (tcgen05.st, tcgen05.wait::st, then the access)')
_TC_MCM = ('PTX ISA 9.7.16.6 "Memory Consistency Model for 5th generation of TensorCore operations" '
           '(tcgen05.fence::before/after_thread_sync around the thread synchronization)')
_TC_AFTER = ('PTX ISA 9.7.16.6.4.2 "Non-pipelined instructions, same thread" / 9.7.16.6.4.4 "Non-pipelined '
             'instructions, different thread" (tcgen05.mma, tcgen05.commit; mbarrier wait; '
             'tcgen05.fence::after_thread_sync; tcgen05.ld: "As tcgen05.ld is an asynchronous operation, the '
             'instruction tcgen05.fence::after_thread_sync is needed") and 9.7.16.6.3 "Specialized Inter-thread '
             'Synchronization for tcgen05 instructions"')
_TC_COMMIT = 'PTX ISA 9.7.16.12.1 "tcgen05.commit" (an operation is complete at the mbarrier of its commit)'
_TC_CP = 'PTX ISA 9.7.16 "tcgen05.cp"'
_TC_SHIFT = 'PTX ISA 9.7.16.9.3 "tcgen05.shift" (the lane of taddr aligned to 32)'
_ST_ASYNC = ('PTX ISA 9.7.9.12 "st.async" / 9.7.13 "red.async" (the mbarrier lies in the destination CTA\'s '
             'shared memory; the address aligned to the access size)')
_MOVMATRIX = 'PTX ISA 9.7.14.5.17 "movmatrix" (.sync.aligned: every thread of the warp executes it)'
_TMAP_REPLACE = 'PTX ISA 9.7.9.28 "tensormap.replace" (the fields, ordinals within the rank, Table 33\'s codes)'
_TMAP_CP = 'PTX ISA 9.7.13 "tensormap.cp_fenceproxy" (128 bytes; .sync.aligned, the same operands in every thread)'

# (a fragment of the message, the section that states the rule); the first fragment found wins
RULES: list[tuple[str, str]] = [
    ("which holds an undefined value", _UNDEFINED),
    ("asynchronous copy is still writing", _CP_ASYNC),     # (before "barrier ": the message names one)
    ("while the copy was in flight", _CP_ASYNC),
    ("the mbarrier of an st.async / red.async", _ST_ASYNC),
    ("misaligned async store", _ST_ASYNC),
    ("bulk copy must be the executing CTA's shared memory", _BULK),
    ("movmatrix is a warp collective", _MOVMATRIX),
    ("tensormap.replace .", _TMAP_REPLACE),
    ("misaligned tensor map", _TENSOR),
    ("tensormap.cp_fenceproxy", _TMAP_CP),
    ("shared-memory race in", _MCM_RACE),
    ("TMEM hand-off race in", _TC_MCM),
    ("without tcgen05.fence::after_thread_sync", _TC_AFTER),
    ("without tcgen05.fence::before_thread_sync", _TC_MCM),
    ("before that warp's tcgen05.wait::st", _TC_WAIT),
    ("(it has not completed: wait for the mbarrier of the tcgen05.commit", _TC_COMMIT),
    ("reads changed before the operation completed", _TC_COMMIT),
    ("tcgen05.commit multicast", _TC_COMMIT),
    ("still uses them (not complete)", _TC_COMMIT),
    ("tcgen05.cp source bytes", _TC_CP),
    ("lane of the tcgen05.shift address", _TC_SHIFT),
    ("tcgen05.mma operand bytes", _TC_MMA),
    ("tcgen05.mma with A in TMEM", _TC_MMA),
    ("tcgen05 operand (descriptor", _TC_MMA),
    ("scale factors must be duplicated", _TC_SCALE),
    ("decode ue4m3", _TC_SCALE),
    (".cta_group::2 needs a CTA pair", _TC_GROUP),
    ("of the .cta_group::2 operation has already exited", _SHARED),
    ("every tcgen05 instruction of a kernel must use the same .cta_group", _TC_GROUP),
    ("tcgen05.alloc destination", _TC_ALLOC),
    ("tcgen05.alloc.cta_group::2", _TC_ALLOC),
    ("tcgen05.dealloc.cta_group::2", _TC_ALLOC),
    ("tcgen05.relinquish_alloc_permit", _TC_ALLOC),
    ("must not increase between two allocations", _TC_ALLOC),
    ("TMEM not deallocated at exit", _TC_ALLOC),
    ("the address is not that of an allocation", _TC_ALLOC),
    ("that allocation has", _TC_ALLOC),
    ("freed by another", _TC_ALLOC),
    ("may access TMEM lanes", _TC_LANES),
    ("TMEM lane", _TC_TMEM),
    ("TMEM column", _TC_TMEM),
    ("never written since its", _TC_TMEM),
    ("wgmma.mma_async reads changed before the wgmma.wait_group", _WGMMA_WAIT),
    ("an accumulator of the wgmma.mma_async", _WGMMA_WAIT),
    ("every warp of a warpgroup must execute each one", _WGMMA),
    ("the whole warpgroup must execute each setmaxnreg", _SETMAXNREG),
    ("setmaxnreg", _SETMAXNREG),
    ("bra.uni", _BRA),
    ("brx.idx", _BRX),
    ("try_cancel", _CLC),
    ("query_cancel", _CLC),
    ("which has already exited", _SHARED),
    ("with no cluster barrier since", _SHARED),
    ("differs across the warp's lanes", _UNIFORM),
    ("st.bulk", _ST_BULK),
    ("is a warp collective (.sync.aligned)", _ALIGNED),
    ("a warp-collective (.sync/.aligned) instruction was reached by a diverged", _ALIGNED),
    ("mma.sync block_scale", _MMA_SCALE),
    ("fence.mbarrier_init", _FENCE_INIT),
    ("before its mbarrier.init", _MBAR_INIT),
    ("before mbarrier.init", _MBAR_INIT),
    ("mbarrier.init at", _MBAR_INIT),
    ("mbarrier address", _MBAR_OBJ),
    ("more arrivals than the barrier's count", _MBAR_ARRIVE),
    ("mbarrier.arrive.noComplete completed", _MBAR_NOCOMPLETE),
    ("mbarrier.pending_count of state", _MBAR_PENDING),
    ("tx-count", _MBAR_TX),
    ("more bytes landed than were expected", _MBAR_TX),
    ("the cluster barrier", _BAR_CLUSTER),
    ("named barrier", _BAR),
    ("barrier ", _BAR),
    ("executed trap", _TRAP),
    ("executed brkpt", 'PTX ISA 9.7.19.1 "brkpt": suspends execution (with no debugger, the kernel stops)'),
    ("device assertion failed", _TRAP),
    ("elect.sync", _ELECT),
    ("mapa to CTA rank", _MAPA),
    ("of generic address", _MAPA_GENERIC),
    ("inside that thread's own local frame", 'PTX ISA 5.1.5 "Local State Space" (private to each thread) and 9.7.9 '
                                             '"ld"/"st" (the address aligned to the access size)'),
    ("src-size", _CP_ASYNC_SIZE),
    ("cp.reduce", _REDUCE),
    (".tile::gather4 with a rank-", 'PTX ISA 9.7.9.27.1.2 "cp.async.bulk.tensor" (.tile::gather4 is a 2-D load mode)'),
    ("cp.async.bulk.tensor destination", _BULK_ALIGN),
    ("cp.async.bulk.tensor shared source", _BULK_ALIGN),
    ("cp.async.bulk size", _BULK_ALIGN),
    ("cp.async.bulk \x00 address", _BULK_ALIGN),
    ("ldmatrix row", _LDMATRIX),
    ("matrix descriptor \x00 reads shared bytes", _WGMMA_DESC),
    ("reads shared bytes", _WGMMA_DESC),
    ("(fixed constant 0b001)", _TC_DESC),
    ("swizzling mode (bits 61-63)", _TC_DESC),
    ("must be 0", _TC_DESC),
    ("multicast", _BULK_MCAST),
    ("while \x00 may still read it", _BULK_DST),
    ("may still read it", _BULK_DST),
    ("a bulk store's source", _BULK),
    ("lands in the shared memory of", _SHARED),
    ("coordinates for a rank-", _TENSOR),
    ("tensor map at param offset", _PARAM),
    ("integer division by zero", _DIV),
    ("integer remainder by zero", _DIV),
    ("by zero (", _DIV),                    # the raise site's template: integer {division|remainder} by zero
    ("outside the generic", _CVTA),
    ("is not in the shared window", _GENERIC),
    ("is in no memory window", _GENERIC),
    ("shared::cluster address names CTA rank", _SHARED),
    ("misaligned", _LDST),
    ("is not a multiple of 8", _LDST),
    ("parameter buffer", _PARAM),
    ("is outside every allocation", _GLOBAL),
    ("shared memory (", _SHARED),
    ("shared memory", _SHARED),
]

# sections the units' plain errors cite (besides the ones above)
_TENSOR_BOX = ('PTX ISA 5.5 "Tensors" (rank 1..5; the bounding box, its inner dimension a multiple of 16 bytes and '
               'within the swizzle span; traversal strides 1..8; OOB NaN fill for floating-point tensors only)')
_TENSOR_COORD = 'PTX ISA 9.7.9.27.1.2 "cp.async.bulk.tensor" (tensor coordinates are .s32)'
_TC_IDESC = 'PTX ISA 9.7.16 "Instruction descriptor" (Tables 42-44, 49, 54, 55: its fields per .kind)'
_TC_LAYOUT = 'PTX ISA 9.7.16 "Data path layout organization" (Layouts A-F: where D lies in TMEM for M and .cta_group)'
_TC_LDST = 'PTX ISA 9.7.16 "tcgen05.ld / tcgen05.st" (Table 47: .num per .shape, and the registers each takes)'
_TC_CP_SHAPE = 'PTX ISA 9.7.16 "tcgen05.cp" (the .shape and its multicast qualifier)'
_WGMMA_CORE = ('PTX ISA 9.7.15 "Shared Memory Matrix Layout" (core matrices of 8 rows x 16 bytes; transposed '
               'operands only for .f16/.bf16)')
_WGMMA_SHAPE = ('PTX ISA 9.7.15 "wgmma.mma_async" (shapes m64nNk16/k32/k8: N a multiple of 8 up to 256; '
                'imm-scale-a/b in {-1, 1})')
_MMA_TYPES = 'PTX ISA 9.7.14 "mma" (the element types of each shape)'
_MMA_SCALE_TABLE = 'PTX ISA 9.7.14 "mma" block scaling (Table 36: .kind, .scale_vec and the scale types)'
_CVT_NARROW = 'PTX ISA 9.7.9 "cvt" (conversions to FP8/FP6/FP4 pairs are .rn.satfinite)'
_MAXNTID = 'PTX ISA 11.4 ".maxntid" (Performance-Tuning Directives: the launch may not exceed it)'
_REQNCTA = 'PTX ISA 11.7 ".reqnctapercluster" (Cluster Dimension Directives: the launch must use that cluster)'
_LDMATRIX_NUM = 'PTX ISA 9.7.14.5.15 "ldmatrix" (.num is .x1, .x2 or .x4)'

# (a fragment of a plain EmuError's or an ISA-stating Unsupported's message, its section)
PLAIN_RULES: list[tuple[str, str]] = [
    (" idesc 0x", _TC_IDESC),
    ("D's lane must be", _TC_LAYOUT),
    ("does not hold whole consecutive rows of D", _TC_LAYOUT),
    ("bytes of K do not fit the", _TC_DESC),
    ("bytes of K are not whole 32-bit columns", _TC_TMEM),
    ("needs [scale-A-tmem] and [scale-B-tmem]", _TC_SCALE),
    ("nCols must be a power of 2", _TC_ALLOC),
    ("is not 1 or 2", _TC_GROUP),
    ("(Table 47)", _TC_LDST),
    ("register values, got", _TC_LDST),
    ("needs no multicast qualifier", _TC_CP_SHAPE),
    ("needs .warpx", _TC_CP_SHAPE),
    ("matrix descriptor", _WGMMA_DESC),
    ("wgmma operands are 8-, 16- or 32-bit elements", _WGMMA_SHAPE),
    ("(core matrix height)", _WGMMA_CORE),
    ("must be a positive multiple of 16 B", _WGMMA_CORE),
    ("MN-major (transposed) operands exist only", _WGMMA_CORE),
    ("wgmma N =", _WGMMA_SHAPE),
    ("is not a wgmma shape", _WGMMA_SHAPE),
    ("imm-scale-a/b must be 1 or -1", _WGMMA_SHAPE),
    ("ldmatrix .num must be", _LDMATRIX_NUM),
    ("element format", _MMA_TYPES),
    ("not in the ISA's Table 36", _MMA_SCALE_TABLE),
    ("the ISA requires .rn.satfinite", _CVT_NARROW),
    ("the ISA allows only initval 0", _ST_BULK),
    ("the ISA's rule for tensormap.replace", _TMAP_REPLACE),
    ("the ISA's shapes for integer mma", _MMA_TYPES),
    ("the ISA's state space for", 'PTX ISA 9.7.14.5.15 "ldmatrix" / 9.7.14.5.16 "stmatrix" (.ss is .shared or '
                                  '.shared::cta)'),
    ("takes no .trans: the ISA's rule for", 'PTX ISA 9.7.14.5.15 "ldmatrix" (.m8n16 has no .trans)'),
    ("needs .trans: the ISA's rule for", 'PTX ISA 9.7.14.5.15 "ldmatrix" / 9.7.14.5.16 "stmatrix" (.m16n16 and .m16n8 '
                                          'are .trans only)'),
    ("new_val must be an immediate, as the ISA requires", _TMAP_REPLACE),
    ("tensor map rank", _TENSOR_BOX),
    ("strides and", _TENSOR_BOX),
    ("the bounding box must be a multiple of 16 B", _TENSOR_BOX),
    ("swizzle span", _TENSOR_BOX),
    ("element stride", _TENSOR_BOX),
    ("NaN OOB fill needs a floating-point", _TENSOR_BOX),
    ("tensor map swizzle", _TENSOR_BOX),
    ("swizzle width", _TENSOR_BOX),
    ("swizzle mode", _TENSOR_BOX),
    ("tensor map OOB fill", _TENSOR_BOX),
    ("a tensor map is", _TENSOR),
    ("coordinates for a rank-", _TENSOR),
    ("does not fit in .s32", _TENSOR_COORD),
    ("the ISA's vector is", 'PTX ISA 9.7.16.10.9 "tcgen05.mma" (disable-output-lane: 4 x .b32 for .cta_group::1, '
                            '8 for ::2)'),
    ("scale-input-d must be an immediate in 0..15", 'PTX ISA 9.7.16.10.9 "tcgen05.mma" (scale-input-d: 0..15)'),
    ("the ISA allows it with .kind::f16 and .kind::tf32 only", 'PTX ISA 9.7.16.10.9 "tcgen05.mma" (scale-input-d only '
                                                                'with .kind::f16 / .kind::tf32)'),
    ("(.maxntid)", _MAXNTID),
    ("(.reqnctapercluster)", _REQNCTA),
]

# plain errors that enforce no PTX ISA rule: (a fragment of the message, what states it instead)
NOT_ISA: list[tuple[str, str]] = [
    ("launch: ", "the arguments of porter.emu.launch (the simulator's Python API)"),
    ("timed mode:", "the parameters of porter's timed simulator"),
    (": argument ", "the arguments of porter.emu.launch (the simulator's Python API)"),
    (" parameters, ", "the arguments of porter.emu.launch against the kernel's .param list"),
    ("threads is outside 1..1024", "CUDA's launch limit of 1024 threads per CTA (CUDA Programming Guide)"),
    ("is not a multiple of the cluster shape", "CUDA's launch rule for clusters (CUDA Programming Guide)"),
    ("global address", "the CUDA driver API (cuTensorMapEncodeTiled: globalAddress 16-byte aligned)"),
    ("must be in 1..2^32", "the CUDA driver API (cuTensorMapEncodeTiled: globalDim)"),
    ("below 2^40", "the CUDA driver API (cuTensorMapEncodeTiled: globalStrides multiples of 16 below 2^40)"),
    ("tensor map box size", "the CUDA driver API (cuTensorMapEncodeTiled: boxDim 1..256)"),
    ("tensor map data type", "the CUDA driver API (cuTensorMapEncodeTiled: CUtensorMapDataType)"),
    ("16U4_ALIGN8B packs sixteen", "the CUDA driver API (cuTensorMapEncodeTiled: CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B packs 16 elements in 8 bytes)"),
    ("L2 promotion", "the CUDA driver API (cuTensorMapEncodeTiled: CUtensorMapL2promotion)"),
    ("not a map from porter's emulated host", "porter's emulated host encoding of tensor maps"),
    ("checksum mismatch", "porter's emulated host encoding of tensor maps"),
    ("out-of-range enum code", "porter's emulated host encoding of tensor maps"),
    ("shared memory must be a 1-D uint8 array", "the units' Python API"),
    ("needs one address per lane", "the units' Python API"),
    ("must be 'a'", "the units' Python API"),
    ("major must be 'K' or 'MN'", "the units' Python API"),
    ("codes must fit in", "the units' Python API"),
    ("operand format", "the units' Python API (the format names)"),
    ("do not hold whole", "the units' Python API (operand bytes for a shape)"),
    ("do not share a K dimension", "the units' Python API (operands decoded by the caller)"),
    ("does not match A.B^T", "the units' Python API (operands decoded by the caller)"),
    ("registers, got", "the units' Python API (fragments gathered by the caller)"),
    ("A must be", "the units' Python API (operands decoded by the caller)"),
    ("scales must be", "the units' Python API (scales decoded by the caller)"),
    ("needs both scale_A and scale_B", "the units' Python API"),
    ("need scale_A and scale_B", "the units' Python API"),
    ("exactly one of a_desc and a_tmem", "the units' Python API"),
    ("TMEM(s) and shared memories", "the units' Python API"),
    ("bytes is not a whole number of", "the units' Python API (operand bytes for a shape)"),
    ("not simulated", "the simulator's subset (an Unsupported in all but name)"),
    ("the simulator's tensor maps", "the simulator's subset of tensor maps (an Unsupported in all but name)"),
    ("the 128 bytes tensormap.replace edits are not a map", "porter's emulated host encoding of tensor maps"),
    ("struct field", "the launch API's struct arguments (porter.emu.launch_struct: fields inside the struct, apart)"),
    ("at struct offset", "the launch API's struct arguments (porter.emu.launch_struct: pointers 8-, maps 64-byte "
                         "aligned, as the CUDA driver API requires of a CUtensorMap)"),
]


# checks for rules the ISA does not state: a warning (its fragment, the reason), never an error
WARNINGS: list[tuple[str, str]] = [
    ("(relaxed by --relax ",
     "an error of the PTX ISA rule cited, which this run was asked to relax (porter emu run --relax, "
     "launch(relax=...)): reported once per instruction, and the run goes on as if the rule held"),
    ("no tcgen05 pipeline orders the two",
     "the PTX ISA pipelines tcgen05.cp -> tcgen05.mma but lists no tcgen05.mma -> tcgen05.cp pair (9.7.16.6.2), so it "
     "states no order between an MMA and a later copy into the TMEM it reads; CUTLASS's sm100 block-scaled mainloop "
     "and DeepGEMM's sm100 FP8 GEMM rely on one thread's tcgen05 operations running in issue order, as the "
     "simulator runs them"),
    ("hold undefined values",
     "a data race leaves the values it reads undefined (PTX ISA 8), which breaks no rule until they are used; the "
     "simulator poisons the accumulators and stops at the first instruction that reads one"),
    ("wgmma.mma_async operation(s) never waited for",
     "the PTX ISA states no rule that a warp wait for its wgmma before exit; its results are lost"),
    ("tcgen05 operation(s)",
     "the PTX ISA states no rule that a tcgen05 operation be committed before exit; nothing tracks its end"),
    ("not covered by a cp.async.bulk.wait_group",
     "the PTX ISA (\"cp.async.bulk.wait_group\") lets the source be reused only after the wait that covers the "
     "store but states no rule for a thread that exits first; the CTA's shared memory is released at exit and may "
     "be reused before the store reads it, so kernels wait_group.read 0 before exit"),
    ("with no collector buffer filled",
     "the PTX ISA (9.7.16.10.9 \"tcgen05.mma\") states what ::use / ::lastuse read (the collector buffer) but no "
     "rule for a buffer no ::fill filled; the simulator reads the operand's memory"),
    ("read the same shared bytes",
     "the PTX ISA (9.7.15.5.1.2 \"Shared Memory Matrix Layout\") defines the operand by LBO and SBO alone and "
     "states no rule that they keep its elements apart; the hardware reads what they name"),
    ("crosses its",
     "the PTX ISA (9.7.15.5.1.2 canonical layouts) states no rule that a K slice lie inside one swizzle row; it is "
     "read where the layout's addresses continue"),
    ("shfl.sync lane",
     "the PTX ISA (9.7.8.6 \"shfl.sync\") leaves the value undefined when a thread sources a register from an "
     "inactive thread or one not in membermask, and states no error; the kernel's result then depends on it"),
    ("before the tcgen05.wait::ld that covers it",
     "the PTX ISA (9.7.16 \"tcgen05.ld\": it \"asynchronously loads data from the Tensor Memory ... into the "
     "destination register r\"; \"tcgen05.wait\": wait::ld \"causes the executing thread to block until all prior "
     "tcgen05.ld operations issued by the executing thread have completed\") states no rule that the destination "
     "not be accessed before the wait, as it does for wgmma.wait_group's accumulators; the simulator reads the "
     "loaded values, which hardware may not have delivered yet"),
    ("stores the same bytes at",
     "the PTX ISA (8 \"Memory Consistency Model\") has each read return the value committed by some write to "
     "the location; two unordered stores of the same bytes leave it no other value whichever lands last or however "
     "their bytes mix, so no value is undefined; the simulator keeps the later store as the bytes' last write"),
    ("starts inside its",
     "the PTX ISA (9.7.15.5.1.2 canonical layouts) states no rule that an MN-major swizzled operand start at a "
     "swizzle row; it is read where the layout's addresses continue"),
]


def cite(message: str) -> str | None:
    """The ISA section of the first rule fragment ``message`` contains, or None."""
    for fragment, section in RULES:
        if fragment in message:
            return section
    return None


def cite_plain(message: str) -> str | None:
    """The ISA section of the first ``PLAIN_RULES`` fragment ``message`` contains, or None."""
    for fragment, section in PLAIN_RULES:
        if fragment in message:
            return section
    return None


def not_isa_reason(message: str) -> str | None:
    """What states the rule of a plain error that enforces no ISA rule, or None."""
    for fragment, reason in NOT_ISA:
        if fragment in message:
            return reason
    return None


def warning_reason(message: str) -> str | None:
    for fragment, reason in WARNINGS:
        if fragment in message:
            return reason
    return None
