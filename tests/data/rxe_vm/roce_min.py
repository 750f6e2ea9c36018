# Copied verbatim from ../shared/interop/rxe-vm/host/roce_min.py (the rxe-vm harness,
# whose ICRC was validated against the kernel's rdma_rxe), so the cross-check runs in
# any clone; tests/test_wire_icrc_scapy.py prefers the live harness copy when present.
"""Minimal RoCEv2 (IPv4) packet helpers for the rxe-vm harness.

Just enough to talk to a real rdma_rxe peer for smoke testing: BTH/AETH
build+parse, ICRC computation, IPv4/UDP header parsing.  This is test
scaffolding, not the project's RDMA stack.

ICRC (IBA Annex A17 / RoCEv2), as implemented by Linux rxe (rxe_icrc.c):
  CRC-32 (IEEE 802.3 polynomial, reflected, init ~0, final xor ~0 -- i.e.
  zlib.crc32) over
      8 bytes 0xFF                         (stands in for the masked LRH)
    + IPv4 header, with TOS=0xFF, TTL=0xFF, header checksum=0xFFFF
    + UDP header, with checksum=0xFFFF
    + BTH, with byte 4 (F/B bits + 6 reserved bits, "resv8a") = 0xFF
    + the rest of the IB headers + payload + pad
  and stored on the wire little-endian (struct.pack('<I', crc)).
  NOT masked: IPv4 version/IHL, total length, identification, flags/frag
  offset, protocol, addresses; UDP ports and length.  So the receiver needs
  the real IPv4 identification field to check an ICRC.
"""

import ipaddress
import struct
import zlib

ROCEV2_UDP_PORT = 4791

# RC opcodes (transport 000)
OP = {
    0x00: "RC_SEND_FIRST", 0x01: "RC_SEND_MIDDLE", 0x02: "RC_SEND_LAST",
    0x03: "RC_SEND_LAST_IMM", 0x04: "RC_SEND_ONLY", 0x05: "RC_SEND_ONLY_IMM",
    0x06: "RC_RDMA_WRITE_FIRST", 0x07: "RC_RDMA_WRITE_MIDDLE",
    0x08: "RC_RDMA_WRITE_LAST", 0x09: "RC_RDMA_WRITE_LAST_IMM",
    0x0A: "RC_RDMA_WRITE_ONLY", 0x0B: "RC_RDMA_WRITE_ONLY_IMM",
    0x0C: "RC_RDMA_READ_REQUEST", 0x0D: "RC_RDMA_READ_RESPONSE_FIRST",
    0x0E: "RC_RDMA_READ_RESPONSE_MIDDLE", 0x0F: "RC_RDMA_READ_RESPONSE_LAST",
    0x10: "RC_RDMA_READ_RESPONSE_ONLY", 0x11: "RC_ACKNOWLEDGE",
    0x12: "RC_ATOMIC_ACKNOWLEDGE", 0x13: "RC_COMPARE_SWAP", 0x14: "RC_FETCH_ADD",
    0x64: "UD_SEND_ONLY", 0x65: "UD_SEND_ONLY_IMM",
}
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, ACK = 0x00, 0x01, 0x02, 0x04, 0x11
AETH_ACK_UNLIMITED = 0x1F      # ACK, "invalid credit count" (what rxe sends)
DEFAULT_PKEY = 0xFFFF


def gid_from_ipv4(ip):
    """::ffff:a.b.c.d as 16 raw bytes (the IPv4 RoCEv2 GID)."""
    return b"\x00" * 10 + b"\xff\xff" + ipaddress.IPv4Address(ip).packed


def gid_str(raw):
    a = ipaddress.IPv6Address(bytes(raw))
    return "::ffff:%s" % a.ipv4_mapped if a.ipv4_mapped else str(a)


def gid_ipv4(raw):
    """a.b.c.d of an IPv4-mapped GID (None if it is not one)."""
    m = ipaddress.IPv6Address(bytes(raw)).ipv4_mapped
    return str(m) if m else None


# ---------------------------------------------------------------- BTH
def build_bth(opcode, dest_qp, psn, *, se=False, mig=False, pad=0, tver=0,
              pkey=DEFAULT_PKEY, fecn=False, becn=False, ack_req=False):
    b1 = (se << 7) | (mig << 6) | ((pad & 3) << 4) | (tver & 0xF)
    b4 = (fecn << 7) | (becn << 6)
    return struct.pack(">BBHB3sB3s", opcode, b1, pkey, b4,
                       (dest_qp & 0xFFFFFF).to_bytes(3, "big"),
                       (ack_req << 7), (psn & 0xFFFFFF).to_bytes(3, "big"))


def parse_bth(b):
    opcode, b1, pkey, b4 = struct.unpack_from(">BBHB", b, 0)
    return {
        "opcode": opcode, "opname": OP.get(opcode, "0x%02x" % opcode),
        "se": bool(b1 & 0x80), "mig": bool(b1 & 0x40), "pad": (b1 >> 4) & 3,
        "tver": b1 & 0xF, "pkey": pkey, "fecn": bool(b4 & 0x80),
        "becn": bool(b4 & 0x40), "resv6": b4 & 0x3F,
        "dest_qp": int.from_bytes(b[5:8], "big"),
        "ack_req": bool(b[8] & 0x80), "resv7": b[8] & 0x7F,
        "psn": int.from_bytes(b[9:12], "big"),
    }


def build_aeth(syndrome, msn):
    return bytes([syndrome & 0xFF]) + (msn & 0xFFFFFF).to_bytes(3, "big")


def parse_aeth(b):
    return {"syndrome": b[0], "msn": int.from_bytes(b[1:4], "big")}


# ---------------------------------------------------------------- ICRC
def icrc(ip_hdr, udp_hdr, ib_no_icrc):
    """ICRC bytes (as they appear on the wire) for an IPv4 RoCEv2 packet.
    ip_hdr: the 20+ byte IPv4 header as sent; udp_hdr: 8 bytes;
    ib_no_icrc: BTH + ext headers + payload + pad (without the ICRC)."""
    ip = bytearray(ip_hdr)
    ip[1] = 0xFF                 # TOS (DSCP/ECN)
    ip[8] = 0xFF                 # TTL
    ip[10:12] = b"\xff\xff"      # header checksum
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"       # UDP checksum
    ib = bytearray(ib_no_icrc)
    ib[4] = 0xFF                 # BTH resv8a (FECN/BECN + reserved)
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(ib)) & 0xFFFFFFFF
    return struct.pack("<I", crc)


def ipv4_checksum(hdr):
    s = 0
    for i in range(0, len(hdr), 2):
        s += (hdr[i] << 8) | hdr[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def predicted_ipv4_header(src, dst, total_len, *, ident=0, df=True, ttl=64,
                          tos=0, proto=17):
    """The IPv4 header Linux emits for an *unconnected* UDP socket with
    IP_MTU_DISCOVER=IP_PMTUDISC_DO (DF set => IP ID 0).  TTL/TOS/checksum
    are masked by the ICRC anyway."""
    h = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, tos, total_len, ident,
                              0x4000 if df else 0, ttl, proto, 0,
                              ipaddress.IPv4Address(src).packed,
                              ipaddress.IPv4Address(dst).packed))
    struct.pack_into(">H", h, 10, ipv4_checksum(h))
    return bytes(h)


def parse_ipv4_udp(pkt):
    """Split a raw IPv4 datagram into (ip_hdr, udp_hdr, udp_payload, info)."""
    ihl = (pkt[0] & 0x0F) * 4
    ip_hdr, udp_hdr = pkt[:ihl], pkt[ihl:ihl + 8]
    tos, tot_len, ident, frag, ttl, proto = struct.unpack_from(">xBHHHBB", pkt, 0)
    sport, dport, ulen, ucsum = struct.unpack(">HHHH", udp_hdr)
    info = {
        "src": str(ipaddress.IPv4Address(pkt[12:16])),
        "dst": str(ipaddress.IPv4Address(pkt[16:20])),
        "tos": tos, "dscp": tos >> 2, "ecn": tos & 3, "ip_len": tot_len,
        "ip_id": ident, "df": bool(frag & 0x4000), "ttl": ttl, "proto": proto,
        "sport": sport, "dport": dport, "udp_len": ulen, "udp_csum": ucsum,
    }
    return ip_hdr, udp_hdr, pkt[ihl + 8:ihl + ulen], info


def check_icrc(ip_hdr, udp_hdr, udp_payload):
    """(ok, wire_icrc, computed_icrc)"""
    body, wire = udp_payload[:-4], udp_payload[-4:]
    calc = icrc(ip_hdr, udp_hdr, body)
    return wire == calc, wire, calc


def build_udp_payload(src_ip, dst_ip, sport, ib_no_icrc, *, ident=0, corrupt_icrc=False):
    """UDP payload (IB headers + ICRC) for sending from an unconnected UDP
    socket bound to (src_ip, sport) with IP_PMTUDISC_DO."""
    udp_len = 8 + len(ib_no_icrc) + 4
    ip_hdr = predicted_ipv4_header(src_ip, dst_ip, 20 + udp_len, ident=ident)
    udp_hdr = struct.pack(">HHHH", sport, ROCEV2_UDP_PORT, udp_len, 0)
    c = icrc(ip_hdr, udp_hdr, ib_no_icrc)
    if corrupt_icrc:
        c = bytes([c[0] ^ 0xFF]) + c[1:]
    return ib_no_icrc + c
