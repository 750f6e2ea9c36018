"""rdma_cm over the IB CM: service IDs and the private-data header (IBA annex A11).

As the kernel's drivers/infiniband/core/cma.c writes them.  An rdma_cm
connection is an IB CM connection whose service ID encodes the port space
and the port::

    service_id = (ps << 16) | port        e.g. TCP port 18515 -> 0x0000000001064853

and whose REQ (and SIDR_REQ) private data starts with ``struct cma_hdr``
(36 bytes), the application's private data after it::

    cma_version:8 (0x00) | ip_version:8 (version << 4) | port:16 (the *source* port)
    src_addr:128 | dst_addr:128

An IPv4 address fills the last 4 bytes of its 16 (``union cma_ip_addr``:
``pad[3]`` zero, then ``ip4.addr``); the receiver reads only those 4 bytes.
Only the REQ and SIDR_REQ carry the header; REP, RTU, REJ, DREQ, ... carry
the application's bytes as they are.
"""

from __future__ import annotations

import ipaddress
import struct
from enum import IntEnum
from typing import NamedTuple

from .cm import PRIVATE_DATA_SIZE
from .errors import WireError


class PortSpace(IntEnum):
    """enum rdma_ucm_port_space (rdma/rdma_user_cm.h)."""

    IPOIB = 0x0002
    IB = 0x013F
    TCP = 0x0106
    UDP = 0x0111


RDMA_PS_IPOIB = PortSpace.IPOIB
RDMA_PS_IB = PortSpace.IB
RDMA_PS_TCP = PortSpace.TCP
RDMA_PS_UDP = PortSpace.UDP

# ib_cm.h: the service IDs rdma_cm listens on (TCP, UDP and IB spaces).
IB_CMA_SERVICE_ID = 0x0000000001000000
IB_CMA_SERVICE_ID_MASK = 0xFFFFFFFFFF000000

CMA_VERSION = 0x00
CMA_HDR = struct.Struct(">BBH16s16s")
CMA_HDR_SIZE = CMA_HDR.size   # 36
#: The application's REQ private data after the header (librdmacm's 56).
CMA_REQ_USER_DATA = PRIVATE_DATA_SIZE["REQ"] - CMA_HDR_SIZE
CMA_SIDR_REQ_USER_DATA = PRIVATE_DATA_SIZE["SIDR_REQ"] - CMA_HDR_SIZE

_IP4_PAD = bytes(12)


def service_id(ps: int, port: int) -> int:
    """rdma_get_service_id(): the 64-bit service ID of ``port`` in space ``ps``."""
    if ps not in PortSpace._value2member_map_:
        raise WireError("bad_field", f"port space 0x{ps:x}")
    if not 0 <= port <= 0xFFFF:
        raise WireError("bad_field", f"port {port}")
    return (ps << 16) | port


def from_service_id(sid: int) -> tuple[PortSpace, int]:
    """(port space, port) of an rdma_cm service ID; WireError if it is not one."""
    if not 0 <= sid < 1 << 64 or sid >> 32:
        raise WireError("bad_service_id", f"0x{sid:016x} is not an rdma_cm service ID")
    ps = (sid >> 16) & 0xFFFF
    if ps not in PortSpace._value2member_map_:
        raise WireError("bad_service_id", f"0x{sid:016x}: port space 0x{ps:04x}")
    return PortSpace(ps), sid & 0xFFFF


def is_cma_service_id(sid: int) -> bool:
    """The service IDs rdma_cm's IB listeners claim (cma_ib_listen)."""
    return sid & IB_CMA_SERVICE_ID_MASK == IB_CMA_SERVICE_ID


class CmaHdr(NamedTuple):
    cma_version: int
    ip_version: int            # 4 or 6
    port: int                  # the requester's (source) port
    src_addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst_addr: ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(a):
    return ipaddress.ip_address(bytes(a) if isinstance(a, (bytes, bytearray, memoryview)) else a)


def _addr16(a, version: int) -> bytes:
    a = _ip(a)
    if a.version != version:
        raise WireError("bad_field", f"{a} is not IPv{version}")
    return _IP4_PAD + a.packed if version == 4 else a.packed


def pack_cma_hdr(src, dst, port: int) -> bytes:
    """cma_format_hdr(): ``src``/``dst`` are addresses (ipaddress objects,
    strings, or 4/16 packed bytes) of the same family."""
    s = _ip(src)
    if not 0 <= port <= 0xFFFF:
        raise WireError("bad_field", f"port {port}")
    v = s.version
    return CMA_HDR.pack(CMA_VERSION, v << 4, port, _addr16(s, v), _addr16(dst, v))


def req_private_data(src, dst, port: int, user: bytes = b"") -> bytes:
    """The REQ's private data: the header, then at most 56 bytes of the
    application's."""
    if len(user) > CMA_REQ_USER_DATA:
        raise WireError("bad_length", f"{len(user)} bytes of private data > {CMA_REQ_USER_DATA}")
    return pack_cma_hdr(src, dst, port) + bytes(user)


def parse_cma_hdr(data) -> CmaHdr:
    """The header at the start of an untrusted REQ/SIDR_REQ private data
    (cma_save_net_info's checks: version 0, IP version 4 or 6)."""
    if len(data) < CMA_HDR_SIZE:
        raise WireError("truncated", f"cma_hdr of {len(data)} bytes, needs {CMA_HDR_SIZE}")
    ver, ipv, port, src, dst = CMA_HDR.unpack_from(data, 0)
    if ver != CMA_VERSION:
        raise WireError("bad_cma_version", f"cma_version 0x{ver:02x}")
    ipv >>= 4
    if ipv == 4:
        return CmaHdr(ver, 4, port, ipaddress.IPv4Address(src[12:]), ipaddress.IPv4Address(dst[12:]))
    if ipv == 6:
        return CmaHdr(ver, 6, port, ipaddress.IPv6Address(src), ipaddress.IPv6Address(dst))
    raise WireError("bad_ip_version", f"cma_hdr IP version {ipv}")
