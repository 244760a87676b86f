"""Errors the PTX simulator raises.

Every one is a ``PorterError`` (one line for a person, exit 2 from the CLI) that names
where it happened: the PTX file and line, the CTA and warp, and what was wrong.

An error that enforces a rule of the PTX ISA names the ISA section that states it: the
message gets the section from ``porter.emu.isa_rules`` when it is built (one table for the
whole simulator, not a citation at each raise site). ``CheckFailed`` (a checker caught the
kernel breaking a rule) is looked up in ``isa_rules.RULES``; a plain ``EmuError`` (a unit
refusing an operand the ISA forbids: a bad descriptor field, a tensor map the ISA's tensor
rules do not allow) and an ``Unsupported`` that states an ISA rule ("the ISA requires ...")
in ``isa_rules.PLAIN_RULES``. A message that already names "PTX ISA" keeps its own.
``Deadlock`` states no rule (it reports where the warps stopped).
"""

from __future__ import annotations

from porter.errors import PorterError


def _with_section(message: str, table: str) -> str:
    if "PTX ISA" in message or (table == "isa-stated" and "ISA" not in message):
        return message
    from porter.emu import isa_rules

    section = isa_rules.cite(message) if table == "checks" else isa_rules.cite_plain(message)
    return f"{message} [{section}]" if section is not None else message


class EmuError(PorterError):
    """The simulated kernel did something the PTX ISA forbids or porter's simulator cannot run."""

    exit_code = 1
    _rules: str | None = "plain"          # which isa_rules table cites this class's messages

    def __init__(self, message: str = "", *args):
        message = str(message)
        if self._rules is not None:
            message = _with_section(message, self._rules)
        super().__init__(message, *args)


class Unsupported(EmuError):
    """A PTX form outside the subset the simulator implements (input the simulator cannot take).
    Cited only when its message states an ISA rule ("the ISA requires ..."): the subset's own
    limits name no section."""

    exit_code = 2
    _rules = "isa-stated"


class CheckFailed(EmuError):
    """A checker caught the kernel breaking a rule (poisoned read, mbarrier misuse, race, ...).
    The message names the PTX ISA section that states the rule (``porter.emu.isa_rules``)."""

    _rules = "checks"


class Deadlock(EmuError):
    """Every live warp is parked and nothing asynchronous is pending (or the budget ran out)."""

    _rules = None


class CallStackOverflow(EmuError):
    """A call would nest deeper than the simulator's call-depth limit (runaway recursion): the
    kernel's own fault, not a deadlock (warps are not parked; one keeps calling). The ISA
    states no depth; on a device the stack overflows sooner."""

    _rules = None
