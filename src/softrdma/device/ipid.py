"""What a receiver on a UDP socket knows of its peers' IPv4 IDs.

A UDP socket does not show the IPv4 header, so ``wire.icrc.verify`` solves
for the 16-bit ID and DF flag the ICRC covers.  That leaves 15 bits of
protection, and a few single-bit errors pass with a wrong ID (for a
1052-byte packet, one payload bit in ~8400).  The recovered ID is the
check that remains: a peer's IDs follow a pattern a damaged packet breaks.

Two kinds of senders exist:

* softrdma (and any sender on an unconnected socket with DF): Linux emits
  ID 0, and with UDP GSO the segments of one send get 0, 1, 2 ... so every
  ID is below ``SEGMENT_IDS``;
* the kernel's rxe and hardware: IDs from a counter, anywhere in 0..65535.

A peer is taken as the first kind once it has sent ``STRICT_AFTER`` packets
with ID 0 and DF, and no packet with a larger ID in between (a counter
passes 0 once in 65536 packets).  From then on a packet from it that only
verifies with DF clear or an ID >= ``SEGMENT_IDS`` is damaged: rejected.
``LENIENT_AFTER`` such packets in a row (and no good one) mean the peer is
now someone else (e.g. rxe took over the address): back to lenient.
"""

from __future__ import annotations

from ..wire.icrc import COMBO_DF as _DF

SEGMENT_IDS = 128          # UDP_MAX_SEGMENTS: the most IDs one GSO send spans
STRICT_AFTER = 4
LENIENT_AFTER = 64


class PeerIds:
    """Per source address: [ID-0 packets seen, strict?, rejections in a row]."""

    __slots__ = ("peers",)

    def __init__(self):
        self.peers: dict[bytes, list] = {}

    def strict(self, src: bytes) -> bool:
        """Is ``src`` known to send GSO segment IDs (the first kind)?"""
        st = self.peers.get(src)
        return st is not None and st[1]

    def accept(self, src: bytes, combo: int) -> bool:
        """``combo`` = recovered ident | DF << 16.  False: treat as corrupt."""
        st = self.peers.get(src)
        if st is None:
            st = self.peers[src] = [0, False, 0]
        segment = combo & _DF and (combo & 0xFFFF) < SEGMENT_IDS
        if st[1]:
            if segment:
                st[2] = 0
                return True
            st[2] += 1
            if st[2] < LENIENT_AFTER:
                return False
            st[0], st[1], st[2] = 0, False, 0          # a different sender now
            return True
        if combo == _DF:
            st[0] += 1
            if st[0] >= STRICT_AFTER:
                st[1] = True
        elif not segment:
            st[0] = 0
        return True
