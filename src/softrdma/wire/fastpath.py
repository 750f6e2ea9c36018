"""The per-packet loops of the RoCEv2 data path, and which implementation
runs them.

Three loops carry the bulk of a large transfer, one packet after another
with nothing to decide between them:

* ``build_middles`` -- the MIDDLE packets of one message (BTH from the
  QP's template with only the PSN and AckReq patched, the payload, the
  ICRC), and its FIRST and LAST when they are as long, laid out as the
  segments of one UDP GSO send (segment k: IP ID ``id0`` + k);
* ``verify_segments`` -- a UDP GRO buffer from a peer that sends GSO
  segments: every segment's framing (``packet.rx_check``) and ICRC, under
  the IP ID its position gives it (``icrc.Ipv4Flow``: segment k, ID k);
* ``place_middles`` -- the in-order MIDDLE packets of an RDMA WRITE or a
  SEND in such a buffer, copied to where they go;
* ``icrc_v4`` -- one packet's ICRC bytes for an IPv4 flow and IP ID (the
  packets a socket sends one by one or appends to a run);
* ``vcrc`` -- the VCRC of a native InfiniBand packet (``wire.lrh``), whose
  per-byte CRC-16 loop Python would run at a few MB/s;
* ``ib_build_run`` / ``ib_verify_packets`` -- an IB port's bulk loops (a
  SegmentRun as PACKETS entries, a PACKETS message checked whole): their
  references and the choice between them are ``wire.lrh``'s
  (``build_run``, ``verify_packets``).

``place_middles`` and ``Segments`` also take packets with bytes around
each (an IB packet's PACKETS length and LRH before, its VCRC after).

Each exists twice: the Python reference below, and the compiled
``_fastpath`` (built from ``_fastpath.c`` by ``pip install`` where a C
compiler and the Python headers are present).  The module-level names are
the compiled ones when they are there, else the reference; the tests run
both on the same inputs and compare every byte.  ``SOFTRDMA_DATAPATH=python``
in the environment keeps the reference (``IMPL`` says which runs).

The compiled CRC-32 is ISA-L's when the ``isal`` package is installed (its
``crc32_gzip_refl``, the function behind ``isal_zlib.crc32``, found in the
loaded module), else zlib's -- the same results (``icrc.crc32``).

``SegmentRun`` is what a requester emits instead of a run of MIDDLE packets
when its QP's packets leave through a socket (``qp.tx_runs``): one object
for up to 64 packets; ``packets()`` builds them one by one for any path that
needs them separately (a capture, fault injection, a same-daemon peer).
"""

from __future__ import annotations

import os
import struct

from .icrc import ICRC, Ipv4Flow
from .opcodes import OPCODE_TABLE, PAYLOAD_MASK

BTH_BYTES = 12
ICRC_BYTES = 4
MAX_SEGMENTS = 64          # IDs of one GSO send that a receiver takes as segment IDs (ipid.SEGMENT_IDS covers them)
_BTH_PSN = struct.Struct(">BBBB")


def opcode_table() -> bytes:
    """256 bytes: each opcode's header length, | 0x80 if a payload may
    follow; 0 for an opcode that does not exist (``packet.rx_check``'s
    facts, from ``OPCODE_TABLE``)."""
    t = bytearray(256)
    for op, info in enumerate(OPCODE_TABLE):
        if info is not None:
            t[op] = info.length | (0x80 if info.mask & PAYLOAD_MASK else 0)
    return bytes(t)


_OP_TABLE = opcode_table()


# -- the Python reference -------------------------------------------------

def py_build_middles(out, hdr, payload, mtu: int, count: int, psn0: int, ackreq_last: bool,
                     src: bytes, dst: bytes, sport: int, dport: int, last=b"", first=b"", id0: int = 0) -> int:
    """Write ``count`` MIDDLE packets (``hdr``: their 12-byte BTH, PSN
    ignored; ``last`` / ``first``, if not empty, the BTH of the final / the
    first one, a LAST / a FIRST) carrying ``payload[i*mtu:(i+1)*mtu]`` into
    ``out`` at a stride of 12 + mtu + 4, each with its ICRC for IP ID
    ``id0`` + i; returns the bytes written."""
    if (len(hdr) != BTH_BYTES or len(last) not in (0, BTH_BYTES) or len(first) not in (0, BTH_BYTES)
            or len(src) != 4 or len(dst) != 4):
        raise ValueError("hdr (and last, first, if given) must be a 12-byte BTH, src and dst 4 bytes")
    if mtu <= 0 or mtu & 3 or not 1 <= count <= MAX_SEGMENTS:
        raise ValueError("mtu must be a positive multiple of 4 and count 1..64")
    if id0 + count > MAX_SEGMENTS:
        raise ValueError("a GSO send has at most 64 segments (id0 + count)")
    stride = BTH_BYTES + mtu + ICRC_BYTES
    if len(payload) < count * mtu or len(out) < count * stride:
        raise ValueError("payload or out too small for count packets")
    flow = Ipv4Flow(bytes(src), bytes(dst), sport, dport)
    out = memoryview(out)
    payload = memoryview(payload)
    for i in range(count):
        p = i * stride
        out[p:p + BTH_BYTES] = first if first and i == 0 else last if last and i == count - 1 else hdr
        psn = (psn0 + i) & 0xFFFFFF
        out[p + 8:p + 12] = _BTH_PSN.pack(0x80 if ackreq_last and i == count - 1 else 0,
                                          psn >> 16, (psn >> 8) & 0xFF, psn & 0xFF)
        out[p + BTH_BYTES:p + BTH_BYTES + mtu] = payload[i * mtu:(i + 1) * mtu]
        end = p + BTH_BYTES + mtu
        ICRC.pack_into(out, end, flow.icrc(out[p:end], id0 + i))
    return count * stride


def py_verify_segments(buf, n: int, seg: int, src: bytes, dst: bytes, sport: int, dport: int) -> int:
    """The DestQP of the GRO buffer ``buf[:n]`` (datagrams of ``seg`` bytes,
    the last possibly shorter) if every datagram is well framed, for the
    same QP, and carries the ICRC of IP ID k (its position) with DF;
    otherwise -1."""
    if len(src) != 4 or len(dst) != 4:
        raise ValueError("src and dst must be 4 bytes (IPv4)")
    if n > len(buf) or seg <= 0 or n <= 0:
        return -1
    flow = Ipv4Flow(bytes(src), bytes(dst), sport, dport)
    first = -1
    for k, off in enumerate(range(0, n, seg)):
        m = min(seg, n - off)
        if m < BTH_BYTES + ICRC_BYTES or k >= MAX_SEGMENTS:
            return -1
        p = buf[off:off + m - ICRC_BYTES]
        t = _OP_TABLE[p[0]]
        if not t or p[1] & 0x0F:
            return -1
        plen = len(p) - (t & 0x7F)
        pad = (p[1] >> 4) & 3
        if plen < 0 or ((pad > plen or plen & 3) if t & 0x80 else (plen or pad)):
            return -1
        q = (p[5] << 16) | (p[6] << 8) | p[7]
        if first < 0:
            first = q
        elif q != first:
            return -1
        if flow.icrc(p, k) != ICRC.unpack_from(buf, off + m - ICRC_BYTES)[0]:
            return -1
    return first


def py_place_middles(buf, off: int, end: int, stride: int, opcode: int, psn: int, pkey: int, mtu: int,
                     dst, dst_off: int, room: int, extra: int = 0) -> tuple[int, int, int]:
    """Copy the MIDDLE packets at ``buf[off:end]`` (one per ``stride``)
    into ``dst`` from ``dst_off``, while each has ``opcode``, no pad, the
    P_Key (15 bits), the next PSN from ``psn``, a full ``mtu`` payload,
    and ``room`` (bytes it may still place) is at least ``mtu``.  ``extra``:
    the bytes of the stride around each BTH .. ICRC (0 in a GRO buffer; a
    native IB packet's PACKETS length, LRH and VCRC).  Returns (packets
    placed, the PSN of the last one asking for an ACK or -1, how many
    asked)."""
    count, ack, nacks = 0, -1, 0
    frame = BTH_BYTES + mtu + ICRC_BYTES
    if extra < 0 or stride != frame + extra or mtu <= 0 or off < 0 or end > len(buf) or dst_off < 0:
        return 0, -1, 0
    want = psn & 0xFFFFFF
    while off + frame <= end and mtu <= room and dst_off + mtu <= len(dst):
        if buf[off] != opcode or buf[off + 1] & 0x30 or ((buf[off + 2] << 8 | buf[off + 3]) ^ pkey) & 0x7FFF:
            break
        got = (buf[off + 9] << 16) | (buf[off + 10] << 8) | buf[off + 11]
        if got != want:
            break
        dst[dst_off:dst_off + mtu] = buf[off + BTH_BYTES:off + BTH_BYTES + mtu]
        if buf[off + 8] & 0x80:
            ack = got
            nacks += 1
        want = (want + 1) & 0xFFFFFF
        dst_off += mtu
        room -= mtu
        off += stride
        count += 1
    return count, ack, nacks


def py_icrc_v4(pkt, ident: int, src: bytes, dst: bytes, sport: int, dport: int) -> bytes:
    """The 4 ICRC bytes of ``pkt`` (BTH .. pad) sent from ``src``:``sport``
    to ``dst``:``dport`` with IP ID ``ident`` and DF (``Ipv4Flow.icrc``)."""
    if len(src) != 4 or len(dst) != 4:
        raise ValueError("src and dst must be 4 bytes (IPv4)")
    if len(pkt) < BTH_BYTES:
        raise ValueError("a packet starts with a 12-byte BTH")
    return ICRC.pack(Ipv4Flow(bytes(src), bytes(dst), sport, dport).icrc(pkt, ident & 0xFFFF))


# -- which implementation runs --------------------------------------------

def _vcrc_table() -> tuple[int, ...]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1     # 0x100B, bit-reversed
        t.append(c)
    return tuple(t)


_VCRC_TABLE = _vcrc_table()


def py_vcrc(buf) -> int:
    """The VCRC (CRC-16, polynomial 0x100B, seed 0xFFFF, reflected,
    inverted) of ``buf``: a native IB packet's LRH .. ICRC."""
    c = 0xFFFF
    t = _VCRC_TABLE
    for b in bytes(buf):
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFF


def _isal_crc32_address() -> int:
    """The address of ISA-L's crc32_gzip_refl in the loaded isal module, or
    0 (zlib's is used then)."""
    try:
        import ctypes
        from isal import isal_zlib
        return ctypes.cast(ctypes.CDLL(isal_zlib.__file__).crc32_gzip_refl, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0


def _compiled():
    """(the compiled module set up, or None; what ``describe`` says)."""
    if os.environ.get("SOFTRDMA_DATAPATH", "").lower() == "python":
        return None, "Python (SOFTRDMA_DATAPATH=python)"
    try:
        from . import _fastpath
    except ImportError:
        return None, "Python (the compiled loops are not built: install gcc and python3-dev, then reinstall softrdma)"
    _fastpath.set_opcode_table(_OP_TABLE)
    addr = _isal_crc32_address()
    if addr:
        try:
            _fastpath.set_crc32(addr)
            return _fastpath, "compiled (CRC-32: ISA-L)"
        except ValueError:                  # not zlib's function after all: keep zlib's
            _fastpath.set_crc32(0)
    return _fastpath, "compiled (CRC-32: zlib)"


_C, _DESCRIPTION = _compiled()
if _C is not None:
    IMPL = "c"
    build_middles, verify_segments, place_middles, icrc_v4 = (_C.build_middles, _C.verify_segments,
                                                              _C.place_middles, _C.icrc_v4)
    vcrc = _C.vcrc
else:
    IMPL = "python"
    build_middles, verify_segments, place_middles, icrc_v4 = (py_build_middles, py_verify_segments,
                                                              py_place_middles, py_icrc_v4)
    vcrc = py_vcrc


def describe() -> str:
    """Which loops run, and why, as chosen at import (the daemon's log)."""
    return _DESCRIPTION


class SegmentRun:
    """``count`` MIDDLE packets of one message, not yet built: the BTH
    template ``hdr`` (PSN 0, no AckReq), the first PSN, the payload (a
    memoryview of ``count * mtu`` bytes), whether the last asks for an ACK,
    and ``last_hdr`` / ``first_hdr``: b"", or the BTH template of the final
    / the first packet when that is the message's LAST / FIRST (as long as a
    MIDDLE: a 12-byte header, a SEND's)."""

    __slots__ = ("hdr", "psn0", "count", "mtu", "payload", "ackreq_last", "last_hdr", "first_hdr")

    def __init__(self, hdr: bytes, psn0: int, count: int, mtu: int, payload, ackreq_last: bool,
                 last_hdr: bytes = b"", first_hdr: bytes = b""):
        self.hdr, self.psn0, self.count, self.mtu = hdr, psn0, count, mtu
        self.payload, self.ackreq_last, self.last_hdr, self.first_hdr = payload, ackreq_last, last_hdr, first_hdr

    def packets(self) -> list[bytearray]:
        """The packets one by one (BTH + payload, no ICRC), as the requester
        would have built them."""
        out = []
        mtu, hdr, pl = self.mtu, self.hdr, self.payload
        last = self.count - 1 if self.last_hdr else -1
        for i in range(self.count):
            b = bytearray(BTH_BYTES + mtu)
            b[:BTH_BYTES] = self.first_hdr if i == 0 and self.first_hdr else self.last_hdr if i == last else hdr
            psn = (self.psn0 + i) & 0xFFFFFF
            b[8:12] = _BTH_PSN.pack(0x80 if self.ackreq_last and i == self.count - 1 else 0,
                                    psn >> 16, (psn >> 8) & 0xFF, psn & 0xFF)
            b[BTH_BYTES:] = pl[i * mtu:(i + 1) * mtu]
            out.append(b)
        return out

    def __len__(self) -> int:
        """Bytes on the wire without ICRCs (what a packet's len() is)."""
        return self.count * (BTH_BYTES + self.mtu)


class Segments:
    """Checked packets for one QP laid out at a fixed stride: the datagrams
    of one UDP GRO buffer (``verify_segments``), or the native IB packets
    of one PACKETS message (``lrh.verify_packets``).  ``view[base:n]`` cut
    every ``seg`` bytes (the last may be shorter); each piece is ``hoff``
    bytes before the BTH (an IB packet's PACKETS length and LRH), the packet
    and its ICRC, then ``tail`` bytes (its VCRC); all for DestQP ``dqpn``.
    ``nbytes``: BTH .. ICRC of them all, as the port counts.  Valid until
    the socket's next read, as the packets of a read are."""

    __slots__ = ("view", "n", "seg", "dqpn", "count", "base", "hoff", "tail", "nbytes")

    def __init__(self, view, n: int, seg: int, dqpn: int, base: int = 0, hoff: int = 0, tail: int = 0):
        self.view, self.n, self.seg, self.dqpn = view, n, seg, dqpn
        self.base, self.hoff, self.tail = base, hoff, tail
        self.count = -(-(n - base) // seg)
        self.nbytes = n - base - self.count * (hoff + tail)

    def packets(self) -> list:
        """Each packet without its ICRC, a memoryview slice."""
        v, n, seg, hoff, cut = self.view, self.n, self.seg, self.hoff, ICRC_BYTES + self.tail
        return [v[off + hoff:min(off + seg, n) - cut] for off in range(self.base, n, seg)]


__all__ = ["IMPL", "describe", "SegmentRun", "Segments", "build_middles", "verify_segments", "place_middles", "icrc_v4",
           "opcode_table", "py_build_middles", "py_verify_segments", "py_place_middles", "py_icrc_v4"]
