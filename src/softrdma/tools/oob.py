"""The out-of-band TCP connection over which the test tools trade their QP
addresses before any RDMA traffic: ibv_*_pingpong's pp_client_exch_dest /
pp_server_exch_dest and perftest's ethernet_client_connect /
ethernet_server_connect share these mechanics.

What is here: resolving (getaddrinfo), connecting to the first address that
answers, listening on the first address that binds (SO_REUSEADDR) and
accepting one peer, and whole-message reads and writes -- every message of
both tools is one ``write()`` of a fixed size, which the reader takes with
one ``MSG_WAITALL`` read.  The messages of a failed connect or listen are the
ones both C tools print.

What is not: the message formats, which are each tool's own (pingpong's
52-byte ``"%04x:%06x:%06x:%s"``, perftest's keys, versions and reports) and
must stay byte for byte what the real tools send.
"""

from __future__ import annotations

import socket
import sys


def err(line: str) -> None:
    """One line on stderr, at once (both tools' stderr is unbuffered)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def resolve(host: str | None, port: int, family: int = socket.AF_UNSPEC, passive: bool = False) -> list:
    """getaddrinfo(host, port, SOCK_STREAM [, AI_PASSIVE]); raises socket.gaierror."""
    return socket.getaddrinfo(host, str(port), family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE if passive else 0)


def connect_first(addrs: list, host: str, port: int, source_ip: str | None = None) -> socket.socket | None:
    """The client's loop over getaddrinfo's answers: the first socket that
    connects, or None after "Couldn't connect to HOST:PORT".  ``source_ip``
    (perftest's --source_ip) binds each socket first; a bind that fails is
    "Failed to bind socket" and ends the loop, as in perftest."""
    for family, stype, proto, _, addr in addrs:
        try:
            s = socket.socket(family, stype, proto)
        except OSError:
            continue
        if source_ip:
            try:
                s.bind((source_ip, 0))
            except OSError:
                err("Failed to bind socket")
                s.close()
                return None
        try:
            s.connect(addr)
        except OSError:
            s.close()
            continue
        return s
    err(f"Couldn't connect to {host}:{port}")
    return None


def listen_first(addrs: list, port: int, family: int | None = None) -> socket.socket | None:
    """The server's loop: the first address (of ``family``, if given) that
    binds with SO_REUSEADDR, or None after "Couldn't listen to port PORT".
    The caller listens and accepts (:func:`accept_one`)."""
    for fam, stype, proto, _, addr in addrs:
        if family is not None and fam != family:
            continue
        try:
            s = socket.socket(fam, stype, proto)
        except OSError:
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            s.close()
            continue
        return s
    err(f"Couldn't listen to port {port}")
    return None


def accept_one(lsock: socket.socket) -> socket.socket:
    """listen(1), accept the one peer, close the listening socket (whatever
    happens); raises OSError when accept fails."""
    try:
        lsock.listen(1)
        conn, _ = lsock.accept()
    finally:
        lsock.close()
    return conn


def set_nodelay(sock: socket.socket) -> None:
    """TCP_NODELAY: each message is one write and the peer waits for it, so
    Nagle would hold a small message back until the previous one is
    acknowledged."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


def write_msg(sock: socket.socket, data: bytes) -> bool:
    """One write() of the whole message: True if all of it went."""
    try:
        return sock.send(data) == len(data)
    except OSError:
        return False


def recv_msg(sock: socket.socket, n: int) -> bytes:
    """One read of an n-byte message (MSG_WAITALL: a peer's single write
    arrives whole; a short result means the peer closed).  Raises OSError."""
    return sock.recv(n, socket.MSG_WAITALL)


def read_msg(sock: socket.socket, n: int) -> bytes | None:
    """:func:`recv_msg`, None unless exactly ``n`` bytes came."""
    try:
        data = recv_msg(sock, n)
    except OSError:
        return None
    return data if len(data) == n else None
