"""The ``porter`` command line.

Each command group lives in its own module under ``porter/commands/`` and exposes
``register(subparsers)``; the module adds its parser(s) and sets ``func`` on them.
A ``PorterError`` anywhere ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from porter import __version__
from porter.errors import PorterError

# Command modules, in the order their commands appear in --help.
COMMAND_MODULES = [
    "arch",
    "target",
    "plan",
    "diff",
    "kernel",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="porter",
        description="Retarget GPU kernels to a new GPU generation: descriptors, "
        "templates, NVRTC compiles, SASS checks, numerics and reports.",
    )
    parser.add_argument("--version", action="version", version=f"porter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"porter.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PorterError as exc:
        print(f"porter: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("porter: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
