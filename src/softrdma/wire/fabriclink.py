"""The fabric link: what an InfiniBand device port and ``softrdma fabric
serve`` exchange, as bytes.

A device port attached to a CA port of a running fabric holds one
``SOCK_SEQPACKET`` connection to the server's data socket
(``data_socket_path``: a file, so daemons in other network namespaces
reach it; the fabric's ibsim sockets are abstract and per namespace).
One message per packet of the connection; each starts with ``HDR``
(type, version, a 16-bit argument).  The connection's end is the
port's end: the server sees a daemon die as the socket closing.

========== ========== =================================================
type       direction  body
========== ========== =================================================
ATTACH     dev → fab  port number (u8) then ``node\\0device``: the CA by
                      its node description, its name in the topology
                      file, or ``0x<node GUID>``; the device's name, for
                      the server's log
PORT_INFO  fab → dev  the port as the fabric's SMA answers for it:
                      NodeInfo (40 bytes), PortInfo (64), the first
                      GUIDInfo block (64), then the P_Key table (the
                      argument: how many be16 entries).  Sent on attach
                      and on every change (a Set from the SM, link down
                      or up), so the device never asks.
PACKETS    both       the argument: how many packets; each is a be16
                      length and a native IB packet (``wire.lrh``: LRH
                      .. VCRC).  From the device: packets it injects at
                      its port; from the fabric: packets delivered to it.
ERROR      fab → dev  be32 errno and a UTF-8 reason; the server closes
                      the connection after it (attach refused: no such
                      CA, ENOENT; port taken, EBUSY; not a CA, EINVAL)
PORT_CAP   dev → fab  be32 PortInfo.CapabilityMask bits to set, be32 bits
                      to clear (the kernel's ``ib_modify_port``
                      set/clr_port_cap_mask): IsSM while an SM is bound
                      to the port (an open issm device).  The fabric
                      answers with PORT_INFO if that changed the port;
                      a connection's end clears what it set.
========== ========== =================================================

QP0 SMPs and PMA MADs for an attached port are the fabric's own agents'
business (one model of the CA); every other packet -- data and QP1 MADs
(SA, CM, vendor classes) -- goes to the device.

Framing (untrusted bytes raise only ``WireError``), and the socket buffers
both ends ask for (``set_buffers``).
"""

from __future__ import annotations

import os
import socket
import struct
from enum import IntEnum
from typing import NamedTuple

from .errors import WireError

VERSION = 1
HDR = struct.Struct(">BBH")          # type, version, argument
_ATTACH = struct.Struct(">B3x")      # port number
_PLEN = struct.Struct(">H")
_ERRNO = struct.Struct(">i")
_PORT_CAP = struct.Struct(">II")
NODE_INFO_BYTES = 40
PORT_INFO_BYTES = 64
GUID_INFO_BYTES = 64
# A PACKETS batch stays under this.  Every message costs each of the three
# processes it crosses (sending daemon, fabric server, receiving daemon) a
# wakeup, two system calls and a pass of Python: 128 KiB (62 packets at MTU
# 2048) spends that half as often as 64 KiB did, and still fits a socket
# whose send buffer is the kernel's default (net.core.wmem_default).
MAX_MESSAGE = 128 * 1024
MAX_NAME = 256


class MsgType(IntEnum):
    ATTACH = 1
    PORT_INFO = 2
    PACKETS = 3
    ERROR = 4
    PORT_CAP = 5


class PortInfoMsg(NamedTuple):
    node_info: bytes                 # raw attributes, decoded with wire.smp
    port_info: bytes
    guid_info: bytes
    pkeys: tuple[int, ...]


DIR_ENV = "SOFTRDMA_FABRIC_DIR"


def default_directory() -> str:
    """Where fabric servers put their data sockets: $SOFTRDMA_FABRIC_DIR,
    else /run/softrdma-fabric for root and /tmp/softrdma-fabric-<uid>
    for others (the same for every namespace sharing the filesystem)."""
    d = os.environ.get(DIR_ENV)
    if d:
        return d
    uid = os.getuid()
    return "/run/softrdma-fabric" if uid == 0 else f"/tmp/softrdma-fabric-{uid}"


def set_buffers(s: socket.socket, size: int) -> None:
    """Send and receive buffers of ``size`` bytes: past net.core.wmem_max
    where the process may (SO_SNDBUFFORCE, CAP_NET_ADMIN), else as far as
    that allows.  An AF_UNIX sender's buffer bounds the messages in flight
    to its peer (the peer's receive queue is charged to it)."""
    for force, plain in ((getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF),
                         (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF)):
        try:
            s.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            try:
                s.setsockopt(socket.SOL_SOCKET, plain, size)
            except OSError:
                pass


def data_socket_path(base: str, directory: str | None = None) -> str:
    """The data socket of the fabric whose ibsim socket base name is ``base``."""
    return f"{(directory or default_directory()).rstrip('/')}/{base}.data"


def msg_type(msg) -> MsgType:
    if len(msg) < HDR.size:
        raise WireError(f"fabric link message of {len(msg)} bytes")
    t, ver, _ = HDR.unpack_from(msg)
    if ver != VERSION:
        raise WireError(f"fabric link version {ver}, expected {VERSION}")
    try:
        return MsgType(t)
    except ValueError:
        raise WireError(f"fabric link message type {t}") from None


# -- ATTACH -------------------------------------------------------------------------

def pack_attach(port: int, node: str, device: str) -> bytes:
    names = f"{node}\0{device}".encode()
    if len(names) > 2 * MAX_NAME or not 1 <= port <= 254:
        raise ValueError("bad attach request")
    return HDR.pack(MsgType.ATTACH, VERSION, 0) + _ATTACH.pack(port) + names


def parse_attach(msg) -> tuple[int, str, str]:
    """(port, node selector, device name)."""
    o = HDR.size + _ATTACH.size
    if len(msg) < o + 1 or len(msg) > o + 2 * MAX_NAME:
        raise WireError(f"ATTACH of {len(msg)} bytes")
    (port,) = _ATTACH.unpack_from(msg, HDR.size)
    try:
        node, _, device = bytes(msg[o:]).decode().partition("\0")
    except UnicodeDecodeError:
        raise WireError("ATTACH names are not UTF-8") from None
    if not node:
        raise WireError("ATTACH names no node")
    return port, node, device


# -- PORT_INFO ----------------------------------------------------------------------

def pack_port_info(node_info: bytes, port_info: bytes, guid_info: bytes, pkeys) -> bytes:
    if (len(node_info), len(port_info), len(guid_info)) != (NODE_INFO_BYTES, PORT_INFO_BYTES, GUID_INFO_BYTES):
        raise ValueError("attribute sizes")
    pk = struct.pack(f">{len(pkeys)}H", *pkeys)
    return HDR.pack(MsgType.PORT_INFO, VERSION, len(pkeys)) + bytes(node_info) + bytes(port_info) \
        + bytes(guid_info) + pk


def parse_port_info(msg) -> PortInfoMsg:
    _, _, n = HDR.unpack_from(msg)
    o = HDR.size
    end = o + NODE_INFO_BYTES + PORT_INFO_BYTES + GUID_INFO_BYTES
    if len(msg) != end + 2 * n:
        raise WireError(f"PORT_INFO of {len(msg)} bytes with {n} P_Keys")
    m = bytes(msg)
    ni = m[o:o + NODE_INFO_BYTES]
    o += NODE_INFO_BYTES
    pi = m[o:o + PORT_INFO_BYTES]
    o += PORT_INFO_BYTES
    gi = m[o:o + GUID_INFO_BYTES]
    return PortInfoMsg(ni, pi, gi, struct.unpack_from(f">{n}H", m, end))


# -- PACKETS ------------------------------------------------------------------------

def pack_packets(pkts) -> bytes:
    """One PACKETS message; the caller keeps the total under MAX_MESSAGE
    (``batches`` splits a list)."""
    parts = [HDR.pack(MsgType.PACKETS, VERSION, len(pkts))]
    for p in pkts:
        parts.append(_PLEN.pack(len(p)))
        parts.append(p)
    return b"".join(parts)


def batches(pkts, limit: int = MAX_MESSAGE):
    """``pkts`` as PACKETS messages of at most ``limit`` bytes each."""
    cur: list = []
    size = HDR.size
    for p in pkts:
        n = _PLEN.size + len(p)
        if cur and size + n > limit:
            yield pack_packets(cur)
            cur, size = [], HDR.size
        cur.append(p)
        size += n
    if cur:
        yield pack_packets(cur)


def iter_packets(msg):
    """The packets of a PACKETS message, as memoryviews into it."""
    m = memoryview(msg)
    _, _, n = HDR.unpack_from(m)
    o = HDR.size
    end = len(m)
    for _ in range(n):
        if o + 2 > end:
            raise WireError("PACKETS: truncated length")
        (ln,) = _PLEN.unpack_from(m, o)
        o += 2
        if o + ln > end:
            raise WireError(f"PACKETS: a packet of {ln} bytes past the end")
        yield m[o:o + ln]
        o += ln
    if o != end:
        raise WireError(f"PACKETS: {end - o} bytes after {n} packets")


# -- ERROR --------------------------------------------------------------------------

def pack_error(err: int, reason: str) -> bytes:
    return HDR.pack(MsgType.ERROR, VERSION, 0) + _ERRNO.pack(err) + reason.encode()[:MAX_NAME]


def parse_error(msg) -> tuple[int, str]:
    if len(msg) < HDR.size + _ERRNO.size:
        raise WireError(f"ERROR of {len(msg)} bytes")
    (err,) = _ERRNO.unpack_from(msg, HDR.size)
    return err, bytes(msg[HDR.size + _ERRNO.size:]).decode(errors="replace")


# -- PORT_CAP -----------------------------------------------------------------------

def pack_port_cap(set_mask: int, clear_mask: int = 0) -> bytes:
    return HDR.pack(MsgType.PORT_CAP, VERSION, 0) + _PORT_CAP.pack(set_mask, clear_mask)


def parse_port_cap(msg) -> tuple[int, int]:
    """(CapabilityMask bits to set, bits to clear)."""
    if len(msg) != HDR.size + _PORT_CAP.size:
        raise WireError(f"PORT_CAP of {len(msg)} bytes")
    return _PORT_CAP.unpack_from(msg, HDR.size)
