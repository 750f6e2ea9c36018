"""Raw packet QPs (IBV_QPT_RAW_PACKET): create_qp's raw branch (a send
and a receive ring and a doorbell, as any QP), create_rss_qp (a QP on an
RSS indirection table, without queues of its own), and what modify_qp,
query_qp and destroy_qp do for them (``device.raw_queues.RawQP``).

As the kernel (ib_uverbs' create_qp and create_flow): only a process with
CAP_NET_RAW may create one, EPERM otherwise; the daemon's own AF_PACKET
socket needs the same capability, and its absence is EPERM too."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...enums import IBV_RX_HASH_FUNC_TOEPLITZ
from ...errors import VerbsError
from ...transport.qp import QPCap
from ...uapi import abi
from ...uapi import request as rq
from ...uapi.raw import RSS_KEY_LEN
from ...wire.toeplitz import RX_HASH_FIELDS
from ..raw import raw_port, release
from ..raw_queues import RawQP, RssConf
from ..session import caps_of, room_for
from .fds import eventfd, ring

CAP_NET_RAW = 13


def require_net_raw(c, what: str) -> None:
    """EPERM unless the client's process has CAP_NET_RAW (capable(), read
    when it asks)."""
    if not caps_of(c.pid) >> CAP_NET_RAW & 1:
        raise VerbsError(errno.EPERM, f"{what} needs CAP_NET_RAW")


def _open_socket(port) -> None:
    try:
        port.open_socket()
    except PermissionError:
        raise VerbsError(errno.EPERM, "the daemon may not open an AF_PACKET socket (CAP_NET_RAW)") from None
    except OSError as e:
        raise VerbsError(errno.ENODEV, f"no AF_PACKET socket on {port.netdev}: {e.strerror}") from None


def _check_cap(dev, cap: QPCap) -> None:
    caps = dev.caps
    for field, most in (("max_send_wr", caps.max_qp_wr), ("max_recv_wr", caps.max_qp_wr),
                        ("max_send_sge", caps.max_sge), ("max_recv_sge", caps.max_sge),
                        ("max_inline_data", caps.max_inline_data)):
        if getattr(cap, field) > most:
            raise VerbsError(errno.EINVAL, f"{field} {getattr(cap, field)} above the device's {most}")


def _add(daemon, c, port, qp: RawQP) -> dict:
    qp.handle = c.add("qp", qp)
    port.qps[qp.qp_num] = qp
    return {"qp": qp.handle, "qp_num": qp.qp_num}


def create_raw_qp(daemon, c, m, fds):
    """create_qp for IBV_QPT_RAW_PACKET (the request create_qp's)."""
    dev = c.device
    pd = c.get(m.get("pd"), "pd")
    scq = c.get(m.get("send_cq"), "cq")
    rcq = c.get(m.get("recv_cq"), "cq")
    if m.get("srq"):
        raise VerbsError(errno.EOPNOTSUPP, "a raw packet QP with an SRQ is not supported")
    if len(fds) != 3:
        raise VerbsError(errno.EINVAL, "create_qp needs 3 fds")
    require_net_raw(c, "a raw packet QP")
    room_for(c, "qp")
    cap = QPCap(**rq.fields(rq.obj(m, "cap", {}), rq.QP_CAP, "cap"))
    _check_cap(dev, cap)
    port = raw_port(daemon, dev)
    with contextlib.ExitStack() as undo:            # every step undone if a later one fails
        undo.callback(release, dev)
        _open_socket(port)
        sq = ring(fds[0], "send queue", min_slot=abi.send_slot_size(cap.max_send_sge, cap.max_inline_data))
        undo.callback(sq.close)
        rqr = ring(fds[1], "receive queue", min_slot=abi.recv_slot_size(cap.max_recv_sge))
        undo.callback(rqr.close)
        doorbell = eventfd(fds[2], "QP")
        undo.callback(os.close, doorbell)
        qpn = dev.alloc_qpn()
        qp = RawQP(qpn, pd=pd, memory=dev.memory, send_cq=scq, recv_cq=rcq, sq_ring=sq, rq_ring=rqr,
                   doorbell=doorbell, owner=c, cap=cap, sq_sig_all=bool(m.get("sq_sig_all")), port=port)
        daemon.sel.register(doorbell, selectors.EVENT_READ, ("raw", qp.doorbell_rung))
        undo.pop_all()
    port.numbers.add(qpn)
    return _add(daemon, c, port, qp), []


def cmd_create_rss_qp(daemon, c, m, fds):
    """ibv_create_qp_ex of a raw packet QP with IBV_QP_INIT_ATTR_IND_TABLE
    and IBV_QP_INIT_ATTR_RX_HASH: receives only, through the table's WQs."""
    dev = c.device
    pd = c.get(m.get("pd"), "pd")
    table = c.get(m.get("ind_table"), "rwq_ind_table")
    func = rq.uint(m, "hash_function", rq.U8)
    key = m.get("hash_key")
    mask = rq.uint(m, "hash_fields_mask", rq.U64)
    if func != IBV_RX_HASH_FUNC_TOEPLITZ:
        raise VerbsError(errno.EOPNOTSUPP, f"rx_hash_function {func}: only IBV_RX_HASH_FUNC_TOEPLITZ")
    if not (isinstance(key, list) and len(key) == RSS_KEY_LEN and all(type(b) is int and 0 <= b < 256
                                                                      for b in key)):
        raise VerbsError(errno.EINVAL, f"the Toeplitz key must be {RSS_KEY_LEN} bytes")
    if mask & ~RX_HASH_FIELDS:
        raise VerbsError(errno.EOPNOTSUPP, f"rx_hash_fields_mask 0x{mask:x}: fields the device does not hash")
    require_net_raw(c, "a raw packet QP")
    room_for(c, "qp")
    port = raw_port(daemon, dev)
    try:
        _open_socket(port)
    except VerbsError:
        release(dev)
        raise
    qpn = dev.alloc_qpn()
    qp = RawQP(qpn, pd=pd, memory=dev.memory, send_cq=None, recv_cq=None, sq_ring=None, rq_ring=None,
               doorbell=-1, owner=c, cap=QPCap(0, 0, 0, 0, 0), sq_sig_all=False, port=port,
               rss=RssConf(table, bytes(key), mask))
    table.qps.append(qp)
    port.numbers.add(qpn)
    return _add(daemon, c, port, qp), []


def modify_raw_qp(qp: RawQP, m: dict) -> None:
    mask = rq.uint(m, "mask")
    raw = rq.obj(m, "attr", {})
    a = rq.fields({k: v for k, v in raw.items() if k not in ("ah_attr", "cap")}, rq.QP_ATTR, "attr")
    qp.modify(a, mask)


def destroy_raw_qp(qp: RawQP) -> None:
    if qp.flows:                                    # a flow holds its QP (ib_destroy_qp's EBUSY)
        raise VerbsError(errno.EBUSY, "QP still has flows")


def free_raw_qp(daemon, c, qp: RawQP) -> None:
    dev = c.device
    port = dev.raw
    if port is not None:
        for fl in list(qp.flows):
            port.remove_flow(fl)
        port.qps.pop(qp.qp_num, None)
        port.numbers.discard(qp.qp_num)
    if qp.rss is not None and qp in qp.rss.table.qps:
        qp.rss.table.qps.remove(qp)
    if qp.doorbell >= 0:
        try:
            daemon.sel.unregister(qp.doorbell)
        except (KeyError, ValueError):
            pass
    qp.close()
    release(dev)
