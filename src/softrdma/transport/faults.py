"""Fault injection: loss, duplication, reordering, delay and corruption,
as a bad network would do them -- one injector for a device's transmit
path (``rdma link set ... faults``) and the simulator's links.

On a device it is off by default and free when off (``Port.faults`` is
None and ``Port.route`` never looks further).  When on, every packet a
device transmits draws its fate here; delayed (and reordered) packets wait
in a heap that the daemon flushes when their time comes.  Corruption flips
one bit after the ICRC is computed, so the receiver's ICRC check drops the
packet -- over the same-daemon path, which has no ICRC, the port counts and
drops it.  The simulator's ``Link`` is its own settings and schedules the
fates on its virtual clock.  The counts are ``FaultCounter``s.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from .counters import DEVICE_FAULT_COUNTERS, FaultCounter, as_dict, new_fault_counters

SENT, DELIVERED = int(FaultCounter.sent), int(FaultCounter.delivered)
LOST, DUPLICATED, REORDERED = int(FaultCounter.lost), int(FaultCounter.duplicated), int(FaultCounter.reordered)
DELAYED, CORRUPTED = int(FaultCounter.delayed), int(FaultCounter.corrupted)


@dataclass
class FaultSettings:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0              # seconds added to every packet
    corrupt: float = 0.0
    reorder_delay: float = 0.001    # how far a reordered packet is held back (s)
    rate: float = 0.0               # bytes per second the link carries (0: no limit); packets are paced
    jitter = 0.0                    # (not a setting: a device's delay is exact)

    def active(self) -> bool:
        return bool(self.loss or self.dup or self.reorder or self.delay or self.corrupt or self.rate)

    @classmethod
    def from_dict(cls, d: dict) -> "FaultSettings":
        f = cls(**{k: float(v) for k, v in d.items() if k in cls.__dataclass_fields__})
        if not all(math.isfinite(v) for v in vars(f).values() if isinstance(v, float)):
            raise ValueError("fault settings must be finite numbers")
        for name in ("loss", "dup", "reorder", "corrupt"):
            if not 0.0 <= getattr(f, name) <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1")
        if f.delay < 0 or f.reorder_delay < 0:
            raise ValueError("delays cannot be negative")
        if f.rate < 0:
            raise ValueError("rate cannot be negative")
        return f

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Faults:
    """The fate of each packet put on a bad link (sans-IO: the time is
    passed in, the randomness is ``rng``).  ``settings``: anything with
    ``loss``, ``dup``, ``reorder``, ``corrupt`` (probabilities per packet),
    ``delay``, ``jitter``, ``reorder_delay`` (seconds), ``rate`` (bytes per
    second, optional: a packet leaves when the ones before it have), read
    on every packet (a test may change them between packets).  ``cnt``: what was done
    (``transport.counters.FaultCounter``).

    A lost packet has no fate; a duplicated one two, the copy held back as
    a reordered packet is; a delayed one arrives ``delay`` (+ up to
    ``jitter``) later, in order unless reordered; a corrupted one has one
    bit flipped (a bit position in the ``nbytes`` given), after its ICRC
    was computed.  ``hold``/``due``: a heap of packets waiting for their
    time, for a link that has no scheduler of its own (the daemon's)."""

    def __init__(self, settings, seed: int | None = None, rng: random.Random | None = None):
        self.settings = settings
        self.rng = rng if rng is not None else random.Random(seed)
        self.cnt = new_fault_counters()
        self.last_arrival = 0.0             # FIFO: delay and jitter alone never reorder
        self.next_free = 0.0                # a rate-limited link: when its last packet has left
        self.held: list = []                # (due, seq, item)
        self._seq = 0

    def fate(self, now: float, nbytes: int) -> list[tuple[float, int | None]]:
        """What happens to one packet of ``nbytes`` bytes: a list of
        (arrival time, bit position to flip or None) -- empty if lost, two
        entries if duplicated."""
        s, rng, c = self.settings, self.rng, self.cnt
        c[SENT] += 1
        if s.loss and rng.random() < s.loss:
            c[LOST] += 1
            return []
        rate = getattr(s, "rate", 0.0)
        if rate:                            # paced: it leaves once the packets before it have
            self.next_free = max(now, self.next_free) + nbytes / rate
            now = self.next_free
        copies = 1
        if s.dup and rng.random() < s.dup:
            c[DUPLICATED] += 1
            copies = 2
        out = []
        for copy in range(copies):
            bit = None
            if s.corrupt and rng.random() < s.corrupt:
                c[CORRUPTED] += 1
                bit = rng.randrange(nbytes) << 3 | rng.randrange(8)
            t = now + s.delay + (rng.random() * s.jitter if s.jitter else 0.0)
            if s.delay:
                c[DELAYED] += 1
            if copy or (s.reorder and rng.random() < s.reorder):
                if not copy:
                    c[REORDERED] += 1
                t += rng.random() * s.reorder_delay
            elif t < self.last_arrival:
                t = self.last_arrival
            else:
                self.last_arrival = t
            c[DELIVERED] += 1
            out.append((t, bit))
        return out

    def counters(self) -> dict[str, int]:
        """What ``rdma link set ... faults`` reports."""
        return as_dict(self.cnt, DEVICE_FAULT_COUNTERS)

    def hold(self, due: float, item) -> None:
        self._seq += 1
        heapq.heappush(self.held, (due, self._seq, item))

    def due(self, now: float) -> list:
        out = []
        held = self.held
        while held and held[0][0] <= now:
            out.append(heapq.heappop(held)[2])
        return out

    def next_due(self) -> float | None:
        return self.held[0][0] if self.held else None
