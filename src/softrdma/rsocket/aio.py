"""asyncio over rsockets: streams (``open_rsocket_connection``,
``start_rsocket_server``) and transports/protocols
(``create_rsocket_connection``, ``create_rsocket_server``).

An ``RSocket`` is a non-blocking socket whose ``fileno()`` becomes
readable and writable as its rsocket does (``signal``), so asyncio's own
selector transports drive it: the event loop sleeps in its selector
while nothing happens, and wakes when the progress thread marks the
descriptor after a completion or CM event -- no polling.
"""

from __future__ import annotations

import asyncio
import socket as _socket

from .api import RSocket

_DEFAULT_LIMIT = 2 ** 16


async def _connected(host, port) -> RSocket:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=_socket.SOCK_STREAM)
    err: OSError | None = None
    for family, _, _, _, sa in infos:
        if family not in (_socket.AF_INET, _socket.AF_INET6):
            continue
        rs = RSocket(family)
        rs.setblocking(False)
        try:
            await loop.sock_connect(rs, sa[:2])
            return rs
        except OSError as e:
            err = e
            rs.close()
    raise err if err is not None else OSError(f"no address for {host!r}")


def _listening(host, port, backlog: int, reuse_address: bool = True) -> RSocket:
    family = _socket.AF_INET6 if host and ":" in host else _socket.AF_INET
    rs = RSocket(family)
    try:
        if reuse_address:
            rs.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        rs.bind((host or "", port or 0))
        rs.listen(backlog)
        rs.setblocking(False)
    except OSError:
        rs.close()
        raise
    return rs


async def open_rsocket_connection(host=None, port=None, *, limit: int = _DEFAULT_LIMIT, **kw):
    """asyncio.open_connection over an rsocket: (StreamReader, StreamWriter)."""
    rs = await _connected(host, port)
    return await asyncio.open_connection(sock=rs, limit=limit, **kw)


async def start_rsocket_server(client_connected_cb, host=None, port=None, *, limit: int = _DEFAULT_LIMIT,
                               backlog: int = 100, **kw):
    """asyncio.start_server on a listening rsocket."""
    rs = _listening(host, port, backlog)
    return await asyncio.start_server(client_connected_cb, sock=rs, limit=limit, backlog=backlog, **kw)


async def create_rsocket_connection(protocol_factory, host=None, port=None, **kw):
    """loop.create_connection over an rsocket: (transport, protocol)."""
    rs = await _connected(host, port)
    return await asyncio.get_running_loop().create_connection(protocol_factory, sock=rs, **kw)


async def create_rsocket_server(protocol_factory, host=None, port=None, *, backlog: int = 100, **kw):
    """loop.create_server on a listening rsocket."""
    rs = _listening(host, port, backlog)
    return await asyncio.get_running_loop().create_server(protocol_factory, sock=rs, backlog=backlog, **kw)


__all__ = ["open_rsocket_connection", "start_rsocket_server", "create_rsocket_connection", "create_rsocket_server"]
