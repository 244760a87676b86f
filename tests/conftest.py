"""Suite-wide test settings and the shared descriptor fixtures.

Under CI (``CI`` set, as ``.ci/run`` runs there) hypothesis draws the same examples
every run: a property test must not pass or fail by the luck of the draw on the one
run that decides whether a change lands. Locally it explores new examples each run.
"""

import os

import pytest
from hypothesis import settings

from porter.descriptor.arch import load_arch

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# The shipped descriptors, shared by every test module that needs them.
@pytest.fixture(scope="session")
def hopper():
    return load_arch("hopper")


@pytest.fixture(scope="session")
def blackwell():
    return load_arch("blackwell")


@pytest.fixture(scope="session")
def emulate_planted():
    """``run(arch, kernel_name, edits, shape)``: render the kernel, apply the planted bug's
    text edits (each anchor must match exactly once, so a template change that moves the
    line fails the test instead of silently testing nothing), and run the broken copy in
    porter's simulator at ``shape`` with one seed; returns ``emulate``'s result."""
    from porter.commands.kernel import find_kernel
    from porter.runtime.emulated_runs import emulate
    from porter.kernels import family_module

    def run(arch, name, edits, shape):
        spec = find_kernel(name, arch)[0]
        source = family_module(spec.family).render(spec, arch)
        for old, new in edits:
            assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
            source = source.replace(old, new)
        return emulate(spec, arch, shapes=[shape], seeds=1, source=source)
    return run
