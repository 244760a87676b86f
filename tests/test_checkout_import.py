"""porter imported from a source checkout with no install mapping over it: ``python -m porter``
or ``python benchmarks/bench_pipeline.py`` in the repository root beside a regular ``pip install
.`` put the checkout first on sys.path, where pyproject's package-dir mapping of validation/ to
porter.validation does not apply (the kernels stage stopped on "No module named
'porter.validation'"). Tested on a copy of the checkout's package folders, with this
environment's editable-install finder taken off sys.meta_path, so nothing maps the name."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
import porter, porter.validation.formats
print(porter.__file__)
print(porter.validation.__file__)
"""


def test_validation_is_importable_from_a_bare_checkout(tmp_path):
    for name in ("porter", "validation"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    package, validation = done.stdout.split()
    assert Path(package).resolve() == (tmp_path / "porter" / "__init__.py").resolve()       # the copy, not the install
    assert Path(validation).resolve() == (tmp_path / "validation" / "__init__.py").resolve()
