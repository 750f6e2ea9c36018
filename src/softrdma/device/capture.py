"""Packet capture: the tap on a device's data path and the ring a capture
tool (``ibdump``) reads.

Owns:

* ``Tap`` -- the captures open on one device.  ``Device.tap`` is None while
  there are none, so the data path pays one attribute test per packet when
  capture is off.  While it is set, the device calls ``Tap.packet`` for
  every RoCEv2 packet it hands to the network or to another device of the
  daemon (TX) and for every packet it takes in (RX): socket and loopback
  paths alike.  A packet a device sends to itself is recorded once, as TX
  (Linux's packet sockets drop the looped-back copy the same way).  An
  InfiniBand port calls ``Tap.frame`` instead, with every frame it hands to
  the fabric and every frame the fabric hands it, LRH to VCRC (the port
  layer's ``tap`` stays None on an IB port: it has no IP addresses to give).
  A record the tap cannot write is dropped and counted, never raised into
  the data path: a capture must not take the daemon down.
* ``Capture`` -- the daemon's end of one capture: the producer of a
  shared-memory ``Ring`` the tool created (its memory is the tool's, as
  ibdump's receive buffers are), the tool's eventfd doorbell, counters.
  ``put`` never blocks and never grows anything: a full ring drops the
  record and counts it (``dropped``), which the tool reports at exit.

The record layout both ends use is ``uapi.capture``.  A record is the
packet as the device saw it -- BTH to pad, no ICRC: the socket path strips
it on receive and computes it on send, the loopback path never has one --
with what the tool needs to rebuild the frame.  The tool computes the ICRC
over the frame it writes; a bit recorded as flipped is flipped in the
frame, so the frame carries the bad ICRC the wire carried.
"""

from __future__ import annotations

import os
from time import time_ns

import logging

from ..uapi.capture import BOTH, IB_FRAME, MAX_HEADER_BYTES, MAX_LOG2_ENTRIES, NO_CORRUPTION, RECORD, RX, TX, slot_size
from ..uapi.queues import WorkQueueProducer
from ..uapi.shm import RING_CONSUMER_SLEEPING, Ring
from ..wire.opcodes import OPCODE_TABLE

# the capture entry holds the longest header run of any opcode
assert MAX_HEADER_BYTES == max(i.length for i in OPCODE_TABLE if i is not None)
_DOORBELL = (1).to_bytes(8, "little")
_NO_ADDR = bytes(16)
log = logging.getLogger("softrdmad.capture")


class Capture:
    """One capture as the daemon holds it."""

    def __init__(self, ring: Ring, doorbell: int, directions: int, max_mtu: int):
        if directions not in (RX, TX, BOTH):
            raise ValueError(f"directions must be {RX} (rx), {TX} (tx) or {BOTH} (both), not {directions}")
        if ring.slot_size < slot_size(max_mtu):
            raise ValueError(f"capture entries of {ring.slot_size} bytes cannot hold this device's packets "
                             f"({slot_size(max_mtu)} needed)")
        if ring.nslots > 1 << MAX_LOG2_ENTRIES:
            raise ValueError(f"at most 2^{MAX_LOG2_ENTRIES} capture entries")
        self.handle = 0
        self.ring = ring
        self.producer = WorkQueueProducer(ring)        # no doorbell there: rung below, errors ignored
        self.doorbell = doorbell
        self.directions = directions
        self.room = ring.slot_size - RECORD.size
        self.packets = 0
        self.bytes = 0
        self.dropped = 0
        self.failed = False                  # a record failed (logged once)

    def put(self, ts: int, direction: int, qpn: int, src: bytes, dst: bytes, sport: int, dport: int,
            pkt, corrupt: int) -> None:
        slot = self.producer.next_slot()
        if slot is None:
            self.dropped += 1
            return
        n = len(pkt)
        c = n if n <= self.room else self.room         # only a foreign oversized packet is cut
        RECORD.pack_into(slot, 0, ts, c, n, qpn, direction, len(src), sport, dport, corrupt, src, dst)
        slot[RECORD.size:RECORD.size + c] = pkt if c == n else pkt[:c]
        self._published(n)

    def put_frame(self, ts: int, direction: int, qpn: int, frame) -> None:
        """One InfiniBand frame (LRH .. VCRC) as the link carries it."""
        slot = self.producer.next_slot()
        if slot is None:
            self.dropped += 1
            return
        n = len(frame)
        c = n if n <= self.room else self.room
        RECORD.pack_into(slot, 0, ts, c, n, qpn, direction, IB_FRAME, 0, 0, NO_CORRUPTION, _NO_ADDR, _NO_ADDR)
        slot[RECORD.size:RECORD.size + c] = frame if c == n else frame[:c]
        self._published(n)

    def _published(self, n: int) -> None:
        self.producer.commit()
        self.packets += 1
        self.bytes += n
        if self.ring.flags & RING_CONSUMER_SLEEPING:
            try:
                os.write(self.doorbell, _DOORBELL)
            except OSError:
                pass          # not an eventfd, or a full one: the reader polls within 50 ms regardless

    def stats(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "dropped": self.dropped}

    def close(self) -> None:
        self.ring.close()
        os.close(self.doorbell)


class Tap:
    """The captures of one device (``Device.tap`` while there is one)."""

    def __init__(self):
        self.captures: list[Capture] = []

    def packet(self, direction: int, qpn: int, src: bytes, dst: bytes, sport: int, dport: int, pkt,
               corrupt: int = NO_CORRUPTION) -> None:
        ts = time_ns()
        for cap in self.captures:
            if cap.directions & direction:
                try:
                    cap.put(ts, direction, qpn, src, dst, sport, dport, pkt, corrupt)
                except Exception:          # noqa: BLE001 -- the capture loses the record, the traffic goes on
                    _failed(cap)

    def frame(self, direction: int, qpn: int, frame) -> None:
        """An InfiniBand port's frame, LRH to VCRC."""
        ts = time_ns()
        for cap in self.captures:
            if cap.directions & direction:
                try:
                    cap.put_frame(ts, direction, qpn, frame)
                except Exception:          # noqa: BLE001 -- as above
                    _failed(cap)


def _failed(cap: Capture) -> None:
    cap.dropped += 1
    if not cap.failed:
        cap.failed = True
        log.exception("capture %d: a record could not be written (dropped and counted)", cap.handle)


__all__ = ["Capture", "Tap"]
