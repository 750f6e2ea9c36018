"""Packet capture on an opened device: what a ConnectX's sniffer QP is to
Mellanox's ibdump, for softrdma's ``ibdump``.

``PacketCapture(ctx, log2_entries, directions)`` creates the capture ring in
this process's memory (a memfd the daemon maps: ``2^log2_entries`` entries,
each one record and one whole packet of the device's largest MTU) and an
eventfd the daemon writes when the reader sleeps, and asks softrdmad to
start (``capture_start``).  From then on the daemon appends a record for
every packet the device sends or receives (``device.capture``; the record: ``uapi.capture``); a full ring
drops records and counts them.  ``read`` drains the ring without a system
call, ``wait`` sleeps until the daemon rings (at most ``timeout``: the
sleep flag and the producer index are the same unfenced Dekker pair as the
work queues'), ``stop`` ends the capture and returns the daemon's counters;
what the ring still holds stays readable.
"""

from __future__ import annotations

import errno
import os
import select
from typing import NamedTuple

from ..uapi.capture import BOTH, NO_CORRUPTION, RECORD, slot_size
from ..uapi.commands import CMD
from ..uapi.queues import WorkQueueConsumer
from ..uapi.shm import Ring
from .base import VerbsObject
from .errors import PyverbsRDMAError


class CapturedPacket(NamedTuple):
    ts_ns: int              # CLOCK_REALTIME at the daemon's tap
    direction: int          # uapi.capture.RX or TX
    qpn: int                # the local QP: the sender's (TX), the BTH destination (RX)
    src: bytes              # IP addresses, 4 or 16 bytes
    dst: bytes
    sport: int
    dport: int
    wire_len: int           # the packet's length (``packet`` is shorter only if it was cut)
    packet: bytes           # BTH .. pad, no ICRC
    flipped_bit: int | None  # the bit fault injection flipped after the ICRC was computed


class PacketCapture(VerbsObject):
    """A capture; closing it stops it (``stop``, unless done) and frees the ring."""

    def __init__(self, ctx, log2_entries: int, directions: int = BOTH):
        self.ctx = ctx
        max_mtu = ctx.query_port(1).max_mtu
        try:
            self.ring = Ring.create(1 << log2_entries, slot_size(max_mtu), "softrdma-capture")
        except (OSError, ValueError, OverflowError) as e:
            raise PyverbsRDMAError(f"Failed to allocate the capture ring: {e}",
                                   getattr(e, "errno", None) or errno.ENOMEM) from None
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            reply, _ = ctx.conn.call(CMD.capture_start, fds=[self.ring.fd, self.doorbell], directions=directions)
        except PyverbsRDMAError:
            self._release()
            raise
        self.handle = reply["capture"]
        self.entries = reply["entries"]
        self.consumer = WorkQueueConsumer(self.ring)
        self.stopped = False
        self.closed = False

    @property
    def entry_size(self) -> int:
        return self.ring.slot_size

    def read(self, limit: int = 1 << 30) -> list[CapturedPacket]:
        """The records the daemon has published, oldest first (at most ``limit``)."""
        cons = self.consumer
        n = min(cons.pending(), limit)
        if not n:
            return []
        ring, tail, hdr = self.ring, cons.tail, RECORD.size
        out = []
        for i in range(n):
            slot = ring.slot(tail + i)
            ts, caplen, wire_len, qpn, direction, alen, sport, dport, flipped, src, dst = RECORD.unpack_from(slot)
            out.append(CapturedPacket(ts, direction, qpn, src[:alen], dst[:alen], sport, dport, wire_len,
                                      bytes(slot[hdr:hdr + caplen]), None if flipped == NO_CORRUPTION else flipped))
        cons.release(n)
        return out

    def wait(self, timeout: float) -> bool:
        """Sleep until there is something to read or ``timeout`` passes;
        False if the daemon is gone (nothing more will come)."""
        cons, conn = self.consumer, self.ctx.conn
        if cons.pending():
            return True
        if cons.sleep():
            try:
                r, _, _ = select.select([self.doorbell, conn], [], [], timeout)
            finally:
                cons.wake()
            if self.doorbell in r:
                try:
                    os.read(self.doorbell, 8)
                except BlockingIOError:
                    pass
            if conn in r:
                conn.poll_events()
        return not conn.dead

    def stop(self) -> dict:
        """End the capture: {'packets', 'bytes', 'dropped'} as the daemon
        counted them.  The records already in the ring can still be read."""
        self.stopped = True
        reply, _ = self.ctx.conn.call(CMD.capture_stop, capture=self.handle)
        return {k: reply[k] for k in ("packets", "bytes", "dropped")}

    def _destroy(self) -> None:
        if not self.stopped and not self.ctx.conn.dead:
            try:
                self.stop()
            except PyverbsRDMAError:
                pass

    def _release(self) -> None:
        self.ring.close()
        os.close(self.doorbell)
        self.doorbell = -1


__all__ = ["PacketCapture", "CapturedPacket"]
