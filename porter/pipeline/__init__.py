"""``porter target``: the runbook's stages run as a DAG with content-addressed caching.

``run_target(...)`` loads the runbook, runs its stages generation by generation
(networkx topological generations), fans kernel builds out over a process pool,
stores each stage's and each kernel's result under ``build/<arch>/.stages/`` keyed
by a hash of its inputs, and writes the report. See ``runner.py``.
"""

from porter.pipeline.runner import RunOptions, RunResult, run_target

__all__ = ["RunOptions", "RunResult", "run_target"]
