"""The control commands of rdma_cm (ucma's ABI, one ``cm_*`` op each).

A connection that sends them is an event channel: it needs no device.
Every field is checked before ``device.rdma_cm`` sees it; the IDs are the
connection's objects (kind ``cm_id``), destroyed with it.
"""

from __future__ import annotations

import errno
import ipaddress
import secrets

from ...errors import VerbsError
from ...uapi import request as rq
from ..cma_id import AF_IB, IDLE

_MAX_PD = 256          # more than any CM message's private data


def _ip(m: dict, key: str, optional: bool = False) -> str | None:
    v = m.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or len(v) > 64:
        raise rq.bad(f"{key}: expected an IP address")
    try:
        return str(ipaddress.ip_address(v))
    except ValueError:
        raise VerbsError(errno.EINVAL, f"{key}: {v!r} is not an IP address") from None


def _pd(m: dict) -> bytes:
    v = m.get("private_data") or ""
    if not isinstance(v, str) or len(v) > 2 * _MAX_PD:
        raise rq.bad("private_data: expected hex text")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise rq.bad("private_data: expected hex text") from None


def _conn(m: dict) -> dict | None:
    c = m.get("conn")
    if c is None:
        return None
    if not isinstance(c, dict):
        raise rq.bad("conn: expected an object")
    out = {}
    for k, lim in (("responder_resources", rq.U8), ("initiator_depth", rq.U8), ("flow_control", rq.U8),
                   ("retry_count", rq.U8), ("rnr_retry_count", rq.U8), ("srq", rq.U8),
                   ("qp_num", 0xFFFFFF), ("qkey", rq.U32)):
        if k in c:
            out[k] = rq.uint(c, k, lim)
    return out


def _cm_id(c, m):
    return c.get(rq.handle(m, "id"), "cm_id")


def cmd_cm_create_id(daemon, c, m, fds):
    cid = daemon.rdma_cm.create_id(c, rq.uint(m, "ps", rq.U16), rq.string(m, "qp_type", 4, "RC"))
    return {"id": cid.handle}, []


def cmd_cm_destroy_id(daemon, c, m, fds):
    h = rq.handle(m, "id")
    cid = c.get(h, "cm_id")
    daemon.rdma_cm.destroy_id(cid)
    del c.objects[h]
    return {}, []


def cmd_cm_set_option(daemon, c, m, fds):
    cid = _cm_id(c, m)
    opt = rq.string(m, "option", 32)
    if opt == "reuseaddr":
        v = rq.uint(m, "value", rq.U32)
        if not v and cid.state != IDLE:
            raise VerbsError(errno.EINVAL, "reuseaddr can only be cleared before bind")
        cid.reuseaddr = bool(v)
    elif opt == "tos":
        cid.tos, cid.tos_set = rq.uint(m, "value", rq.U8), True
    elif opt == "ack_timeout":                  # rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)
        cid.timeout = rq.uint(m, "value", 31)
    elif opt == "afonly":
        rq.uint(m, "value", rq.U32)
    else:
        raise VerbsError(errno.ENOSYS, f"option {opt!r} is not supported")
    return {}, []


def _family(m: dict, default: int) -> int:
    """4, 6 or AF_IB (27: the addresses are GIDs, written as IPv6 addresses)."""
    f = rq.uint(m, "family", AF_IB, default)
    return f if f in (4, 6, AF_IB) else 4


def _addr(m: dict, key: str, family: int, optional: bool = False) -> str | None:
    a = _ip(m, key, optional)
    if a is not None and family == AF_IB and ipaddress.ip_address(a).version != 6:
        raise VerbsError(errno.EINVAL, f"{key}: {a!r} is not a GID")
    return a


def cmd_cm_bind_addr(daemon, c, m, fds):
    cid = _cm_id(c, m)
    family = _family(m, 4)
    daemon.rdma_cm.bind_addr(cid, _addr(m, "ip", family, True), rq.uint(m, "port", rq.U16, 0), family)
    return {"info": cid.info()}, []


def cmd_cm_resolve_addr(daemon, c, m, fds):
    cid = _cm_id(c, m)
    rq.uint(m, "timeout_ms", rq.U32, 2000)
    family = _family(m, 0)
    daemon.rdma_cm.resolve_addr(cid, _addr(m, "src", family, True), _addr(m, "dst", family),
                                rq.uint(m, "port", rq.U16, 0), family)
    return {}, []


def cmd_cm_resolve_route(daemon, c, m, fds):
    cid = _cm_id(c, m)
    daemon.rdma_cm.resolve_route(cid, rq.uint(m, "timeout_ms", rq.U32, 2000))
    return {}, []


def cmd_cm_listen(daemon, c, m, fds):
    cid = _cm_id(c, m)
    daemon.rdma_cm.listen(cid, rq.uint(m, "backlog", 0x7FFFFFFF, 0))
    return {"info": cid.info()}, []


def cmd_cm_connect(daemon, c, m, fds):
    cid = _cm_id(c, m)
    daemon.rdma_cm.connect(cid, _conn(m) or {}, _pd(m))
    return {}, []


def cmd_cm_accept(daemon, c, m, fds):
    cid = _cm_id(c, m)
    daemon.rdma_cm.accept(cid, _conn(m), _pd(m))
    return {}, []


def cmd_cm_reject(daemon, c, m, fds):
    cid = _cm_id(c, m)
    daemon.rdma_cm.reject(cid, _pd(m))
    return {}, []


def cmd_cm_disconnect(daemon, c, m, fds):
    daemon.rdma_cm.disconnect(_cm_id(c, m))
    return {}, []


def cmd_cm_notify(daemon, c, m, fds):
    daemon.rdma_cm.notify(_cm_id(c, m))
    return {}, []


def cmd_cm_init_qp_attr(daemon, c, m, fds):
    cid = _cm_id(c, m)
    return {"attr": daemon.rdma_cm.init_qp_attr(cid, rq.uint(m, "qp_state", 6))}, []


def cmd_cm_query(daemon, c, m, fds):
    return {"info": _cm_id(c, m).info()}, []


def cmd_cm_channel_token(daemon, c, m, fds):
    """A secret naming this event channel, for rdma_migrate_id."""
    if getattr(c, "cm_token", None) is None:
        c.cm_token = secrets.token_hex(16)
    return {"token": c.cm_token}, []


def cmd_cm_migrate_id(daemon, c, m, fds):
    """rdma_migrate_id: the ID, and the events not yet read, move to the
    channel the token names (of the same process, as ucma_migrate_id
    takes an fd of the caller's)."""
    h = rq.handle(m, "id")
    cid = c.get(h, "cm_id")
    token = rq.string(m, "token", 64)
    dest = next((cl for cl in daemon.clients.values() if getattr(cl, "cm_token", None) == token), None)
    if dest is None or dest.pid != c.pid:
        raise VerbsError(errno.EINVAL, "no event channel of this process has that token")
    if dest is c:
        return {"id": h}, []
    del c.objects[h]
    new = dest.add("cm_id", cid)
    daemon.rdma_cm.migrate(cid, dest, new)
    return {"id": new}, []


def cmd_cm_join_multicast(daemon, c, m, fds):
    daemon.rdma_cm.join_multicast(_cm_id(c, m), _ip(m, "addr"))
    return {}, []


def cmd_cm_leave_multicast(daemon, c, m, fds):
    daemon.rdma_cm.leave_multicast(_cm_id(c, m), _ip(m, "addr"))
    return {}, []


def free_cm_id(daemon, c, cid) -> None:
    daemon.rdma_cm.destroy_id(cid)
