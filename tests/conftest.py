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
