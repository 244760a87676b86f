"""mbarrier objects, as the PTX ISA's "Parallel Synchronization and Communication
Instructions: mbarrier" section defines them.

State of one barrier: the expected arrival count set by ``init``, the pending arrival
count of the current phase, a signed transaction count (``expect-tx`` adds,
``complete-tx`` subtracts; a complete-tx may land before its expect-tx within a phase),
and the phase number. The current phase completes when the pending count reaches zero
and the tx-count is zero; then the phase number advances and the pending count resets.
``try_wait.parity P`` is true once the phase with parity P has completed, i.e. when the
current phase's parity differs from P.

Checked here (each a CheckFailed naming the barrier): use before init, re-init while
warps wait on it, arrivals beyond the expected count within a phase (the phase would
otherwise swallow them), tx-count beyond the ISA's range, and a phase completed with a
negative tx-count (more bytes delivered than expected).
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.emu.errors import CheckFailed

TX_LIMIT = (1 << 20) - 1        # the ISA's tx-count range is [-(2^20 - 1), 2^20 - 1]
COUNT_LIMIT = (1 << 20) - 1


@dataclass
class MBarrier:
    where: str                   # "CTA 0 shared 0x34000", for messages
    expected: int = 0
    pending: int = 0
    tx: int = 0
    phase: int = 0
    initialised: bool = False
    waiters: int = 0
    on_complete: object = None   # called when a phase completes (the scheduler lets waiters run)

    def init(self, count: int) -> None:
        if not 1 <= count <= COUNT_LIMIT:
            raise CheckFailed(f"mbarrier.init at {self.where}: count {count} outside 1..{COUNT_LIMIT}")
        if self.waiters:
            raise CheckFailed(f"mbarrier.init at {self.where} while {self.waiters} warp(s) wait on it")
        self.expected = self.pending = count
        self.tx = 0
        self.phase = 0
        self.initialised = True

    def _require_init(self, what: str) -> None:
        if not self.initialised:
            raise CheckFailed(f"{what} on the mbarrier at {self.where} before mbarrier.init")

    def expect_tx(self, nbytes: int) -> None:
        self._require_init("expect_tx")
        self.tx += nbytes
        if self.tx > TX_LIMIT:
            raise CheckFailed(f"mbarrier at {self.where}: tx-count {self.tx} exceeds {TX_LIMIT} "
                              f"(phase {self.phase}, pending arrivals {self.pending})")

    def arrive(self, count: int = 1, who: str = "") -> bool:
        """Arrive ``count`` times; True when this completed the phase."""
        self._require_init("arrive")
        if count > self.pending:
            raise CheckFailed(f"mbarrier at {self.where}: {count} arrival(s){' by ' + who if who else ''} "
                              f"but only {self.pending} of {self.expected} remain in phase {self.phase} "
                              f"(tx-count {self.tx}): more arrivals than the barrier's count")
        self.pending -= count
        return self._maybe_complete()

    def complete_tx(self, nbytes: int) -> bool:
        self._require_init("complete_tx")
        self.tx -= nbytes
        if self.tx < -TX_LIMIT:
            raise CheckFailed(f"mbarrier at {self.where}: tx-count {self.tx} below -{TX_LIMIT}")
        return self._maybe_complete()

    def _maybe_complete(self) -> bool:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected
            if self.on_complete is not None:
                self.on_complete()
            return True
        if self.pending == 0 and self.tx < 0:
            raise CheckFailed(f"mbarrier at {self.where}: all {self.expected} arrivals of phase {self.phase} "
                              f"are in but {-self.tx} more bytes landed than were expected (expect_tx too small?)")
        return False

    def phase_done(self, parity: int) -> bool:
        """try_wait.parity: has the phase with this parity completed?"""
        self._require_init("try_wait")
        return (self.phase & 1) != (parity & 1)

    def state(self) -> str:
        return (f"phase {self.phase} (parity {self.phase & 1}), {self.pending} of {self.expected} arrivals "
                f"pending, tx-count {self.tx}")
