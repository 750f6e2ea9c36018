"""Outstanding SMPs of the SM (opensm's VL15 interface and request tracking), sans-IO.

The SM's state machines ``submit`` MADs with a callback; ``take(n)`` hands
the transport what it may put on the wire now (the window: opensm keeps up
to ``max_wire_smps`` in flight); ``deliver`` matches a response to its
request by the TID's low 32 bits (ibsim and umad2sim own the upper bits) and
runs the callback; ``expire`` re-sends a request that timed out, up to
``retries`` times, then runs the callback with ``None``.  ``idle`` is true
when nothing is queued or in flight: the end of a sweep phase.  No clock and
no socket here: the driver (``umad.drive``) owns both.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Callable

Callback = Callable[["bytes | None"], None]

_TID = struct.Struct(">Q")
TID_OFFSET = 8


class MadQueue:
    def __init__(self, retries: int = 3) -> None:
        self.retries = retries
        self._next_tid = 0x1000
        self.queue: deque[int] = deque()
        self.reqs: dict[int, list] = {}         # tid -> [mad, callback, tries]
        self.in_flight: set[int] = set()
        self.sent = 0
        self.timeouts = 0

    def submit(self, mad: bytearray, callback: Callback) -> int:
        tid = self._next_tid
        self._next_tid = (self._next_tid + 1) & 0xFFFFFFFF or 1
        _TID.pack_into(mad, TID_OFFSET, tid)
        self.reqs[tid] = [bytes(mad), callback, 0]
        self.queue.append(tid)
        return tid

    def take(self, n: int) -> list[tuple[int, bytes]]:
        out = []
        while self.queue and len(self.in_flight) < n:
            tid = self.queue.popleft()
            r = self.reqs.get(tid)
            if r is None:
                continue
            r[2] += 1
            self.in_flight.add(tid)
            out.append((tid, r[0]))
        self.sent += len(out)
        return out

    def deliver(self, mad) -> bool:
        if len(mad) < 24:
            return False
        tid = _TID.unpack_from(mad, TID_OFFSET)[0] & 0xFFFFFFFF
        r = self.reqs.pop(tid, None)
        if r is None:
            return False                      # late duplicate or not ours
        self.in_flight.discard(tid)
        r[1](bytes(mad))
        return True

    def expire(self, tid: int) -> None:
        r = self.reqs.get(tid)
        self.in_flight.discard(tid)
        if r is None:
            return
        self.timeouts += 1
        if r[2] <= self.retries:
            self.queue.appendleft(tid)
        else:
            del self.reqs[tid]
            r[1](None)

    @property
    def idle(self) -> bool:
        return not self.reqs
