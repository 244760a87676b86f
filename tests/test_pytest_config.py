"""pytest's configuration: skipped tests show their reason in every run (issue 20 item 10)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def _addopts() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])


def test_addopts_reports_skip_reasons():
    # -r with an 's' (or 'a'/'A', which include skips) prints "SKIPPED [n] file: reason"
    report_chars = "".join(opt[2:] for opt in _addopts() if opt.startswith("-r"))
    assert set(report_chars) & set("saA"), f"addopts {_addopts()} does not show skip reasons (-rs)"


def test_addopts_keeps_slow_tests_out_of_the_default_suite():
    opts = _addopts()
    assert "-m" in opts and opts[opts.index("-m") + 1] == "not slow"
