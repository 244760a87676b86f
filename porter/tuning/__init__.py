"""``porter tune``: search each kernel's configuration space per shape bucket and product.

the space (``space``: the knobs' combinations, those a rule refuses whatever the rest
collapsed) and buckets (``buckets``), the tasks (``tasks``: screen by L0's central time
(``model``), evaluate a candidate, time the top ones by L1, emulate a finalist), the engine
they run on (``engine``: Ray, local or a cluster; retries, timeouts, cancellation), the
cache (``cache``), the middle ranking stage (``ranking``: L1, or L0), the sweep
(``sweep``: products that generate the same code share its tasks), the result as data (``table``:
tuning/ARCH.PRODUCT.yaml, read back by the kernel variants) and the report (``report``).
"""
