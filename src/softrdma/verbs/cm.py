"""rdma_cm for applications: what librdmacm's cma.c does over ucma.

``EventChannel`` is rdma_create_event_channel: its own control connection
to the daemon (no device), whose ``fileno`` an application may poll; the
daemon sends the CM events there.  ``CmId`` is an rdma_cm_id: the daemon
holds its state (``device.rdma_cm``); the library holds its verbs objects
(the device's ``Context``, shared per process as librdmacm opens every
device once; the default PD; the QP made by ``create_qp`` and its CQs)
and, as librdmacm does, moves that QP through its states itself with the
attributes ``init_qp_attr`` returns:

* ``create_qp``: INIT (UD: INIT, RTR, RTS);
* ``accept`` on the passive side: INIT (again, now with the CM's access
  flags), RTR, RTS, then the REP;
* a CONNECT_RESPONSE for an ID with a QP: RTR, RTS, the RTU, and the event
  becomes ESTABLISHED (CONNECT_ERROR if that failed);
* ``disconnect``: the QP to ERR, then DREQ (or DREP);
* MULTICAST_JOIN: the QP attached to the group (its MGID and, on InfiniBand, MLID); ``leave_multicast``
  detaches it.

A synchronous ID (``CmId(None, ...)``, rdma_create_ep's) has a private
channel and waits inside each call for the event that completes it.
"""

from __future__ import annotations

import copy
import errno
import ipaddress
import select
import time

from ..enums import (
    IBV_QPS_ERR,
    IBV_QPS_INIT,
    IBV_QPS_RTR,
    IBV_QPS_RTS,
    IBV_QPT_RC,
    IBV_QPT_UC,
    IBV_QPT_UD,
    RDMA_CM_EVENT_STR,
    ibv_qp_attr_mask,
)
from ..enums import rdma_cm_event_type as EV
from ..uapi import qp_attr
from ..uapi.commands import CMD, Command
from ..wire.cma import PortSpace
from ..wire.gid import ip_gid
from .addr import AHAttr
from .cq import CQ
from .device import Context, _socket_path, connect
from .errors import PyverbsRDMAError
from .pd import PD
from .qp import QP

# enum rdma_ucm_port_space, as the service ID codec (wire.cma) names it
RDMA_PS_IPOIB = int(PortSpace.IPOIB)
RDMA_PS_IB = int(PortSpace.IB)
RDMA_PS_TCP = int(PortSpace.TCP)
RDMA_PS_UDP = int(PortSpace.UDP)
AF_IB = 27                       # struct sockaddr_ib (<infiniband/ib.h>)
RDMA_MAX_RESP_RES = 0xFF
RDMA_MAX_INIT_DEPTH = 0xFF
_QPT_NAME = {IBV_QPT_RC: "RC", IBV_QPT_UC: "UC", IBV_QPT_UD: "UD"}
_PS_QPT = {RDMA_PS_TCP: IBV_QPT_RC, RDMA_PS_UDP: IBV_QPT_UD, RDMA_PS_IPOIB: IBV_QPT_UD, RDMA_PS_IB: IBV_QPT_RC}

_contexts: dict[tuple[str, str], object] = {}   # (daemon socket, device) -> Context (one per process, as librdmacm's)


def _context(name: str):
    key = (_socket_path(), name)
    ctx = _contexts.get(key)
    if ctx is None or getattr(ctx, "closed", False) or ctx.conn.dead:
        ctx = _contexts[key] = Context(name=name)
    return ctx


def _err(what: str, e: int, detail: str = ""):
    detail = detail.split(". Errno: ")[0]           # a wrapped error's own errno text
    return PyverbsRDMAError(f"{what}" + (f": {detail}" if detail else ""), e)


class CmEvent:
    """struct rdma_cm_event, as the library hands it out."""

    def __init__(self, rec: dict, cm_id: "CmId", listen_id: "CmId | None"):
        self.event = int(rec["type"])
        self.status = int(rec.get("status", 0))
        self.id = cm_id
        self.listen_id = listen_id
        self.conn = rec.get("conn") or {}
        self.ud = rec.get("ud") or {}
        self.private_data = bytes.fromhex(rec.get("private_data", ""))
        self.acked = False

    @property
    def event_str(self) -> str:
        return RDMA_CM_EVENT_STR.get(self.event, "UNKNOWN EVENT")

    def ack(self) -> None:
        self.acked = True


class EventChannel:
    """rdma_create_event_channel."""

    def __init__(self):
        try:
            self.conn = connect()             # rdma_create_event_channel: the embedded default starts too
        except OSError as e:
            raise _err("Failed to create CM event channel (is softrdmad running?)", errno.ENODEV, str(e)) from None
        self.ids: dict[int, CmId] = {}
        self.closed = False

    def fileno(self) -> int:
        return self.conn.fileno()

    def call(self, cmd: Command, **kw) -> dict:
        return self.conn.call(cmd, **kw)[0]

    def _next_record(self, timeout: float | None) -> dict | None:
        conn = self.conn
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            conn.poll_events()
            while conn.events:
                rec = conn.events.popleft()
                if rec.get("event") == "cm":
                    return rec
            if conn.dead:
                raise _err("Failed to get CM event", errno.EIO, "softrdmad is gone")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            p = select.poll()                     # (select.select fails past fd 1023)
            p.register(conn.sock, select.POLLIN)
            p.poll(None if left is None else max(0, int(left * 1000)))

    def get_event(self, timeout: float | None = None) -> CmEvent:
        """rdma_get_cm_event: the next event, processed as librdmacm does."""
        while True:
            rec = self._next_record(timeout)
            if rec is None:
                raise _err("Failed to get CM event: timed out", errno.EAGAIN)
            ev = self._process(rec)
            if ev is not None:
                return ev

    def _process(self, rec: dict) -> CmEvent | None:
        t = int(rec["type"])
        h = rec.get("id")
        if t == EV.RDMA_CM_EVENT_CONNECT_REQUEST:
            listen = self.ids.get(rec.get("listen_id"))
            if listen is None:
                return None
            cm_id = CmId(self, listen.ps, _handle=h, _qp_type=listen.qp_type)
            cm_id.info = rec.get("info") or {}
            conn = rec.get("conn") or {}
            dev = cm_id.info.get("device")
            if dev:
                cm_id._attach(dev)
            # ucma_process_conn_req: the depths the request allows
            cm_id.initiator_depth = min(conn.get("initiator_depth", 0), cm_id.max_initiator_depth())
            cm_id.responder_resources = min(conn.get("responder_resources", 0), cm_id.max_responder_resources())
            ev = CmEvent(rec, cm_id, listen)
            if listen.sync:
                listen._pending.append(ev)
                if listen.qp_init_attr is not None:
                    cm_id.pd = listen.pd
                return ev
            return ev
        cm_id = self.ids.get(h)
        if cm_id is None:
            return None
        ev = CmEvent(rec, cm_id, None)
        if t in (EV.RDMA_CM_EVENT_ADDR_RESOLVED, EV.RDMA_CM_EVENT_ROUTE_RESOLVED):
            cm_id.info = rec.get("info") or cm_id.info
            if cm_id.info.get("device"):
                cm_id._attach(cm_id.info["device"])
        elif t == EV.RDMA_CM_EVENT_CONNECT_RESPONSE and cm_id.qp is not None:
            try:                                             # ucma_process_conn_resp
                cm_id._modify_rtr(RDMA_MAX_RESP_RES)
                cm_id._modify_rts(RDMA_MAX_INIT_DEPTH)
                self.call(CMD.cm_accept, id=cm_id.handle)
                ev.event = int(EV.RDMA_CM_EVENT_ESTABLISHED)
            except PyverbsRDMAError as e:
                cm_id._modify_err()
                cm_id.connect_error = True
                ev.event = int(EV.RDMA_CM_EVENT_CONNECT_ERROR)
                ev.status = -e.error_code
        elif t in (EV.RDMA_CM_EVENT_REJECTED, EV.RDMA_CM_EVENT_DISCONNECTED) and cm_id.connect_error:
            return None
        elif t == EV.RDMA_CM_EVENT_REJECTED:
            cm_id._modify_err()
        elif t == EV.RDMA_CM_EVENT_MULTICAST_JOIN:
            ah = ev.ud["ah_attr"]
            if rec.get("addr") is not None:          # the group's MGID and MLID, for the leave
                cm_id.mc_groups[rec["addr"]] = (ah["dgid"], ah.get("dlid", 0))
            if cm_id.qp is None or ah["dgid"] in cm_id.sendonly_groups:
                return ev
            try:                                     # ucma_process_join: (MGID, MLID)
                cm_id.qp.attach_mcast(bytes.fromhex(ah["dgid"]), ah.get("dlid", 0))
            except PyverbsRDMAError as e:
                ev.event = int(EV.RDMA_CM_EVENT_MULTICAST_ERROR)
                ev.status = -e.error_code
        return ev

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.close()


class CmId:
    """rdma_cm_id."""

    def __init__(self, channel: EventChannel | None, ps: int = RDMA_PS_TCP, qp_type: int | None = None,
                 *, _handle: int | None = None, _qp_type: int | None = None):
        self.sync = channel is None
        self.channel = channel if channel is not None else EventChannel()
        self.ps = ps
        self.qp_type = _qp_type if _qp_type is not None else (qp_type if qp_type is not None else
                                                               _PS_QPT.get(ps, IBV_QPT_RC))
        if _handle is None:
            if ps not in _PS_QPT:
                raise _err("Failed to create CM ID", errno.EINVAL, f"port space {ps:#x}")
            _handle = self.channel.call(CMD.cm_create_id, ps=ps, qp_type=_QPT_NAME.get(self.qp_type, "RC"))["id"]
        self.handle = _handle
        self.channel.ids[self.handle] = self
        self.info: dict = {}
        self.verbs = None
        self.pd = None
        self._own_pd = False
        self.qp = None
        self.send_cq = self.recv_cq = None
        self._own_cqs = False
        self.qp_init_attr = None          # a passive sync ID's, for each request (rdma_create_ep)
        self._pending: list[CmEvent] = []
        self.initiator_depth = 0
        self.responder_resources = 0
        self.connect_error = False
        self.local_ece = (0, 0)           # (vendor_id, options): rdma_set_local_ece
        self.remote_ece = (0, 0)          # the peer's, from its REQ/REP
        self.sendonly_groups: set[str] = set()   # MGIDs (hex) joined as send-only full member
        self.mc_groups: dict[str, tuple[str, int]] = {}   # group address -> (MGID hex, MLID) of its join
        self.closed = False

    # -- device ----------------------------------------------------------------------------
    def _attach(self, device: str) -> None:
        if self.verbs is None:
            self.verbs = _context(device)

    def max_initiator_depth(self) -> int:
        return self.verbs.query_device().max_qp_init_rd_atom if self.verbs is not None else 0

    def max_responder_resources(self) -> int:
        return self.verbs.query_device().max_qp_rd_atom if self.verbs is not None else 0

    def default_pd(self):
        if self.pd is None and self.verbs is not None:
            self.pd = PD(self.verbs)
            self._own_pd = True
        return self.pd

    def _call(self, what: str, cmd: Command, **kw) -> dict:
        try:
            return self.channel.call(cmd, id=self.handle, **kw)
        except PyverbsRDMAError as e:
            raise _err(what, e.error_code, str(e)) from None

    def _wait(self, *types: int, timeout: float | None = None) -> CmEvent:
        """A synchronous ID's wait for the event that completes a call."""
        ev = self.channel.get_event(timeout)
        if ev.event not in types:
            status = ev.status
            raise _err(f"Failed: got {ev.event_str} (status {status})",
                       -status if status < 0 else errno.ECONNREFUSED if ev.event ==
                       EV.RDMA_CM_EVENT_REJECTED else errno.EIO)
        return ev

    # -- addresses ---------------------------------------------------------------------------
    def bind_addr(self, ip: str | None, port: int = 0, family: int = 4) -> None:
        """``family`` 4, 6 or AF_IB (27: ``ip`` is a GID, struct sockaddr_ib)."""
        r = self._call("Failed to Bind ID", CMD.cm_bind_addr, ip=ip, port=int(port), family=family)
        self.info = r.get("info") or {}
        if self.info.get("device"):
            self._attach(self.info["device"])

    def resolve_addr(self, src: str | None, dst: str, port: int = 0, timeout_ms: int = 2000,
                     family: int = 0) -> None:
        """``family`` AF_IB (27): ``src``/``dst`` are GIDs (struct sockaddr_ib)."""
        self._call("Failed to Resolve Address", CMD.cm_resolve_addr, src=src, dst=dst, port=int(port),
                   timeout_ms=int(timeout_ms), family=int(family))
        if self.sync:
            self._wait(EV.RDMA_CM_EVENT_ADDR_RESOLVED)

    def resolve_route(self, timeout_ms: int = 2000) -> None:
        self._call("Failed to Resolve Route", CMD.cm_resolve_route, timeout_ms=int(timeout_ms))
        if self.sync:
            self._wait(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)

    def listen(self, backlog: int = 0) -> None:
        r = self._call("Listen Failed", CMD.cm_listen, backlog=int(backlog))
        self.info = r.get("info") or self.info

    def query(self) -> dict:
        self.info = self._call("Failed to query CM ID", CMD.cm_query)["info"]
        return self.info

    def set_option(self, option: str, value: int) -> None:
        self._call("Failed to set option", CMD.cm_set_option, option=option, value=int(value))

    # -- QP ---------------------------------------------------------------------------------------
    def init_qp_attr(self, qp_state: int) -> tuple[dict, int]:
        a = self._call("Failed to get QP attributes", CMD.cm_init_qp_attr, qp_state=int(qp_state))["attr"]
        return a, qp_attr.mask_of(a)

    def _modify(self, qp_state: int, **override) -> None:
        a, mask = self.init_qp_attr(qp_state)
        for k, v in override.items():
            if k in a:
                a[k] = v
        self.qp.modify_wire(a, mask)

    def _modify_rtr(self, resp_res: int) -> None:
        self._modify(IBV_QPS_INIT)
        if resp_res != RDMA_MAX_RESP_RES:
            self._modify(IBV_QPS_RTR, max_dest_rd_atomic=resp_res)
        else:
            self._modify(IBV_QPS_RTR)

    def _modify_rts(self, init_depth: int) -> None:
        if init_depth != RDMA_MAX_INIT_DEPTH:
            self._modify(IBV_QPS_RTS, max_rd_atomic=init_depth)
        else:
            self._modify(IBV_QPS_RTS)

    def _modify_err(self) -> None:
        if self.qp is not None:
            try:
                self.qp.modify_wire({"qp_state": IBV_QPS_ERR}, int(ibv_qp_attr_mask.IBV_QP_STATE))
            except PyverbsRDMAError:
                pass

    def create_qp(self, init_attr, pd=None):
        """rdma_create_qp: a QP on the ID's device, with CQs made for it
        when ``init_attr`` names none, moved to INIT (UD: to RTS)."""
        if self.qp is not None or self.verbs is None:
            raise _err("Failed to Create QP", errno.EINVAL,
                       "the ID has a QP already" if self.qp is not None else "the ID has no device yet")
        pd = pd if pd is not None else self.default_pd()
        if pd.ctx is not self.verbs:
            raise _err("Failed to Create QP", errno.EINVAL, "the PD is on another device")
        if init_attr.send_cq is None or init_attr.recv_cq is None:
            if init_attr.send_cq is None:
                self.send_cq = CQ(self.verbs, max(1, init_attr.cap.max_send_wr))
                init_attr.send_cq = self.send_cq
            if init_attr.recv_cq is None:
                self.recv_cq = CQ(self.verbs, max(1, init_attr.cap.max_recv_wr))
                init_attr.recv_cq = self.recv_cq
            self._own_cqs = True
        else:
            self.send_cq, self.recv_cq = init_attr.send_cq, init_attr.recv_cq
        init_attr.qp_type = self.qp_type
        qp = QP(pd, init_attr)
        self.qp = qp
        try:
            if self.qp_type == IBV_QPT_UD:
                for st in (IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS):
                    self._modify(st)
            else:
                self._modify(IBV_QPS_INIT)
        except PyverbsRDMAError:
            self.qp = None
            qp.close()
            raise
        return qp

    def destroy_qp(self) -> None:
        if self.qp is not None:
            self.qp.close()
            self.qp = None
        if self._own_cqs:
            for cq in (self.send_cq, self.recv_cq):
                if cq is not None:
                    cq.close()
            self._own_cqs = False
        self.send_cq = self.recv_cq = None

    # -- connections -----------------------------------------------------------------------------
    def _conn_wire(self, p: dict | None, default_depths: tuple[int, int]) -> tuple[dict, str]:
        """ucma_copy_conn_param_to_kern."""
        p = dict(p or {})
        pd = bytes(p.pop("private_data", b"") or b"")
        out = {"responder_resources": default_depths[0], "initiator_depth": default_depths[1],
               "retry_count": p.get("retry_count", 7), "rnr_retry_count": p.get("rnr_retry_count", 7),
               "flow_control": p.get("flow_control", 0), "qkey": p.get("qkey", 0)}
        if self.qp is not None:
            out["qp_num"], out["srq"] = self.qp.qp_num, int(getattr(self.qp, "srq", None) is not None)
        else:
            out["qp_num"], out["srq"] = p.get("qp_num", 0), p.get("srq", 0)
        return out, pd.hex()

    def connect(self, param: dict | None = None) -> None:
        """rdma_connect."""
        if param:
            ini, res = param.get("initiator_depth", 1), param.get("responder_resources", 1)
            if ini > self.max_initiator_depth() or res > self.max_responder_resources():
                raise _err("Failed to Connect", errno.EINVAL, "depths above the device's")
        else:
            ini, res = self.max_initiator_depth(), self.max_responder_resources()
        self.initiator_depth, self.responder_resources = ini, res
        conn, pd = self._conn_wire(param, (res, ini))
        self._call("Failed to Connect", CMD.cm_connect, conn=conn, private_data=pd)
        if self.sync:
            self._wait(EV.RDMA_CM_EVENT_ESTABLISHED)

    def accept(self, param: dict | None = None) -> None:
        """rdma_accept (passive side)."""
        if param:
            res = param.get("responder_resources", RDMA_MAX_RESP_RES)
            ini = param.get("initiator_depth", RDMA_MAX_INIT_DEPTH)
            if res != RDMA_MAX_RESP_RES:
                if res > self.max_responder_resources():
                    raise _err("Failed to Accept Connection", errno.EINVAL, "responder resources")
                self.responder_resources = res
            if ini != RDMA_MAX_INIT_DEPTH:
                if ini > self.max_initiator_depth():
                    raise _err("Failed to Accept Connection", errno.EINVAL, "initiator depth")
                self.initiator_depth = ini
        if self.qp is not None and self.qp_type != IBV_QPT_UD:
            try:
                self._modify_rtr(self.responder_resources)
                self._modify_rts(self.initiator_depth)
            except PyverbsRDMAError as e:
                self._modify_err()
                raise _err("Failed to Accept Connection", e.error_code, str(e)) from None
        conn, pd = self._conn_wire(param, (self.responder_resources, self.initiator_depth))
        self._call("Failed to Accept Connection", CMD.cm_accept, conn=conn, private_data=pd)
        if self.sync and self.qp_type != IBV_QPT_UD:
            self._wait(EV.RDMA_CM_EVENT_ESTABLISHED)

    def establish(self) -> None:
        """rdma_establish: the active side's RTU when the ID has no QP."""
        self._call("Failed to Complete an active connection request", CMD.cm_accept)

    def notify(self) -> None:
        self._call("Failed to notify", CMD.cm_notify)

    def reject(self, private_data: bytes = b"") -> None:
        self._call("Failed to Reject", CMD.cm_reject, private_data=bytes(private_data).hex())

    def disconnect(self) -> None:
        """rdma_disconnect: the QP to ERR, then DREQ (or DREP)."""
        self._modify_err()
        self._call("Failed to Disconnect", CMD.cm_disconnect)
        if self.sync:
            try:
                self._wait(EV.RDMA_CM_EVENT_DISCONNECTED, timeout=5.0)
            except PyverbsRDMAError:
                pass

    def get_request(self, timeout: float | None = None) -> "CmId":
        """rdma_get_request on a synchronous listening ID."""
        while not self._pending:
            ev = self.channel.get_event(timeout)
            if ev.event != EV.RDMA_CM_EVENT_CONNECT_REQUEST:
                continue
        ev = self._pending.pop(0)
        new = ev.id
        new.sync = True
        new.channel = self.channel
        if self.qp_init_attr is not None:
            new.create_qp(copy.copy(self.qp_init_attr), self.pd)
        return new

    # -- multicast ---------------------------------------------------------------------------------
    def join_multicast(self, addr: str, sendonly: bool = False) -> None:
        """rdma_join_multicast; a send-only full member's QP is not attached
        to the group (librdmacm's ucma_process_join)."""
        if sendonly:
            self.sendonly_groups.add(ip_gid(addr).hex())
        self._call("Failed to Join multicast", CMD.cm_join_multicast, addr=addr)
        if self.sync:
            self._wait(EV.RDMA_CM_EVENT_MULTICAST_JOIN)

    def leave_multicast(self, addr: str) -> None:
        mgid, mlid = self.mc_groups.pop(str(ipaddress.ip_address(addr)), (ip_gid(addr).hex(), 0))
        if self.qp is not None and mgid not in self.sendonly_groups:
            try:
                self.qp.detach_mcast(bytes.fromhex(mgid), mlid)
            except PyverbsRDMAError:
                pass
        self._call("Failed to leave multicast", CMD.cm_leave_multicast, addr=addr)

    def migrate(self, channel: EventChannel) -> None:
        """rdma_migrate_id: this ID's events go to ``channel`` from now on,
        with those already sent but not yet read."""
        if channel is self.channel:
            return
        token = channel.call(CMD.cm_channel_token)["token"]
        old, old_handle = self.channel, self.handle
        r = self._call("Failed to migrate ID", CMD.cm_migrate_id, token=token)
        old.conn.poll_events()
        keep = []
        for rec in old.conn.events:
            if rec.get("event") == "cm" and rec.get("id") == old_handle:
                channel.conn.events.append(dict(rec, id=r["id"]))
            else:
                keep.append(rec)
        old.conn.events.clear()
        old.conn.events.extend(keep)
        old.ids.pop(old_handle, None)
        self.handle = r["id"]
        self.channel = channel
        channel.ids[self.handle] = self
        self.sync = False

    # -- teardown ------------------------------------------------------------------------------------
    def destroy(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.destroy_qp()
        if self._own_pd and self.pd is not None:
            try:                 # rdma_destroy_ep ignores ibv_dealloc_pd's EBUSY (an MR the app keeps)
                self.pd.close()
            except PyverbsRDMAError:
                pass
            self.pd = None
        try:
            if not self.channel.closed:
                self.channel.call(CMD.cm_destroy_id, id=self.handle)
        except PyverbsRDMAError:
            pass
        self.channel.ids.pop(self.handle, None)
        if self.sync and not self.channel.ids:
            self.channel.close()


def ah_attr_from(ud: dict) -> AHAttr:
    return AHAttr.from_wire(ud["ah_attr"])


__all__ = ["EventChannel", "CmId", "CmEvent", "ah_attr_from", "AF_IB", "RDMA_PS_TCP", "RDMA_PS_UDP", "RDMA_PS_IB",
           "RDMA_PS_IPOIB"]
