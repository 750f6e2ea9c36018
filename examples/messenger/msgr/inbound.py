"""One connection's receive side: fragments in, whole messages out, in
sequence order, duplicates dropped."""

from __future__ import annotations

from .frag import Reassembler
from .header import Header, HeaderError


class Inbound:
    def __init__(self):
        self.next_seq = 0           # the sequence number the next message must carry
        self.duplicates = 0         # fragments dropped as already delivered
        self._asm = Reassembler()

    def add(self, h: Header, payload) -> bytes | None:
        """The message completed by this fragment, or None (more fragments to
        come, or a duplicate dropped).  A gap in the sequence is a protocol
        error: the connection is broken."""
        if h.seq < self.next_seq:
            self.duplicates += 1
            return None
        if h.seq == self._asm.seq and h.frag_index < len(self._asm.parts):
            self.duplicates += 1    # a fragment of the message in progress, seen already
            return None
        if h.seq > self.next_seq:
            raise HeaderError(f"message {h.seq} arrived, expected {self.next_seq}: messages lost")
        msg = self._asm.add(h, payload)
        if msg is not None:
            self.next_seq += 1
        return msg
