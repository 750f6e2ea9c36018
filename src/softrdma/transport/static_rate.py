"""A QP's static rate (ibv_ah_attr.static_rate, IBV_RATE_*): what an HCA's
inter-packet delay does to a sender whose path is slower than its link.

``StaticRate`` is a token bucket with the rate limiter's interface the
requester already holds a DCQCN reaction point to (``qp.rp``:
``advance``, ``tokens``, ``consume``, ``ready_at``, ``recovered``), so the
requester stops when the bucket is empty and ``QP.tick`` wakes it at the
next token -- the pacing is the requester's, not a queue's.  The bucket
holds a little burst (``BURST_S`` of the rate, at least one MTU packet) so
that a limited QP still sends whole packets.  ``limiter_for`` gives the
limiter an address vector asks for on a link of a given rate, or None
when the static rate is 0 (the port's) or not below the link's.  No I/O,
no clock: the caller passes ``now``.
"""

from __future__ import annotations

# ibv_rate -> Mb/s (ibv_rate_to_mbps)
IBV_RATE_MBPS = {2: 2500, 3: 10000, 4: 30000, 5: 5000, 6: 20000, 7: 40000, 8: 60000, 9: 80000, 10: 120000,
                 11: 14062, 12: 56250, 13: 112500, 14: 168750, 15: 25781, 16: 103125, 17: 206250, 18: 309375,
                 19: 28125, 20: 53125, 21: 425000, 22: 637500}
BURST_S = 0.0001                       # 100 us of the rate
MIN_BURST = 4096 + 64                  # one full packet


class StaticRate:
    """A token bucket at ``mbps`` Mb/s (``tokens`` in bytes)."""

    __slots__ = ("mbps", "bps", "burst", "tokens", "t", "rc")

    def __init__(self, mbps: int, now: float):
        self.mbps = mbps
        self.rc = mbps                          # (what ``rdma statistic`` shows of a limiter: Mb/s)
        self.bps = mbps * 125_000.0             # bytes per second
        self.burst = max(float(MIN_BURST), self.bps * BURST_S)
        self.tokens = self.burst
        self.t = now

    recovered = False                           # a static rate stays

    def advance(self, now: float) -> None:
        dt = now - self.t
        if dt > 0:
            self.t = now
            tokens = self.tokens + dt * self.bps
            self.tokens = tokens if tokens < self.burst else self.burst

    def consume(self, nbytes: int) -> None:
        self.tokens -= nbytes

    def ready_at(self) -> float:
        return self.t + (-self.tokens) / self.bps + 1e-6 if self.tokens <= 0 else self.t

    def as_driver(self) -> dict:
        return {"static_rate_mbps": self.mbps}


def limiter_for(static_rate: int, link_mbps: int, now: float) -> StaticRate | None:
    """The limiter of an address vector's ``static_rate`` on a link of
    ``link_mbps`` (None: no pacing -- IBV_RATE_MAX, an unknown value, or a
    rate the link does not exceed)."""
    mbps = IBV_RATE_MBPS.get(static_rate)
    if mbps is None or mbps >= link_mbps:
        return None
    return StaticRate(mbps, now)


__all__ = ["StaticRate", "limiter_for", "IBV_RATE_MBPS"]
