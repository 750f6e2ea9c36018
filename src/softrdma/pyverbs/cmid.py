"""pyverbs.cmid: rdma-core pyverbs' rdma_cm classes over ``softrdma.verbs.cm``.

``CMID(creator=AddrInfo)`` is rdma_create_ep (a synchronous ID: each call
waits for its event); ``CMID(creator=CMEventChannel)`` is rdma_create_id
(events come as ``CMEvent(channel)``); ``CMID(creator=CMEvent,
listen_id=...)`` wraps the new ID of a CONNECT_REQUEST.  The rdma_verbs.h
helpers (``reg_msgs``, ``post_send``, ``get_send_comp``, ...) work on the
ID's QP as librdmacm's inline functions do.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from ..enums import (
    IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE,
    IBV_SEND_SIGNALED,
    IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE,
    IBV_WR_SEND,
    RDMA_CM_EVENT_ADDRINFO_RESOLVED,
)
from ..verbs import cm as _cm
from ..verbs.addr import AHAttr
from ..verbs.errors import PyverbsError, PyverbsRDMAError, PyverbsUserError
from ..verbs.mr import MR
from ..verbs.qp import ECE, QPAttr, QPInitAttr
from ..verbs.wr import SGE, RecvWR, SendWR
from .librdmacm_enums import (
    RAI_FAMILY,
    RAI_NUMERICHOST,
    RAI_PASSIVE,
    RDMA_CM_JOIN_MC_ATTR_ADDRESS,
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
    RDMA_MC_JOIN_FLAG_FULLMEMBER,
    RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
    RDMA_OPTION_ID,
    RDMA_OPTION_ID_ACK_TIMEOUT,
    RDMA_OPTION_ID_AFONLY,
    RDMA_OPTION_ID_REUSEADDR,
    RDMA_OPTION_ID_TOS,
    RDMA_PS_TCP,
    RDMA_PS_UDP,
)

__all__ = ["ConnParam", "AddrInfo", "CMEvent", "CMEventChannel", "CMID", "UDParam", "JoinMCAttrEx"]


class ConnParam:
    """struct rdma_conn_param."""

    def __init__(self, resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0, qp_num=0,
                 private_data=None):
        self.responder_resources = resources
        self.initiator_depth = depth
        self.flow_control = flow_control
        self.retry_count = retry
        self.rnr_retry_count = rnr_retry
        self.srq = srq
        self.qp_num = qp_num
        self.private_data = bytes(private_data or b"")

    @property
    def qpn(self):
        return self.qp_num

    @qpn.setter
    def qpn(self, val):
        self.qp_num = val

    def to_dict(self) -> dict:
        return {"responder_resources": self.responder_resources, "initiator_depth": self.initiator_depth,
                "flow_control": self.flow_control, "retry_count": self.retry_count,
                "rnr_retry_count": self.rnr_retry_count, "srq": self.srq, "qp_num": self.qp_num,
                "private_data": self.private_data}

    def __str__(self):
        f = "{:<4}: {:<4}\n"
        return "Connection parameters: \n" + "".join(f.format(k, v) for k, v in (
            ("responder resources", self.responder_resources), ("initiator depth", self.initiator_depth),
            ("flow control", self.flow_control), ("retry count", self.retry_count),
            ("rnr retry count", self.rnr_retry_count), ("srq", self.srq), ("qp number", self.qp_num)))


def _resolve(node, service, passive: bool):
    """rdma_getaddrinfo's address part: (ip text, port)."""
    if isinstance(node, bytes):
        node = node.decode()
    if isinstance(service, bytes):
        service = service.decode()
    port = 0
    if service is not None:
        try:
            port = int(service)
        except ValueError:
            try:
                port = socket.getservbyname(service)
            except OSError:
                raise PyverbsRDMAError("Failed to get Address Info", errno.EINVAL) from None
        if not 0 <= port <= 0xFFFF:
            raise PyverbsRDMAError("Failed to get Address Info", errno.EINVAL)
    if node is None:
        return ("0.0.0.0" if passive else None), port
    try:
        return str(ipaddress.ip_address(node)), port
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(node, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        raise PyverbsRDMAError("Failed to get Address Info", errno.ENOENT) from None
    return infos[0][4][0], port


def _resolve_gid(node, service, passive: bool):
    """rdma_getaddrinfo with RAI_FAMILY|RAI_NUMERICHOST and AF_IB (ucma_convert_in6):
    the node is a GID written as an IPv6 address; (GID text, port)."""
    if isinstance(node, bytes):
        node = node.decode()
    _, port = _resolve(None, service, passive)
    if node is None:
        return ("::" if passive else None), port
    try:
        gid = ipaddress.IPv6Address(node)
    except ValueError:
        raise PyverbsRDMAError("Failed to get Address Info", errno.EINVAL) from None
    return str(gid), port


def _group(addr) -> str:
    """The multicast group an AddrInfo names: its source address (pyverbs
    passes ``ai_src_addr``), or a group given as text."""
    if isinstance(addr, AddrInfo):
        ip = addr.src_addr[0]
        if ip is None:
            raise PyverbsRDMAError("Failed to Join multicast", errno.EINVAL)
        return ip
    return str(addr)


class AddrInfo:
    """struct rdma_addrinfo, as pyverbs builds it with rdma_getaddrinfo.

    With RAI_PASSIVE, ``src``/``src_service`` is the address to bind to (the
    wildcard when only a service is given). Otherwise ``src`` (if given) is resolved
    first as a passive address and handed to the second call as the hints'
    source, and ``dst``/``dst_service`` is the destination; as in librdmacm, a
    call with neither node nor service only copies the hints, so
    ``AddrInfo(src=group)`` (how the suite names a multicast group) has a
    source address and no destination.
    """

    def __init__(self, src=None, dst=None, src_service=None, dst_service=None, port_space=0, flags=0,
                 service=None, *, family=0):
        # rdma-core 64: AddrInfo() is empty until get_addrinfo fills it
        self.get_addrinfo(src, dst, src_service, dst_service, port_space, flags, service, family=family)

    def get_addrinfo(self, src=None, dst=None, src_service=None, dst_service=None, port_space=0, flags=0,
                     service=None, *, family=0) -> None:
        """rdma_getaddrinfo, as pyverbs 64's AddrInfo.get_addrinfo.  ``family``
        is the hints' ai_family: with RAI_FAMILY and RAI_NUMERICHOST, AF_IB
        (27) makes the addresses GIDs (struct sockaddr_ib), as librdmacm does
        for ``-f gid``; ``self.family`` is then AF_IB."""
        self.port_space = port_space or RDMA_PS_TCP
        self.flags = flags
        self.qp_type = _cm._PS_QPT.get(self.port_space, 2)
        af_ib = family == _cm.AF_IB and flags & RAI_FAMILY and flags & RAI_NUMERICHOST
        self.family = _cm.AF_IB if af_ib else 0
        resolve = _resolve_gid if af_ib else _resolve
        if flags & RAI_PASSIVE:
            srv = src_service if src_service is not None else service
            if src is None and srv is None:
                self.src_addr = (None, 0)          # only the hints: no address
            else:
                self.src_addr = resolve(src, srv, True)
            self.dst_addr = (None, 0)
        else:
            self.src_addr = resolve(src, src_service, True) if src else (None, 0)
            srv = dst_service if dst_service is not None else service
            if dst is None and srv is None:
                self.dst_addr = (None, 0)
            else:
                self.dst_addr = resolve(dst, srv, False)

    def close(self):
        pass


def _bind_family(ai: AddrInfo) -> tuple:
    """The family argument of a bind: AF_IB for a sockaddr_ib, else the address's own."""
    return (_cm.AF_IB,) if getattr(ai, "family", 0) == _cm.AF_IB else ()


class CMEventChannel:
    """rdma_create_event_channel."""

    def __init__(self):
        self.event_channel = _cm.EventChannel()

    def fileno(self) -> int:
        return self.event_channel.fileno()

    def close(self):
        if self.event_channel is not None:
            self.event_channel.close()
            self.event_channel = None


class CMEvent:
    """rdma_get_cm_event(channel)."""

    def __init__(self, channel: CMEventChannel, timeout: float | None = None):
        if channel is None or channel.event_channel is None:
            raise PyverbsUserError("the event channel is closed")
        self.channel = channel
        self.event = channel.event_channel.get_event(timeout)

    @property
    def event_type(self):
        return self.event.event

    @property
    def status(self):
        return self.event.status

    @property
    def private_data(self) -> bytes:
        return self.event.private_data

    def event_str(self) -> str:
        return self.event.event_str if self.event is not None else ""

    def ack_cm_event(self):
        if self.event is not None:
            self.event.ack()

    def close(self):
        self.ack_cm_event()
        self.event = None


class UDParam:
    """struct rdma_ud_param of an event (SIDR ESTABLISHED, MULTICAST_JOIN)."""

    def __init__(self, cm_event: CMEvent):
        ud = cm_event.event.ud
        if not ud:
            raise PyverbsUserError(f"{cm_event.event_str()} carries no UD parameters")
        self.qp_num = ud["qp_num"]
        self.qkey = ud["qkey"]
        self.ah_attr = AHAttr.from_wire(ud["ah_attr"]) if "ah_attr" in ud else None
        self.private_data = cm_event.private_data


class JoinMCAttrEx:
    """struct rdma_cm_join_mc_attr_ex: the group is ``addr``'s source address."""

    def __init__(self, addr: AddrInfo, comp_mask=0, join_flags=0):
        if addr is None:
            raise TypeError("Argument 'addr' must not be None")
        self.addr = addr
        self.comp_mask = comp_mask
        self.join_flags = join_flags


class CMID:
    """An rdma_cm_id with pyverbs' API."""

    def __init__(self, creator=None, qp_init_attr: QPInitAttr | None = None, pd=None, port_space=RDMA_PS_TCP,
                 listen_id: "CMID | None" = None):
        self.id: _cm.CmId | None = None
        self.event_channel = None
        self.ctx = None
        self._pd = pd
        if creator is None:
            return
        if isinstance(creator, AddrInfo):
            self.id = _cm.CmId(None, creator.port_space, creator.qp_type)
            try:
                self._create_ep(creator, qp_init_attr, pd)
            except BaseException:
                self.id.destroy()
                raise
        elif isinstance(creator, CMEventChannel):
            self.event_channel = creator
            self.id = _cm.CmId(creator.event_channel, port_space)
        elif isinstance(creator, CMEvent):
            if listen_id is None:
                raise PyverbsUserError("listen ID not provided")
            self.id = creator.event.id
            self.event_channel = listen_id.event_channel
            self._pd = listen_id._pd
        else:
            raise PyverbsRDMAError(f"Cannot create CM ID from {type(creator)}")
        self.ctx = self.id.verbs

    def _create_ep(self, ai: AddrInfo, qp_init_attr, pd) -> None:
        cid = self.id
        if ai.flags & RAI_PASSIVE:
            ip, port = ai.src_addr
            cid.bind_addr(ip, port, *_bind_family(ai))
            cid.qp_init_attr = qp_init_attr
            cid.pd = pd
            return
        src = ai.src_addr[0]
        ip, port = ai.dst_addr
        cid.resolve_addr(src, ip, port, family=getattr(ai, "family", 0))
        cid.resolve_route()
        if pd is not None:
            cid.pd = pd
        else:
            cid.default_pd()
        self._pd = cid.pd
        if qp_init_attr is not None:
            cid.create_qp(qp_init_attr, cid.pd)

    # -- properties ----------------------------------------------------------------------------
    @property
    def context(self):
        return self.id.verbs if self.id is not None else self.ctx

    @property
    def pd(self):
        if self._pd is None and self.id is not None and self.id.verbs is not None:
            self._pd = self.id.default_pd()
        return self._pd

    @property
    def qp(self):
        return self.id.qp if self.id is not None else None

    @property
    def qpn(self):
        return self.id.qp.qp_num if self.id is not None and self.id.qp is not None else None

    def _need(self):
        if self.id is None or self.id.closed:
            raise PyverbsError("The CMID is closed")
        return self.id

    # -- connection management -------------------------------------------------------------------
    def get_request(self):
        new = self._need().get_request()
        c = CMID()
        c.id = new
        c.event_channel = None
        c._pd = new.pd if new.pd is not None else self._pd
        c.ctx = new.verbs
        return c

    def bind_addr(self, lai: AddrInfo):
        ip, port = lai.src_addr
        self._need().bind_addr(ip, port, *_bind_family(lai))
        self.ctx = self.id.verbs

    def resolve_addrinfo(self, node=None, service=None, port_space=0, flags=0, hints=None):
        """rdma_resolve_addrinfo (rdma-core 64): rdma_getaddrinfo for this ID,
        completed by an RDMA_CM_EVENT_ADDRINFO_RESOLVED event on its channel
        (librdmacm resolves it in the library too); ``query_addrinfo`` then
        returns the result.  A name that does not resolve fails here."""
        cm_id = self._need()
        if flags & RAI_PASSIVE:
            ai = AddrInfo(src=node, src_service=service, port_space=port_space, flags=flags)
        else:
            ai = AddrInfo(dst=node, dst_service=service, port_space=port_space, flags=flags)
        self._addrinfo = ai
        cm_id.channel.conn.events.append({"event": "cm", "type": int(RDMA_CM_EVENT_ADDRINFO_RESOLVED),
                                          "id": cm_id.handle, "status": 0})

    def query_addrinfo(self) -> AddrInfo:
        """rdma_query_addrinfo: what ``resolve_addrinfo`` resolved."""
        ai = getattr(self, "_addrinfo", None)
        if ai is None:
            raise PyverbsRDMAError("Failed to query addrinfo", errno.EINVAL)
        return ai

    def resolve_addr(self, rai: AddrInfo, timeout_ms=2000):
        ip, port = rai.dst_addr
        self._need().resolve_addr(rai.src_addr[0], ip, port, timeout_ms, family=getattr(rai, "family", 0))

    def resolve_route(self, timeout_ms=2000):
        self._need().resolve_route(timeout_ms)
        self.ctx = self.id.verbs

    def listen(self, backlog=0):
        self._need().listen(backlog)

    def connect(self, param: ConnParam | None = None):
        self._need().connect(param.to_dict() if param is not None else None)

    def accept(self, param: ConnParam | None = None):
        self._need().accept(param.to_dict() if param is not None else None)

    def reject(self, private_data=None, private_data_len=0):
        data = bytes(private_data or b"")
        self._need().reject(data[:private_data_len] if private_data_len else data)

    def establish(self):
        self._need().establish()

    def disconnect(self):
        self._need().disconnect()

    def set_local_ece(self, ece: ECE):
        """rdma_set_local_ece (librdmacm's checks: before the ID has a QP, a
        vendor_id, no comp_mask).  Kept on the ID; softrdma's CM does not yet
        put it in the REQ/REP (their vendor-ID fields go out zero)."""
        cid = self._need()
        if cid.qp is not None or ece is None or not ece.vendor_id or ece.comp_mask:
            raise PyverbsRDMAError("Failed to set local ECE", errno.EINVAL)
        cid.local_ece = (ece.vendor_id, ece.options)

    def get_remote_ece(self):
        """rdma_get_remote_ece: the ECE the peer's REQ/REP carried (zero when
        it carried none)."""
        cid = self._need()
        if cid.qp is not None:
            raise PyverbsRDMAError("Failed to get remote ECE", errno.EINVAL)
        vendor_id, options = cid.remote_ece
        return ECE(vendor_id, options, 0)

    def set_option(self, level, optname, optval, optlen=0):
        if level != RDMA_OPTION_ID:
            raise PyverbsRDMAError("Failed to set option", errno.ENOSYS)
        name = {RDMA_OPTION_ID_TOS: "tos", RDMA_OPTION_ID_REUSEADDR: "reuseaddr",
                RDMA_OPTION_ID_AFONLY: "afonly", RDMA_OPTION_ID_ACK_TIMEOUT: "ack_timeout"}.get(optname)
        if name is None:
            raise PyverbsRDMAError("Failed to set option", errno.ENOSYS)
        self._need().set_option(name, int(optval))

    # -- QPs ------------------------------------------------------------------------------------------
    def create_qp(self, qp_init: QPInitAttr):
        cid = self._need()
        return cid.create_qp(qp_init, self.pd)

    def query_qp(self, attr_mask):
        qp = self._need().qp
        if qp is None:
            raise PyverbsRDMAError("Failed to query QP", errno.EINVAL)
        return qp.query(attr_mask)

    def init_qp_attr(self, qp_state):
        a, mask = self._need().init_qp_attr(qp_state)
        attr = QPAttr(qp_state=qp_state)
        for k, v in a.items():
            if k == "ah_attr":
                v = AHAttr.from_wire(dict({"flow_label": 0, "hop_limit": 64, "traffic_class": 0, "sl": 0,
                                           "dlid": 0, "port_num": 1, "is_global": True}, **v))
            setattr(attr, k, v)
        return attr, mask

    # -- rdma_verbs.h helpers ------------------------------------------------------------------------
    def reg_msgs(self, size):
        return MR(self.pd, size, IBV_ACCESS_LOCAL_WRITE)

    def reg_read(self, size):
        return MR(self.pd, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)

    def reg_write(self, size):
        return MR(self.pd, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

    def _qp(self, what):
        qp = self._need().qp
        if qp is None:
            raise PyverbsRDMAError(f"Failed to {what}", errno.EINVAL)
        return qp

    def post_recv(self, mr: MR, length=None):
        self._qp("Post Receive").post_recv(RecvWR(0, 1, [SGE(mr.buf, length or mr.length, mr.lkey)]))

    def post_send(self, mr: MR, flags=IBV_SEND_SIGNALED, length=None):
        self._qp("Post Send").post_send(SendWR(0, IBV_WR_SEND, 1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)],
                                               send_flags=flags))

    def post_read(self, mr: MR, length, remote_addr, rkey, flags=0):
        wr = SendWR(0, IBV_WR_RDMA_READ, 1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        wr.set_wr_rdma(rkey, remote_addr)
        self._qp("Post Read").post_send(wr)

    def post_write(self, mr: MR, length, remote_addr, rkey, flags=0):
        wr = SendWR(0, IBV_WR_RDMA_WRITE, 1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        wr.set_wr_rdma(rkey, remote_addr)
        self._qp("Post Write").post_send(wr)

    def post_ud_send(self, mr: MR, ah, rqpn=0, flags=IBV_SEND_SIGNALED, length=None):
        wr = SendWR(0, IBV_WR_SEND, 1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)], send_flags=flags)
        wr.set_wr_ud(ah, rqpn, self.id.info.get("qkey") or 0x01234567)
        self._qp("Post Send").post_send(wr)

    def _get_comp(self, cq, what):
        if cq is None:
            raise PyverbsRDMAError(f"Failed to retrieve {what} completion", errno.EINVAL)
        while True:
            n, wcs = cq.poll(1)
            if n:
                return wcs[0]

    def get_send_comp(self):
        return self._get_comp(self._need().send_cq, "send")

    def get_recv_comp(self):
        return self._get_comp(self._need().recv_cq, "receive")

    # -- multicast --------------------------------------------------------------------------------------
    def join_multicast(self, addr: AddrInfo | None = None, mc_attr: JoinMCAttrEx | None = None, context=0):
        """rdma_join_multicast(addr's source address), or rdma_join_multicast_ex(mc_attr)."""
        if not addr and not mc_attr:
            raise PyverbsUserError("Join to multicast must have AddrInfo or JoinMCAttrEx arguments")
        sendonly = False
        if mc_attr is not None:
            # librdmacm's rdma_join_multicast_ex checks
            if not mc_attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS:
                raise PyverbsRDMAError("Failed to Join multicast", errno.EINVAL)
            if not mc_attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS or mc_attr.join_flags not in (
                    RDMA_MC_JOIN_FLAG_FULLMEMBER, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER):
                raise PyverbsRDMAError("Failed to Join multicast", errno.EINVAL)
            sendonly = mc_attr.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
            addr = mc_attr.addr
        self._need().join_multicast(_group(addr), sendonly=sendonly)

    def leave_multicast(self, addr: AddrInfo):
        self._need().leave_multicast(_group(addr))

    # -- teardown ----------------------------------------------------------------------------------------
    def close(self):
        if self.id is not None:
            self.id.destroy()
            self.id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
