"""The InfiniBand link layer's own headers and CRCs (IBA 7.7, 7.8, 8.3):
the Local Route Header, the GRH of a native IB packet, the ICRC computed
over IB headers, and the VCRC.

A native IB packet is::

    LRH (8) | GRH (40, LNH = IBA global) | BTH .. payload .. pad | ICRC (4) | VCRC (2)

LRH::

    VL:4 LVer:4 | SL:4 rsv:2 LNH:2 | DLID:16 | rsv:5 PktLen:11 | SLID:16

PktLen counts 4-byte words from the LRH to the ICRC inclusive (not the
VCRC).  The ICRC is the Ethernet CRC-32 (``icrc.crc32``: ISA-L's or
zlib's) over the whole packet up to the ICRC, with the variant fields
taken as ones: the LRH's VL, the GRH's traffic class, flow label and hop
limit, and the BTH's resv8a byte (FECN, BECN).  RoCEv2's ICRC
(``wire.icrc``) is the same CRC with eight bytes of ones in place of the
LRH.  The VCRC is a CRC-16 (polynomial 0x100B, seed 0xFFFF, bits
reflected as the ICRC's, result inverted: ``fastpath.vcrc``) over every
byte from the LRH to the ICRC inclusive: a switch recomputes it when it
changes the VL.

Whole runs: ``build_run`` lays out packets of a ``fastpath.SegmentRun``
as the entries of a PACKETS message (``wire.fabriclink``: be16 length,
then the packet) in one call, and ``verify_packets`` checks a whole
PACKETS message for the run path of a QP (every packet LRH-only, good
CRCs, to the port's LID, one DestQP): the compiled ``_fastpath`` loops
where built, else the references ``py_build_run`` / ``py_verify_packets``
(``encap`` and ``decap`` packet by packet), which the tests compare byte
for byte.

Pure functions over bytes; no I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple
from .errors import WireError
from . import fastpath
from .fastpath import SegmentRun, vcrc
from .headers import BTH_RESV8A_OFFSET
from .icrc import crc32
from .packet import rx_check

LRH = struct.Struct(">BBHHH")      # VL<<4|LVer, SL<<4|LNH, DLID, PktLen, SLID
LRH_BYTES = 8
GRH_BYTES = 40
ICRC_BYTES = 4
VCRC_BYTES = 2
_ICRC = struct.Struct("<I")        # as RoCE's: the CRC's low byte first
_VCRC = struct.Struct("<H")

# Link Next Header (IBA 7.7.6)
LNH_RAW = 0
LNH_IP_NON_IBA = 1
LNH_IBA_LOCAL = 2                  # BTH follows
LNH_IBA_GLOBAL = 3                 # GRH, then BTH

VL15 = 15                          # subnet management
PERMISSIVE_LID = 0xFFFF
MCAST_LID_BASE = 0xC000            # 0xC000..0xFFFE: multicast (IBA 7.11.1)
PKT_LEN_MASK = 0x7FF
MAX_PKT_WORDS = PKT_LEN_MASK

_GRH = struct.Struct(">IHBB16s16s")  # IPVer:4 TClass:8 FlowLabel:20 | PayLen | NxtHdr | HopLmt | SGID | DGID
GRH_IPVER = 6
GRH_NXTHDR_BTH = 0x1B              # IBA 8.3.1: the next header is a BTH


class Lrh(NamedTuple):
    vl: int
    lver: int
    sl: int
    lnh: int
    dlid: int
    pkt_len: int                   # 4-byte words, LRH .. ICRC
    slid: int


class Grh(NamedTuple):
    tclass: int
    flow_label: int
    pay_len: int                   # bytes after the GRH: BTH .. ICRC
    nxt_hdr: int
    hop_limit: int
    sgid: bytes
    dgid: bytes


def pack_lrh(*, vl: int, sl: int, lnh: int, dlid: int, slid: int, pkt_len: int, lver: int = 0) -> bytes:
    return LRH.pack((vl & 0xF) << 4 | (lver & 0xF), (sl & 0xF) << 4 | (lnh & 3), dlid & 0xFFFF,
                    pkt_len & PKT_LEN_MASK, slid & 0xFFFF)


def parse_lrh(buf, offset: int = 0) -> Lrh:
    if len(buf) - offset < LRH_BYTES:
        raise WireError(f"LRH: {len(buf) - offset} bytes, need {LRH_BYTES}")
    b0, b1, dlid, plen, slid = LRH.unpack_from(buf, offset)
    return Lrh(b0 >> 4, b0 & 0xF, b1 >> 4, b1 & 3, dlid, plen & PKT_LEN_MASK, slid)


def pack_grh(*, sgid: bytes, dgid: bytes, pay_len: int, tclass: int = 0, flow_label: int = 0,
             hop_limit: int = 0xFF, nxt_hdr: int = GRH_NXTHDR_BTH) -> bytes:
    return _GRH.pack(GRH_IPVER << 28 | (tclass & 0xFF) << 20 | (flow_label & 0xFFFFF), pay_len,
                     nxt_hdr, hop_limit, sgid, dgid)


def parse_grh(buf, offset: int = 0) -> Grh:
    if len(buf) - offset < GRH_BYTES:
        raise WireError(f"GRH: {len(buf) - offset} bytes, need {GRH_BYTES}")
    w0, pay_len, nxt, hop, sgid, dgid = _GRH.unpack_from(buf, offset)
    if w0 >> 28 != GRH_IPVER:
        raise WireError(f"GRH: IPVer {w0 >> 28}, not 6")
    return Grh((w0 >> 20) & 0xFF, w0 & 0xFFFFF, pay_len, nxt, hop, bytes(sgid), bytes(dgid))


# -- CRCs -----------------------------------------------------------------------

def icrc(pkt, lnh: int) -> int:
    """The ICRC of ``pkt`` (LRH .. pad, without ICRC and VCRC), whose LRH
    says ``lnh``: variant fields as ones."""
    crc = crc32(bytes((pkt[0] | 0xF0,)))                     # VL
    crc = crc32(pkt[1:LRH_BYTES], crc)
    o = LRH_BYTES
    if lnh == LNH_IBA_GLOBAL:
        # IPVer kept; TClass and FlowLabel ones; PayLen, NxtHdr kept; HopLmt ones
        crc = crc32(bytes((pkt[o] | 0x0F, 0xFF, 0xFF, 0xFF)), crc)
        crc = crc32(pkt[o + 4:o + 7], crc)
        crc = crc32(b"\xff", crc)
        crc = crc32(pkt[o + 8:o + GRH_BYTES], crc)
        o += GRH_BYTES
    crc = crc32(pkt[o:o + BTH_RESV8A_OFFSET], crc)
    crc = crc32(b"\xff", crc)
    return crc32(pkt[o + BTH_RESV8A_OFFSET + 1:], crc)


# -- whole packets --------------------------------------------------------------

def encap(ib_pkt, *, dlid: int, slid: int, sl: int = 0, vl: int = 0, grh: bytes | None = None) -> bytes:
    """A native IB packet around ``ib_pkt`` (BTH .. pad, no ICRC): LRH,
    the GRH if given (its PayLen must already count BTH .. ICRC), ICRC and
    VCRC."""
    n = len(ib_pkt) + ICRC_BYTES + (GRH_BYTES if grh is not None else 0)
    lnh = LNH_IBA_GLOBAL if grh is not None else LNH_IBA_LOCAL
    head = pack_lrh(vl=vl, sl=sl, lnh=lnh, dlid=dlid, slid=slid, pkt_len=(LRH_BYTES + n) >> 2)
    if grh is not None:
        head += grh
    body = head + bytes(ib_pkt)
    body += _ICRC.pack(icrc(body, lnh))
    return body + _VCRC.pack(vcrc(body))


def decap(frame) -> tuple[Lrh, "memoryview | None", memoryview]:
    """Check a native IB packet and split it: (LRH, GRH bytes or None,
    BTH .. pad without the ICRC).  WireError for a bad length, LNH, VCRC
    or ICRC: the caller drops and counts it."""
    m = memoryview(frame)
    if len(m) < LRH_BYTES + 12 + ICRC_BYTES + VCRC_BYTES:
        raise WireError(f"IB packet too short: {len(m)} bytes")
    lrh = parse_lrh(m)
    if (lrh.pkt_len << 2) + VCRC_BYTES != len(m):
        raise WireError(f"LRH PktLen {lrh.pkt_len} words, packet {len(m)} bytes")
    if lrh.lnh not in (LNH_IBA_LOCAL, LNH_IBA_GLOBAL):
        raise WireError(f"LRH LNH {lrh.lnh}: not an IBA transport packet")
    end = len(m) - VCRC_BYTES
    if _VCRC.unpack_from(m, end)[0] != vcrc(m[:end]):
        raise WireError("bad VCRC")
    o = LRH_BYTES
    grh = None
    if lrh.lnh == LNH_IBA_GLOBAL:
        if len(m) < LRH_BYTES + GRH_BYTES + 12 + ICRC_BYTES + VCRC_BYTES:
            raise WireError(f"IB packet with GRH too short: {len(m)} bytes")
        grh = m[o:o + GRH_BYTES]
        o += GRH_BYTES
    iend = end - ICRC_BYTES
    if _ICRC.unpack_from(m, iend)[0] != icrc(m[:iend], lrh.lnh):
        raise WireError("bad ICRC")
    return lrh, grh, m[o:iend]


def set_vl(frame: bytearray, vl: int) -> None:
    """A switch's change of VL (SL2VL): the LRH byte and the VCRC; the
    ICRC does not cover the VL."""
    frame[0] = (vl & 0xF) << 4 | (frame[0] & 0xF)
    end = len(frame) - VCRC_BYTES
    _VCRC.pack_into(frame, end, vcrc(memoryview(frame)[:end]))


# -- whole runs (the bulk path) -------------------------------------------------

_PLEN = struct.Struct(">H")        # a PACKETS entry's length (wire.fabriclink)
PACKETS_HDR_BYTES = 4              # wire.fabriclink.HDR


def run_lrh(*, dlid: int, slid: int, sl: int, mtu: int, grh: bool) -> bytes:
    """The LRH every packet of a run of ``mtu``-byte payloads shares."""
    n = LRH_BYTES + (GRH_BYTES if grh else 0) + 12 + mtu + ICRC_BYTES
    return pack_lrh(vl=0, sl=sl, lnh=LNH_IBA_GLOBAL if grh else LNH_IBA_LOCAL, dlid=dlid, slid=slid,
                    pkt_len=n >> 2)


def py_build_run(hdr, payload, mtu: int, run_count: int, start: int, count: int, psn0: int, ackreq_last: bool,
                 last, first, lrh, grh) -> bytes:
    """Packets ``start`` .. ``start + count - 1`` of the SegmentRun
    (``hdr``, ``psn0``, ``run_count`` packets of ``mtu`` bytes of
    ``payload``, ``ackreq_last``, ``last`` / ``first`` templates) as
    PACKETS entries, each encapsulated under ``lrh`` (and ``grh``, if not
    empty) by ``encap``."""
    if not (0 <= start and 1 <= count and start + count <= run_count):
        raise ValueError("start + count within the run")
    lh = parse_lrh(lrh)
    pkts = SegmentRun(bytes(hdr), psn0, run_count, mtu, memoryview(payload), ackreq_last, bytes(last),
                      bytes(first)).packets()[start:start + count]
    out = []
    for p in pkts:
        f = encap(p, dlid=lh.dlid, slid=lh.slid, sl=lh.sl, vl=lh.vl, grh=bytes(grh) if grh else None)
        out.append(_PLEN.pack(len(f)) + f)
    return b"".join(out)


def py_verify_packets(msg, lid: int, lmc_mask: int):
    """(DestQP, groups) for the PACKETS message ``msg`` if every packet
    passes ``decap`` with no GRH, goes to the unicast DLID ``lid`` (within
    ``lmc_mask``), passes ``rx_check``, and all share one VL, SL, DLID,
    SLID, DestQP and P_Key; else None.  ``groups``: the runs of entries of
    one length, as (offset of the first entry's be16 length, the stride:
    2 + the length, how many)."""
    m = memoryview(msg)
    if len(m) < PACKETS_HDR_BYTES:
        return None
    n = m[2] << 8 | m[3]
    o, first, key, groups = PACKETS_HDR_BYTES, -1, None, []
    if n == 0:
        return None
    for _ in range(n):
        if o + 2 > len(m):
            return None
        (ln,) = _PLEN.unpack_from(m, o)
        if o + 2 + ln > len(m):
            return None
        if groups and groups[-1][1] == ln + 2:
            groups[-1][2] += 1
        else:
            groups.append([o, ln + 2, 1])
        f = m[o + 2:o + 2 + ln]
        o += 2 + ln
        try:
            lrh, grh, body = decap(f)
            dqpn = rx_check(body)
        except WireError:
            return None
        if grh is not None or lrh.dlid >= MCAST_LID_BASE or (lrh.dlid & ~lmc_mask & 0xFFFF) != lid:
            return None
        this = (bytes(f[:4]), bytes(f[6:8]), bytes(body[2:4]), dqpn)     # VL, SL, DLID; SLID; P_Key; DestQP
        if key is None:
            key, first = this, dqpn
        elif this != key:
            return None
    if o != len(m):
        return None
    return first, tuple(tuple(g) for g in groups)


if fastpath._C is not None:
    build_run, verify_packets = fastpath._C.ib_build_run, fastpath._C.ib_verify_packets
else:
    build_run, verify_packets = py_build_run, py_verify_packets
