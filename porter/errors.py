"""User-facing errors.

A ``PorterError`` carries one line that names what went wrong and where; the CLI
prints it and exits with code 2, never with a traceback.
"""


class PorterError(Exception):
    """Bad input or a missing toolchain piece: one clear line for a person."""

    exit_code = 2


class CompileError(PorterError):
    """NVRTC rejected a source; the message quotes the failing source line."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log
