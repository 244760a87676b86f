"""``porter tune``: search each kernel's configuration space per shape bucket and product.

space and buckets (``buckets``), the tasks (``tasks``: screen by L0, evaluate a candidate,
emulate a finalist), the engine they run on (``engine``: Ray, local or a cluster; retries,
timeouts, cancellation), the cache (``cache``), the middle ranking stage (``ranking``:
L0 only until L1 lands), the sweep (``sweep``), the result as data (``table``:
tuning/ARCH.PRODUCT.yaml, read back by the kernel variants) and the report (``report``).
"""
