"""The ``porter`` command line.

Each command group lives in its own module under ``porter/commands/`` and exposes
``register(subparsers)``; the module adds its parser(s) and sets ``func`` on them.

Every way a run can end badly ends in one line on stderr, never a traceback:
a ``PorterError`` (bad input, a missing toolchain piece) or a bad argument exits 2,
a file-system error (an unwritable folder, a full disk) exits 2 naming the path,
Ctrl-C exits 130, and a bug in porter itself exits 1 with the exception and where it
was raised (``PORTER_TRACEBACK=1`` shows the whole traceback, for porter's developers).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from porter import __version__
from porter.errors import PorterError

# Command modules, in the order their commands appear in --help.
COMMAND_MODULES = [
    "arch",
    "target",
    "plan",
    "diff",
    "kernel",
    "validate",
    "bench",
    "emu",
    "predict",
    "tune",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (what is wrong, and where to read more)
    instead of a usage block followed by the error."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def jobs_arg(text: str) -> int:
    """``--jobs N``: a worker count, 1 or more, or 0 for one per CPU."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (give 1 or more, or 0 for one per CPU)")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} workers: give 1 or more, or 0 for one per CPU")
    return value


def check_output_file(path: str, flag: str) -> None:
    """Fail before any work when ``path`` (given as ``flag``) cannot be written: a folder
    in the way, or a parent folder that cannot be created or written to."""
    from pathlib import Path

    target = Path(path)
    if target.is_dir():
        raise PorterError(f"{flag} {path}: is a folder; give a file name")
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PorterError(f"{flag} {path}: cannot create folder {parent} ({exc.strerror}); "
                          "give a path you can write to") from None
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PorterError(f"{flag} {path}: folder {parent} is not writable; give a path you can write to")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="porter",
        description="Retarget GPU kernels to a new GPU generation: descriptors, "
        "templates, NVRTC compiles, SASS checks, numerics and reports.",
    )
    parser.add_argument("--version", action="version", version=f"porter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"porter.commands.{name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C is (stop handing out work, keep what is
    finished, shut the worker pool down, say so), but exiting 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_terminate(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated(signum)


def _install_signal_handlers() -> dict:
    """SIGTERM and SIGHUP raise Terminated in the main thread; returns the old handlers
    (restored when main returns, so callers embedding porter keep theirs)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            old[signum] = signal.signal(signum, _on_terminate)
    return old


def interrupted_exit_code(exc: BaseException) -> int:
    """130 for Ctrl-C, 128 + N for signal N (143 for SIGTERM)."""
    return 128 + getattr(exc, "signum", 2)


_MAX_ERROR_CHARS = 2000


def _printable(text: str) -> str:
    """An error for a terminal: one line, control characters (ESC, NUL, newlines, bidi
    overrides) escaped rather than obeyed, and bounded in length whatever it quotes."""
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS - 3] + "..."
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _where(exc: BaseException) -> str:
    """file:line of the innermost frame that raised ``exc`` (for a one-line bug report)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown place"
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # --help, --version, or a bad argument (one line, see OneLineParser)
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    old_handlers = _install_signal_handlers()
    try:
        return int(args.func(args) or 0)
    except PorterError as exc:
        print(f"porter: error: {_printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("porter: interrupted", file=sys.stderr)
        return interrupted_exit_code(exc)
    except OSError as exc:
        # The file system said no (a folder that cannot be created, no space, no
        # permission): name the path; the command wrote its files atomically, so
        # nothing half-written is left behind.
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"porter: error: {_printable(where + str(exc.strerror or exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get("PORTER_TRACEBACK"):
            raise
        print(f"porter: internal error: {type(exc).__name__}: {exc} (at {_where(exc)}); "
              "this is a bug in porter: rerun with PORTER_TRACEBACK=1 and report the traceback",
              file=sys.stderr)
        return 1
    finally:
        import signal

        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
