"""Splitting a message into chunk-sized fragments and joining them again."""

from __future__ import annotations

from .header import FLAG_LAST, HDR_LEN, MSG_DATA, Header, HeaderError, crc32


def fragments(seq: int, payload: bytes, chunk_size: int) -> list[tuple[Header, memoryview]]:
    """(header, payload slice) per fragment of message ``seq``: each fits one
    chunk of ``chunk_size`` bytes with its header; an empty message is one
    empty fragment.  Credits are filled in when a fragment is posted."""
    room = chunk_size - HDR_LEN
    if room <= 0:
        raise ValueError("chunk too small for the header")
    mv = memoryview(payload)
    total = len(mv)
    count = max(1, -(-total // room))
    if count > 0xFFFF:
        raise ValueError(f"message of {total} bytes needs more than 65535 fragments")
    out = []
    for i in range(count):
        part = mv[i * room:(i + 1) * room]
        out.append((Header(MSG_DATA, seq, i, count, len(part), total, flags=FLAG_LAST if i == count - 1 else 0,
                           crc=crc32(part)), part))
    return out


class Reassembler:
    """One connection's message being joined: fragments must come in order
    (an RC connection delivers them so); ``add`` returns the whole message
    after its last fragment, else None."""

    def __init__(self):
        self.seq = None
        self.parts: list[bytes] = []
        self.total = 0

    def add(self, h: Header, payload) -> bytes | None:
        if len(payload) != h.length:
            raise HeaderError(f"fragment length {len(payload)} != header's {h.length}")
        if crc32(payload) != h.crc:
            raise HeaderError(f"payload CRC mismatch in message {h.seq} fragment {h.frag_index}")
        if h.frag_index == 0:
            if self.seq is not None:
                raise HeaderError(f"message {h.seq} starts before message {self.seq} ended")
            self.seq, self.total, self.parts = h.seq, h.total, []
        elif self.seq != h.seq or len(self.parts) != h.frag_index:
            raise HeaderError(f"fragment {h.frag_index} of message {h.seq} out of order")
        self.parts.append(bytes(payload))
        if h.frag_index + 1 < h.frag_count:
            return None
        msg = b"".join(self.parts)
        self.seq, self.parts = None, []
        if len(msg) != self.total:
            raise HeaderError(f"message {h.seq}: {len(msg)} bytes, header says {self.total}")
        return msg
