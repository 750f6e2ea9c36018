"""Building and parsing whole IB transport packets (BTH .. payload + pad).

A "packet" here is what follows the UDP header minus the ICRC: the ICRC
depends on the IP/UDP headers and is the business of ``wire.icrc``.
Both ``build`` and ``parse`` are driven by the opcode table alone.

``parse`` is the gate for untrusted bytes: it raises only ``WireError``,
slices only within the buffer, and checks everything that can be checked
without QP state (known opcode, header lengths, pad, TVer, opcodes that
carry no payload having none).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WireError
from .headers import (
    AETH, ATMACK, ATMETH, BTH, BTH_ACKREQ, BTH_BECN, BTH_FECN, BTH_MIG, BTH_PAD_SHIFT,
    BTH_PSN_MASK, BTH_QPN_MASK, BTH_SE, BTH_TVER_MASK, DEFAULT_PKEY, DETH, DETH_SQP_MASK,
    FETH, IETH, IMMDT, RETH, XRCETH, XRCETH_SRQN_MASK, Aeth, AtomicEth, Deth, Reth, aeth_word, pack_bth,
)
from .opcodes import OPCODE_TABLE, PAYLOAD_MASK, OpInfo, Opcode

MAX_PAD = 3


def pad_count(payload_len: int) -> int:
    """Bytes of pad that bring the payload to a 4-byte multiple (BTH PadCnt)."""
    return -payload_len & 3


def build(opcode: int, dqpn: int, psn: int, payload=b"", *, ackreq=False, se=False,
          mig=False, pkey=DEFAULT_PKEY, fecn=False, becn=False, tver=0,
          reth: tuple[int, int, int] | None = None,
          aeth: tuple[int, int] | None = None,
          atmeth: tuple[int, int, int, int] | None = None,
          atmack: int | None = None,
          deth: tuple[int, int] | None = None,
          imm: int | None = None,
          ieth: int | None = None,
          xrceth: int | None = None, feth: int | None = None) -> bytearray:
    """Build one packet (without ICRC).  Every header the opcode's row names
    must be given; headers it does not name must not be (``xrceth``: the
    XRC SRQ number of an XRC request)."""
    info = OPCODE_TABLE[opcode & 0xFF]
    if info is None:
        raise WireError("bad_opcode", f"0x{opcode:02x} is not an RC/UC/UD/CNP/XRC opcode")
    given = {"reth": reth, "aeth": aeth, "atmeth": atmeth, "atmack": atmack,
             "deth": deth, "immdt": imm, "ieth": ieth, "xrceth": xrceth, "feth": feth}
    for name, value in given.items():
        wanted = getattr(info, name) >= 0
        if wanted != (value is not None):
            raise WireError("bad_header", f"{info.name} {'needs' if wanted else 'has no'} {name}")
    plen = len(payload)
    if plen and not info.mask & PAYLOAD_MASK:
        raise WireError("bad_length", f"{info.name} carries no payload")
    pad = pad_count(plen)
    buf = bytearray(info.length + plen + pad)
    pack_bth(buf, opcode, dqpn, psn, se=se, mig=mig, pad=pad, tver=tver, pkey=pkey, fecn=fecn,
             becn=becn, ackreq=ackreq)
    if deth is not None:
        DETH.pack_into(buf, info.deth, deth[0], deth[1] & DETH_SQP_MASK)
    if xrceth is not None:
        XRCETH.pack_into(buf, info.xrceth, xrceth & XRCETH_SRQN_MASK)
    if feth is not None:
        FETH.pack_into(buf, info.feth, feth)
    if reth is not None:
        RETH.pack_into(buf, info.reth, *reth)
    if atmeth is not None:
        ATMETH.pack_into(buf, info.atmeth, *atmeth)
    if aeth is not None:
        AETH.pack_into(buf, info.aeth, aeth_word(*aeth))
    if atmack is not None:
        ATMACK.pack_into(buf, info.atmack, atmack)
    if imm is not None:
        IMMDT.pack_into(buf, info.immdt, imm)
    if ieth is not None:
        IETH.pack_into(buf, info.ieth, ieth)
    buf[info.length:info.length + plen] = payload
    return buf


@dataclass(slots=True)
class Packet:
    """A parsed packet: BTH fields, extension headers, payload (a memoryview
    into the caller's buffer, pad removed)."""

    info: OpInfo
    opcode: int
    se: bool
    mig: bool
    pad: int
    tver: int
    pkey: int
    fecn: bool
    becn: bool
    dqpn: int
    ackreq: bool
    psn: int
    payload: memoryview
    reth: Reth | None = None
    aeth: Aeth | None = None
    atmeth: AtomicEth | None = None
    atmack: int | None = None
    deth: Deth | None = None
    imm: int | None = None
    ieth: int | None = None
    xrceth: int | None = None          # the XRC SRQ number an XRC request names
    feth: int | None = None

    @property
    def name(self) -> str:
        return self.info.name


def rx_check(buf) -> int:
    """Validate the framing of ``buf``; return its DestQP.

    The cheap gate every received packet passes before any QP sees it
    (``transport.port``): one call gives the demux key too (``bth_dqpn``,
    inlined here because this runs once per packet)."""
    n = len(buf)
    if n < 12:
        raise WireError("truncated", f"{n} bytes, BTH needs 12")
    info = OPCODE_TABLE[buf[0]]
    if info is None:
        raise WireError("bad_opcode", f"opcode 0x{buf[0]:02x}")
    flags = buf[1]
    if flags & BTH_TVER_MASK:
        raise WireError("bad_tver", f"TVer {flags & BTH_TVER_MASK}")
    plen = n - info.length
    if plen < 0:
        raise WireError("truncated", f"{info.name}: {n} bytes, headers need {info.length}")
    pad = (flags >> BTH_PAD_SHIFT) & 3
    if info.mask & PAYLOAD_MASK:
        if pad > plen or (plen & 3):
            raise WireError("bad_length", f"{info.name}: payload+pad {plen} bytes, pad {pad}")
    elif plen or pad:
        raise WireError("bad_length", f"{info.name}: {plen} bytes after headers, pad {pad}")
    return (buf[5] << 16) | (buf[6] << 8) | buf[7]


def check(buf) -> tuple[OpInfo, int]:
    """Validate the framing of ``buf`` (``rx_check``); return (row,
    payload length)."""
    rx_check(buf)
    info = OPCODE_TABLE[buf[0]]
    plen = len(buf) - info.length
    if info.mask & PAYLOAD_MASK:
        plen -= (buf[1] >> BTH_PAD_SHIFT) & 3
    return info, plen


def parse(buf) -> Packet:
    """Parse an untrusted packet (BTH .. pad, no ICRC)."""
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    info, plen = check(mv)
    opcode, flags, pkey, w1, w2 = BTH.unpack_from(mv, 0)
    pkt = Packet(info, opcode, bool(flags & BTH_SE), bool(flags & BTH_MIG),
                 (flags >> BTH_PAD_SHIFT) & 3, flags & BTH_TVER_MASK, pkey,
                 bool(w1 & BTH_FECN), bool(w1 & BTH_BECN), w1 & BTH_QPN_MASK,
                 bool(w2 & BTH_ACKREQ), w2 & BTH_PSN_MASK,
                 mv[info.length:info.length + plen])
    if info.deth >= 0:
        qkey, w = DETH.unpack_from(mv, info.deth)
        pkt.deth = Deth(qkey, w & DETH_SQP_MASK)
    if info.xrceth >= 0:
        pkt.xrceth = XRCETH.unpack_from(mv, info.xrceth)[0] & XRCETH_SRQN_MASK
    if info.feth >= 0:
        (pkt.feth,) = FETH.unpack_from(mv, info.feth)
    if info.reth >= 0:
        pkt.reth = Reth(*RETH.unpack_from(mv, info.reth))
    if info.atmeth >= 0:
        pkt.atmeth = AtomicEth(*ATMETH.unpack_from(mv, info.atmeth))
    if info.aeth >= 0:
        (w,) = AETH.unpack_from(mv, info.aeth)
        pkt.aeth = Aeth(w >> 24, w & 0xFFFFFF)
    if info.atmack >= 0:
        (pkt.atmack,) = ATMACK.unpack_from(mv, info.atmack)
    if info.immdt >= 0:
        (pkt.imm,) = IMMDT.unpack_from(mv, info.immdt)
    if info.ieth >= 0:
        (pkt.ieth,) = IETH.unpack_from(mv, info.ieth)
    return pkt


def build_cnp(dqpn: int, *, pkey=DEFAULT_PKEY) -> bytearray:
    """RoCEv2 Congestion Notification Packet (annex A17.9.4): BTH with
    opcode 0x81, BECN set, PSN 0, then 16 reserved bytes."""
    return build(Opcode.CNP, dqpn, 0, becn=True, pkey=pkey)
