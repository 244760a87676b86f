"""Errors the PTX simulator raises.

Every one is a ``PorterError`` (one line for a person, exit 2 from the CLI) that names
where it happened: the PTX file and line, the CTA and warp, and what was wrong.
"""

from __future__ import annotations

from porter.errors import PorterError


class EmuError(PorterError):
    """The simulated kernel did something the PTX ISA forbids or porter's simulator cannot run."""

    exit_code = 1


class Unsupported(EmuError):
    """A PTX form outside the subset the simulator implements (input the simulator cannot take)."""

    exit_code = 2


class CheckFailed(EmuError):
    """A checker caught the kernel breaking a rule (poisoned read, mbarrier misuse, race, ...).
    The message names the PTX ISA section that states the rule (``porter.emu.isa_rules``)."""

    def __init__(self, message: str = "", *args):
        from porter.emu.isa_rules import cite

        message = str(message)
        if "PTX ISA" not in message:
            section = cite(message)
            if section is not None:
                message = f"{message} [{section}]"
        super().__init__(message, *args)


class Deadlock(EmuError):
    """Every live warp is parked and nothing asynchronous is pending (or the budget ran out)."""
