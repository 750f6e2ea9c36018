"""The capture ring's record, as the daemon writes it and a capture tool
(``ibdump``, through ``verbs.capture``) reads it: directions, the record
header, the entry size.  The ring itself is a ``uapi.shm.Ring`` in the
tool's memory; the daemon's end is ``device.capture``.

A record is the packet as the device saw it -- BTH to pad, no ICRC -- after
a 64-byte header: CLOCK_REALTIME in nanoseconds taken at the tap, the
captured and the wire length, the local QP number, the direction, the IP
addresses (4 or 16 bytes) and UDP ports, and for a packet the fault
injector damaged, which bit it flipped after the ICRC was computed.

An InfiniBand port records whole frames as they are on the link -- LRH,
GRH if any, BTH .. pad, ICRC, VCRC -- with an address length of 0
(``IB_FRAME``: no IP addresses, no UDP ports).
"""

from __future__ import annotations

import struct

from ..enums import mtu_to_bytes

# Directions, as bits: a capture asks for RX, TX or both.
RX = 1
TX = 2
BOTH = RX | TX

NO_CORRUPTION = 0xFFFFFFFF
# ts_ns, caplen, wire length, local QPN, direction, address length, sport,
# dport, (2 pad), flipped bit or NO_CORRUPTION, source and destination
# address (4 or 16 bytes, zero-padded to 16)
RECORD = struct.Struct("<QIIIBBHHxxI16s16s")
assert RECORD.size == 64

#: the longest header run of any opcode: BTH + XRCETH + AtomicETH of an XRC
#: atomic request (device.capture checks it against the wire's opcode table)
MAX_HEADER_BYTES = 12 + 4 + 28
#: an IB frame's link headers and CRCs around the packet: LRH, GRH, ICRC, VCRC
IB_FRAME_EXTRA = 8 + 40 + 4 + 2
#: the address length of a record holding a whole InfiniBand frame
IB_FRAME = 0
MAX_LOG2_ENTRIES = 20          # 2^20 entries of ~4 KiB: 4 GiB of the tool's memory


def slot_size(max_mtu: int) -> int:
    """Bytes per ring entry for a device whose largest ibv_mtu is
    ``max_mtu``: one record header and the longest packet (the longest
    header run, the MTU, the pad, and an IB frame's link headers and
    CRCs), 64-byte aligned."""
    need = RECORD.size + MAX_HEADER_BYTES + mtu_to_bytes(max_mtu) + 3 + IB_FRAME_EXTRA
    return (need + 63) & ~63
