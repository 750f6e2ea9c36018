"""The messenger's fixed-size message header.

Every fragment on the wire starts with one 32-byte header, little endian:

    magic u32 | type u8 | flags u8 | credits u16 | seq u64 |
    frag_index u16 | frag_count u16 | length u32 | total u32 | crc u32 ... (pad)

``seq`` numbers messages per connection (all fragments of a message share
it), ``length`` is this fragment's payload, ``total`` the whole message's,
``crc`` the CRC-32 of this fragment's payload, ``credits`` the receive
buffers the sender returns to the peer (piggybacked on any message).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = 0x4D534752          # "MSGR"
_FMT = struct.Struct("<IBBHQHHIII")
HDR_LEN = 32                # _FMT.size (28) padded to 32
assert _FMT.size <= HDR_LEN

MSG_DATA = 1                # a fragment of an application message
MSG_CREDIT = 2              # credits only, no payload

FLAG_LAST = 0x01            # the message's last fragment


class HeaderError(ValueError):
    """A fragment whose header or payload is not what the protocol allows."""


@dataclass
class Header:
    type: int
    seq: int
    frag_index: int = 0
    frag_count: int = 1
    length: int = 0
    total: int = 0
    credits: int = 0
    flags: int = 0
    crc: int = 0

    def pack_into(self, buf, offset: int = 0) -> None:
        _FMT.pack_into(buf, offset, MAGIC, self.type, self.flags, self.credits, self.seq,
                       self.frag_index, self.frag_count, self.length, self.total, self.crc)

    def pack(self) -> bytes:
        b = bytearray(HDR_LEN)
        self.pack_into(b)
        return bytes(b)


def unpack(buf, offset: int = 0) -> Header:
    """The header at ``offset``; HeaderError for a wrong magic, type or shape."""
    if len(buf) - offset < HDR_LEN:
        raise HeaderError("short header")
    magic, typ, flags, credits, seq, idx, cnt, length, total, crc = _FMT.unpack_from(buf, offset)
    if magic != MAGIC:
        raise HeaderError(f"bad magic {magic:#x}")
    if typ not in (MSG_DATA, MSG_CREDIT):
        raise HeaderError(f"bad type {typ}")
    if cnt == 0 or idx >= cnt or length > total:
        raise HeaderError(f"bad fragment {idx}/{cnt} length {length}/{total}")
    return Header(typ, seq, idx, cnt, length, total, credits, flags, crc)


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF
