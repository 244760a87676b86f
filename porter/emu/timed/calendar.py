"""A resource calendar: how much of a unit (issue slots, shared-memory bytes, tensor-core
FLOPs, L2 bytes) each stretch of cycles has left.

The functional simulator runs warps in quanta, not in time order, so a request can come
for a time earlier than one already booked; a "busy until" counter would queue it behind
the later one. The calendar keeps per bucket of ``width`` cycles the amount used, so a
late-simulated but early-timed request fills the gaps left before it.
"""

from __future__ import annotations


class Calendar:
    __slots__ = ("rate", "width", "cap", "used", "busy", "name")

    def __init__(self, rate: float, width: int = 16, name: str = ""):
        if rate <= 0:
            raise ValueError(f"calendar {name}: rate must be positive")
        self.rate = float(rate)              # units per cycle
        self.width = width
        self.cap = rate * width               # units per bucket
        self.used: dict[int, float] = {}
        self.busy = 0.0                      # total units booked (for utilisation)
        self.name = name

    def reserve(self, t: float, amount: float) -> float:
        """Book ``amount`` units from cycle ``t`` on; the cycle the last unit is served:
        no earlier than ``t + amount / rate``, nor than the bucket's bookings before it."""
        self.busy += amount
        w, used, cap, rate = self.width, self.used, self.cap, self.rate
        b = int(t) // w
        room_first = (b * w + w - t) * rate          # the first bucket offers what is left after t
        left = amount
        while True:
            u = used.get(b, 0.0)
            room = cap - u
            if room_first is not None:
                room = min(room, room_first)
                room_first = None
            if room > 1e-12:
                take = left if left <= room else room
                used[b] = u + take
                left -= take
                if left <= 1e-9:
                    return max(t + amount / rate, b * w + (u + take) / rate)
            b += 1
