"""pcap output of RoCEv2 packets as Ethernet + IP + UDP 4791 frames, and of
InfiniBand frames as ERF records of type INFINIBAND (pcap link type ERF).

Wireshark/tshark decode UDP port 4791 as RoCEv2 ("RRoCE") with nothing
configured, so a frame built here opens decoded.  Used by ``ibdump``
(softrdma.tools.ibdump) and the tests.
"""

from __future__ import annotations

import struct
import time

from .icrc import ICRC, ROCEV2_UDP_PORT, icrc, ipv4_header, ipv6_header, udp_header

LINKTYPE_ETHERNET = 1
LINKTYPE_ERF = 197               # DLT_ERF: an ERF record header before each frame
ERF_TYPE_INFINIBAND = 21
ERF_FLAG_VLEN = 0x04             # varying record length (what ibdump sets)
_ERF = struct.Struct(">BBHHH")   # type, flags, rlen, lctr, wlen (after the little-endian timestamp)
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
PCAP_MAGIC_USEC = 0xA1B2C3D4
PCAP_MAGIC_NSEC = 0xA1B23C4D
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD


MAC_SRC = b"\x02\x00\x00\x00\x00\x01"
MAC_DST = b"\x02\x00\x00\x00\x00\x02"


def ethernet(payload: bytes, ethertype: int, src=MAC_SRC, dst=MAC_DST) -> bytes:
    return dst + src + struct.pack(">H", ethertype) + payload


def roce_frame(ib_pkt, src: bytes, dst: bytes, *, sport: int, dport=ROCEV2_UDP_PORT,
               ident=0, df=True, ttl=64, tos=0, icrc_value: int | None = None,
               src_mac: bytes = MAC_SRC, dst_mac: bytes = MAC_DST) -> bytes:
    """Ethernet frame carrying ``ib_pkt`` with its ICRC.  ``src``/``dst`` are
    4-byte (IPv4) or 16-byte (IPv6) addresses."""
    n = len(ib_pkt) + 4
    if len(src) == 4:
        ip = ipv4_header(src, dst, n, ident=ident, df=df, ttl=ttl, tos=tos)
        etype = ETH_P_IP
    else:
        ip = ipv6_header(src, dst, n, tclass=tos, hop_limit=ttl)
        etype = ETH_P_IPV6
    udp = udp_header(sport, dport, n)
    crc = icrc(ip, udp, ib_pkt) if icrc_value is None else icrc_value
    return ethernet(ip + udp + bytes(ib_pkt) + ICRC.pack(crc), etype, src_mac, dst_mac)


def erf_infiniband(frame, ts_ns: int, wire_len: int | None = None) -> bytes:
    """An ERF record of type INFINIBAND around an IB frame (LRH .. VCRC),
    as Mellanox's ibdump writes an IB port's packets (pcap link type ERF):
    the timestamp in 32.32 fixed point seconds (little-endian), record
    length = header + frame, wire length = the frame's."""
    sec, ns = divmod(ts_ns, 1_000_000_000)
    wlen = len(frame) if wire_len is None else wire_len
    return (struct.pack("<Q", sec << 32 | (ns << 32) // 1_000_000_000)
            + _ERF.pack(ERF_TYPE_INFINIBAND, ERF_FLAG_VLEN, 16 + len(frame), 0, wlen & 0xFFFF) + bytes(frame))


class PcapWriter:
    """Classic pcap (nanosecond timestamps) to a binary file object."""

    def __init__(self, f, snaplen: int = 65535, linktype: int = LINKTYPE_ETHERNET):
        self.f = f
        self.snaplen = snaplen
        f.write(_GLOBAL.pack(PCAP_MAGIC_NSEC, 2, 4, 0, 0, snaplen, linktype))

    def write(self, frame, ts: float | None = None, ts_ns: int | None = None, orig_len: int | None = None) -> None:
        """One record; ``orig_len``: the frame's length on the wire when
        ``frame`` is only its first bytes."""
        if ts_ns is None:
            ts_ns = time.time_ns() if ts is None else int(ts * 1e9)
        cap = frame[:self.snaplen]
        self.f.write(_RECORD.pack(ts_ns // 1_000_000_000, ts_ns % 1_000_000_000, len(cap),
                                  len(frame) if orig_len is None else orig_len))
        self.f.write(cap)

    def flush(self) -> None:
        self.f.flush()
