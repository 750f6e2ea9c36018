"""ibsim's client protocol (linux-rdma/ibsim include/ibsim.h), as bytes.

Owns the datagrams that umad2sim (the LD_PRELOAD libibumad emulation) and
an ibsim-compatible server exchange:

* ``struct sim_ctl`` (80 bytes, host = little-endian order on x86-64):
  magic, clientid, type, len, data[64], on the ``<base>:ctl`` socket;
* the ``data`` payloads: ``struct sim_client_info`` (CONNECT),
  ``struct sim_vendor`` (GET_VENDOR), ``struct sim_port`` (GET_PORT), the
  raw big-endian NodeInfo/PortInfo attributes, 32 be16 P_Keys, an ``int``
  issm;
* ``struct sim_request`` (288 bytes), one per MAD on the ``out<n>`` /
  ``in<pid>`` sockets: dlid/slid are a be16 in the first two bytes of a
  u32, dqp/sqp/status are be32, ``length`` is be64;
* the TID conventions: umad2sim keeps the umad agent id in TID bits
  32..47, the server the client index in bits 48..63.

Only the framing lives here; what a server does with a request is the
fabric's business.  Untrusted bytes raise only ``WireError``.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from .errors import WireError

SIM_MAGIC = 0xDEADBEEF
SIM_CTL_MAX_DATA = 64
SIM_BASENAME = "sim"
IBSIM_MAX_CLIENTS = 10              # ibsim's limit; softrdma's server has none
IBSIM_DEFAULT_SERVER_PORT = 7070    # remote (UDP) mode: ctl port, data ports follow
ETIMEDOUT = 110                     # sim_request.status when a MAD is dropped

TID_AGENT_SHIFT = 32                # umad2sim: agent id in TID bits 32..47
TID_CLIENT_SHIFT = 48               # ibsim: client index in TID bits 48..63
TID_CLIENT_MASK = 0xFFFF << TID_CLIENT_SHIFT


class SimCtlType(IntEnum):
    ERROR = 0                       # the reply type of a failed request
    CONNECT = 1
    DISCONNECT = 2
    GET_PORT = 3
    GET_VENDOR = 4
    GET_GID = 5
    GET_GUID = 6
    GET_NODEINFO = 7
    GET_PORTINFO = 8
    SET_ISSM = 9
    GET_PKEYS = 10


SIM_CTL = struct.Struct("<IIII64s")
assert SIM_CTL.size == 80
SIM_CLIENT_INFO = struct.Struct("<III32s")
SIM_VENDOR = struct.Struct("<III4xQ")          # u64 fw_ver aligned to 8
SIM_PORT = struct.Struct("<HB")                # struct sim_port: lid (host order), state
SIM_REQUEST = struct.Struct(">H2xH2xIII4xQ256s")
assert SIM_REQUEST.size == 288
SIM_REQUEST_SIZE = SIM_REQUEST.size
SIM_REQUEST_HDR = SIM_REQUEST_SIZE - 256      # the MAD starts at byte 32
SIM_PKEYS = struct.Struct(">32H")


class SimCtl(NamedTuple):
    magic: int
    clientid: int
    type: int
    len: int
    data: bytes


def parse_ctl(buf) -> SimCtl:
    """A control datagram: exactly 80 bytes with the magic (ibsim drops others)."""
    if len(buf) != SIM_CTL.size:
        raise WireError("bad_length", f"sim_ctl of {len(buf)} bytes, is {SIM_CTL.size}")
    c = SimCtl(*SIM_CTL.unpack_from(buf, 0))
    if c.magic != SIM_MAGIC:
        raise WireError("bad_magic", f"sim_ctl magic {c.magic:#x}")
    return c


def build_ctl(type_: int, data=b"", clientid: int = 0, length: int | None = None) -> bytes:
    if len(data) > SIM_CTL_MAX_DATA:
        raise WireError("bad_length", f"sim_ctl data {len(data)} > {SIM_CTL_MAX_DATA}")
    try:
        return SIM_CTL.pack(SIM_MAGIC, clientid, type_, len(data) if length is None else length,
                            bytes(data))
    except struct.error as e:
        raise WireError("bad_field", f"sim_ctl: {e}") from None


class SimClientInfo(NamedTuple):
    id: int          # pid (UDP: the client's data port) in the call, client index in the reply
    qp: int
    issm: int
    nodeid: str


def parse_client_info(data) -> SimClientInfo:
    if len(data) < SIM_CLIENT_INFO.size:
        raise WireError("truncated", f"sim_client_info of {len(data)} bytes")
    i, qp, issm, nodeid = SIM_CLIENT_INFO.unpack_from(data, 0)
    return SimClientInfo(i, qp, issm, nodeid.split(b"\0", 1)[0].decode("latin-1"))


def build_client_info(id_: int, qp: int, issm: int, nodeid: str) -> bytes:
    b = nodeid.encode("latin-1", "replace")[:31]
    return SIM_CLIENT_INFO.pack(id_ & 0xFFFFFFFF, qp & 0xFFFFFFFF, issm & 0xFFFFFFFF, b)


def build_vendor(vendor_id: int, vendor_part_id: int, hw_ver: int, fw_ver: int) -> bytes:
    return SIM_VENDOR.pack(vendor_id, vendor_part_id, hw_ver, fw_ver)


def parse_vendor(data) -> tuple[int, int, int, int]:
    if len(data) < SIM_VENDOR.size:
        raise WireError("truncated", f"sim_vendor of {len(data)} bytes")
    return SIM_VENDOR.unpack_from(data, 0)


def build_pkeys(pkeys) -> bytes:
    p = list(pkeys)[:32]
    return SIM_PKEYS.pack(*(p + [0] * (32 - len(p))))


def parse_issm(data) -> int:
    if len(data) < 4:
        raise WireError("truncated", "SET_ISSM needs an int")
    return struct.unpack_from("<i", data, 0)[0]


class SimRequest(NamedTuple):
    dlid: int
    slid: int
    dqp: int
    sqp: int
    status: int
    length: int
    mad: bytes


def parse_request(buf) -> SimRequest:
    """A MAD datagram: exactly 288 bytes (ibsim: "bad packet size")."""
    if len(buf) != SIM_REQUEST_SIZE:
        raise WireError("bad_length", f"sim_request of {len(buf)} bytes, is {SIM_REQUEST_SIZE}")
    return SimRequest(*SIM_REQUEST.unpack_from(buf, 0))


def build_request(dlid: int, slid: int, dqp: int, sqp: int, mad, status: int = 0,
                  length: int | None = None) -> bytes:
    if len(mad) > 256:
        raise WireError("bad_length", f"MAD of {len(mad)} bytes > 256")
    try:
        return SIM_REQUEST.pack(dlid, slid, dqp, sqp, status,
                                len(mad) if length is None else length, bytes(mad))
    except struct.error as e:
        raise WireError("bad_field", f"sim_request: {e}") from None


def tid_client(tid: int) -> int:
    return tid >> TID_CLIENT_SHIFT


def tid_with_client(tid: int, client: int) -> int:
    """What ibsim does to a request's TID: the client index in the top 16 bits."""
    return (tid & ~TID_CLIENT_MASK & 0xFFFFFFFFFFFFFFFF) | ((client & 0xFFFF) << TID_CLIENT_SHIFT)


def abstract_name(base: str, what: str) -> bytes:
    """The abstract AF_UNIX address ibsim and umad2sim use: a leading NUL and,
    because they pass sizeof up to the terminating NUL, a trailing NUL too."""
    return b"\0" + f"{base}:{what}".encode() + b"\0"
