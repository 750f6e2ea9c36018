"""Multicast attach and detach (ibv_attach_mcast): the device joins a
group, with a socket the loop watches, while any QP is attached to it."""

from __future__ import annotations

import errno
import selectors

from ...errors import VerbsError


def _mcast_args(c, m):
    dqp = c.get(m.get("qp"), "qp")
    g = m.get("gid")
    lid = m.get("lid", 0)
    try:
        gid = bytes.fromhex(g) if isinstance(g, str) else b""
    except ValueError:
        gid = b""
    if len(gid) != 16 or type(lid) is not int or not 0 <= lid <= 0xFFFF:
        raise VerbsError(errno.EINVAL, "bad multicast GID or LID")
    return dqp.qp, gid, lid


def cmd_attach_mcast(daemon, c, m, fds):
    """ibv_attach_mcast; the device joins the group while any QP is attached."""
    qp, gid, lid = _mcast_args(c, m)
    dev = c.device
    opened = dev.mcast.attach(qp, gid, lid)
    if opened is not None:
        daemon.sel.register(opened.sock, selectors.EVENT_READ, ("mcast", (dev, opened)))
    return {}, []


def cmd_detach_mcast(daemon, c, m, fds):
    qp, gid, lid = _mcast_args(c, m)
    close_mcast_sockets(daemon, [c.device.mcast.detach(qp, gid, lid)])
    return {}, []


def close_mcast_sockets(daemon, socks) -> None:
    """Group sockets nobody is attached to any more: leave the group."""
    for sk in socks:
        if sk is None:
            continue
        try:
            daemon.sel.unregister(sk.sock)
        except (KeyError, ValueError):
            pass
        sk.close()
