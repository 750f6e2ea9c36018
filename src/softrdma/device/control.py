"""The control socket's framing: one JSON message per SOCK_SEQPACKET record,
file descriptors alongside in SCM_RIGHTS.

SEQPACKET keeps record boundaries (one ``recvmsg`` is one message, with
its fds) and reports the peer's close as an empty read, which is how the
daemon learns that a process died.  Requests are ``{"op": ..., "seq": n,
...}``; replies ``{"seq": n, "errno": 0, ...}``; the daemon may also send
``{"event": ...}`` records (async events) at any time.
"""

from __future__ import annotations

import array
import json
import os
import socket

MAX_MSG = 1 << 16
MAX_FDS = 8
_FD_SIZE = array.array("i").itemsize


class ControlError(ConnectionError):
    """The control connection broke or carried garbage."""


def send_msg(sock: socket.socket, msg: dict, fds=()) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MSG:
        raise ValueError("control message too large")
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def recv_msg(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One message and the fds that came with it; (None, []) when the peer
    closed.  Raises ControlError on a malformed record (its fds are closed)."""
    data, anc, flags, _ = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(MAX_FDS * _FD_SIZE))
    fds: list[int] = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(payload[:len(payload) - len(payload) % _FD_SIZE])
            fds.extend(a)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ValueError("truncated record")
        msg = json.loads(data)
        if not isinstance(msg, dict):
            raise ValueError("not an object")
    except ValueError as e:
        for fd in fds:
            os.close(fd)
        raise ControlError(f"malformed control message: {e}") from None
    return msg, fds
