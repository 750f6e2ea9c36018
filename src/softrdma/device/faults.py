"""Fault injection on a device's transmit path: loss, duplication,
reordering, delay and corruption, as a bad network would do them.

Off by default and free when off (``Device.faults`` is None and ``route``
never looks further).  When on, every packet a device transmits draws its
fate here; delayed (and reordered) packets wait in a heap that the daemon
flushes when their time comes.  Corruption flips one bit after the ICRC is
computed, so the receiver's ICRC check drops the packet -- over the
loopback path, which has no ICRC, it is counted and dropped here.  All
counts are kept for ``rdma link show -d`` / the tests.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field


@dataclass
class FaultSettings:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0              # seconds added to every packet
    corrupt: float = 0.0
    reorder_delay: float = 0.001    # how far a reordered packet is held back (s)

    def active(self) -> bool:
        return bool(self.loss or self.dup or self.reorder or self.delay or self.corrupt)

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
        return f

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def corrupt_position(bit: int, nbytes: int) -> int:
    """The bit of an ``nbytes``-long packet that corrupt bit ``bit`` (from
    ``Faults.fate``) flips: byte ``pos >> 3``, mask ``1 << (pos & 7)``."""
    return ((bit >> 3) % nbytes) << 3 | (bit & 7)


@dataclass
class FaultCounters:
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    delayed: int = 0
    corrupted: int = 0


@dataclass
class Faults:
    settings: FaultSettings
    seed: int | None = None
    counters: FaultCounters = field(default_factory=FaultCounters)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.held: list = []            # (due, seq, item)
        self._seq = 0

    def fate(self, now: float) -> list[tuple[float, int | None]]:
        """What happens to one packet: a list of (send time, corrupt bit or
        None) -- empty if lost, two entries if duplicated."""
        s, rng, c = self.settings, self.rng, self.counters
        if s.loss and rng.random() < s.loss:
            c.lost += 1
            return []
        copies = 2 if s.dup and rng.random() < s.dup else 1
        if copies == 2:
            c.duplicated += 1
        out = []
        for _ in range(copies):
            t = now + s.delay
            if s.delay:
                c.delayed += 1
            if s.reorder and rng.random() < s.reorder:
                c.reordered += 1
                t += rng.random() * s.reorder_delay
            bit = None
            if s.corrupt and rng.random() < s.corrupt:
                c.corrupted += 1
                bit = rng.getrandbits(16)
            out.append((t, bit))
        return out

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
