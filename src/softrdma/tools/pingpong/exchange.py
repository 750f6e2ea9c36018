"""ibv_*_pingpong's out-of-band exchange (pingpong.c, rc_pingpong.c's
pp_client_exch_dest / pp_server_exch_dest): the 52-byte address message
``"%04x:%06x:%06x:%s\\0"`` (LID, QPN, PSN, the GID as 32 hex digits, as
gid_to_wire_gid writes it) and sscanf's reading of it, and the order of the
exchange (client: send, read, "done"; server: read, connect the QP, send,
read "done").  The TCP mechanics are :mod:`softrdma.tools.oob`'s."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from .. import oob
from ..libc import c_int
from ..oob import err as _err

MSG_SIZE = len("0000:000000:000000:00000000000000000000000000000000") + 1     # 52: sizeof msg
DONE = b"done\0"                                                                # sizeof "done" == 5


@dataclass
class Dest:
    """struct pingpong_dest."""
    lid: int
    qpn: int
    psn: int
    gid: bytes = bytes(16)


def gid_to_wire(gid: bytes) -> str:
    """gid_to_wire_gid(): the 16 GID bytes, in order, as 32 lowercase hex digits."""
    return "".join("%08x" % int.from_bytes(gid[i:i + 4], "big") for i in range(0, 16, 4))


def _scan_hex(s: str, pos: int) -> tuple[int | None, int]:
    """sscanf's %x at ``pos``: optional spaces, sign, 0x; None if no digit."""
    n = len(s)
    while pos < n and s[pos] in " \t\n\v\f\r":
        pos += 1
    neg = False
    if pos < n and s[pos] in "+-":
        neg = s[pos] == "-"
        pos += 1
    if s[pos:pos + 2].lower() == "0x" and pos + 2 < n and s[pos + 2] in "0123456789abcdefABCDEF":
        pos += 2
    start = pos
    while pos < n and s[pos] in "0123456789abcdefABCDEF":
        pos += 1
    if pos == start:
        return None, pos
    v = int(s[start:pos], 16) & 0xFFFFFFFF
    return ((-v) & 0xFFFFFFFF if neg else v), pos


def wire_to_gid(wgid: str) -> bytes:
    """wire_gid_to_gid(): four groups of 8 hex digits (sscanf %x each), in order."""
    out = b""
    for i in range(4):
        v, _ = _scan_hex(wgid[i * 8:i * 8 + 8], 0)
        out += (v or 0).to_bytes(4, "big")
    return out


def encode_dest(d: Dest) -> bytes:
    """The 52-byte message: sprintf("%04x:%06x:%06x:%s") and its NUL."""
    msg = ("%04x:%06x:%06x:%s" % (d.lid, d.qpn, d.psn, gid_to_wire(d.gid))).encode() + b"\0"
    if len(msg) != MSG_SIZE:
        raise ValueError(f"pingpong address message must be {MSG_SIZE} bytes, not {len(msg)}")
    return msg


def decode_dest(msg: bytes) -> Dest:
    """sscanf(msg, "%x:%x:%x:%s") + wire_gid_to_gid(); fields sscanf could
    not fill are 0 (the C tool leaves them uninitialised)."""
    s = bytes(msg).split(b"\0", 1)[0].decode("latin-1")
    vals = []
    pos = 0
    for i in range(3):
        v, pos = _scan_hex(s, pos)
        if v is None:
            break
        vals.append(c_int(v))
        if i < 2:
            if pos >= len(s) or s[pos] != ":":
                break
            pos += 1
    rest = s[pos + 1:] if len(vals) == 3 and pos < len(s) and s[pos] == ":" else ""
    vals += [0] * (3 - len(vals))
    word = rest.lstrip(" \t\n\v\f\r").split(None, 1)
    gid = wire_to_gid(word[0]) if word else bytes(16)
    return Dest(vals[0], vals[1], vals[2], gid)


def client_exch_dest(servername: str, port: int, my: Dest) -> Dest | None:
    """pp_client_exch_dest()."""
    try:
        res = oob.resolve(servername, port)
    except socket.gaierror as e:
        _err(f"{e.strerror} for {servername}:{port}")
        return None
    sock = oob.connect_first(res, servername, port)
    if sock is None:
        return None
    try:
        if not oob.write_msg(sock, encode_dest(my)):
            _err("Couldn't send local address")
            return None
        why = os.strerror(0)
        try:
            reply = oob.recv_msg(sock, MSG_SIZE)
            ok = len(reply) == MSG_SIZE and sock.send(DONE) == len(DONE)
        except OSError as e:
            ok, why = False, os.strerror(e.errno) if e.errno else str(e)
        if not ok:
            _err(f"client read/write: {why}")
            _err("Couldn't read/write remote address")
            return None
        return decode_dest(reply)
    finally:
        sock.close()


def server_exch_dest(port: int, my: Dest, connect) -> Dest | None:
    """pp_server_exch_dest(): ``connect(rem)`` is pp_connect_ctx (True on
    success); it runs before the reply is written."""
    try:
        res = oob.resolve(None, port, passive=True)
    except socket.gaierror as e:
        _err(f"{e.strerror} for port {port}")
        return None
    lsock = oob.listen_first(res, port)
    if lsock is None:
        return None
    try:
        conn = oob.accept_one(lsock)
    except OSError:
        _err("accept() failed")
        return None
    try:
        try:
            msg = oob.recv_msg(conn, MSG_SIZE)
            n, why = len(msg), os.strerror(0)
        except OSError as e:
            n, why = -1, os.strerror(e.errno) if e.errno else str(e)
        if n != MSG_SIZE:
            _err(f"server read: {why}")
            _err(f"{n}/{MSG_SIZE}: Couldn't read remote address")
            return None
        rem = decode_dest(msg)
        if not connect(rem):
            _err("Couldn't connect to remote QP")
            return None
        try:
            ok = oob.write_msg(conn, encode_dest(my)) and len(conn.recv(MSG_SIZE)) == len(DONE)
        except OSError:
            ok = False
        if not ok:
            _err("Couldn't send/recv local address")
            return None
        return rem
    finally:
        conn.close()


