"""Open-loop arrival schedules: when each request is *meant* to start, independent of how the server is doing.

Latency in the open loop is measured from these intended times (coordinated-omission corrected): a request that
had to wait because the server (or the generator) was slow carries that wait in its latency.
"""

from __future__ import annotations

import random

ARRIVALS = ("constant", "poisson")
"""Supported arrival processes."""


class Pacer:
    """Intended send times (seconds after the start) for a fixed mean rate.

    ``constant`` spaces requests exactly ``1/rate`` apart; ``poisson`` draws exponential gaps with mean ``1/rate``
    from a seeded generator, so a run is reproducible.
    """

    def __init__(self, rate: float, arrivals: str = "constant", seed: int = 0, offset: float = 0.0) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        if arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {arrivals!r}")
        self.rate = rate
        self.arrivals = arrivals
        self._rng = random.Random(seed)
        self.offset = offset
        """Shift of a constant schedule (lets several generators interleave into one constant stream)."""
        self.count = 0
        """How many times were handed out."""
        self._next = offset if arrivals == "constant" else self._rng.expovariate(rate)

    def peek(self) -> float:
        """The next intended time, without consuming it."""
        return self._next

    def take(self) -> float:
        """The next intended time; advances the schedule."""
        current = self._next
        self.count += 1
        if self.arrivals == "constant":
            self._next = self.offset + self.count / self.rate
        else:
            self._next = current + self._rng.expovariate(self.rate)
        return current

    def due(self, elapsed: float, limit: int | None = None) -> list[float]:
        """All intended times up to ``elapsed`` (at most ``limit`` in total over the schedule's life)."""
        out: list[float] = []
        while self._next <= elapsed and (limit is None or self.count < limit):
            out.append(self.take())
        return out
