"""Suite-wide test settings.

Under CI (``CI`` set, as ``.ci/run`` runs there) hypothesis draws the same examples
every run: a property test must not pass or fail by the luck of the draw on the one
run that decides whether a change lands. Locally it explores new examples each run.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
