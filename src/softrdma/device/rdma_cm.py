"""rdma_cm in the daemon: what the kernel's cma.c and ucma.c do for RoCE
and InfiniBand ports.

An rdma_cm ID (``cma_id.CmaId``) belongs to the client connection that
made it (librdmacm's event channel: a control connection with no device),
lives in ``rdma_cm_state``'s states and speaks to the peer through the IB
CM of its device (``mgmt.cm.agent.CmAgent``, reached over QP1:
``device.gsi``).  ``RdmaCm`` is every ID of the daemon and the CM agent of
each port (an IB device's port 2 has its own, on its own QP1); addresses, ports, listens and multicast are in ``cma_addr``,
the IB CM's events in ``cma_ib``.  This module holds the IDs' lifetime, the
loop glue and the connection calls:

* ``connect`` sends the REQ (or SIDR_REQ for UD) with librdmacm's
  ``cma_hdr`` before the application's private data, the ID's random
  24-bit ``seq_num`` as starting PSN, CM response timeouts 20 and 15 CM
  retries; RoCE path: P_Key 0xFFFF, packet life time 18, MTU of the port;
  InfiniBand path: the SA's PathRecord (``cma_route``), its LIDs, SL,
  rate, MTU and life time in the REQ and the CM's MADs LID-routed to it;
  an AF_IB ID sends no ``cma_hdr`` (cma_user_data_offset: 0);
* ``accept`` sends the REP (SIDR_REP for UD); on the active side,
  ``establish`` (librdmacm's accept without parameters) sends the RTU;
  ``reject`` a REJ (consumer defined) or SIDR_REP(REJECT); ``disconnect``
  a DREQ, or the DREP to one received;
* ``init_qp_attr`` is rdma_init_qp_attr; the library modifies its own QP
  (the daemon never touches a user QP, as with librdmacm and ucma);
* a client that goes away has its IDs destroyed as rdma_destroy_id does
  (a REJ or DREQ goes to each peer).
"""

from __future__ import annotations

import errno
import random

from ..enums import RDMA_UDP_QKEY
from ..errors import VerbsError
from ..mgmt.cm.agent import CmAgent
from ..mgmt.cm.ids import QP_TYPE_UD, CmState
from ..mgmt.cm.request import AcceptParams, ConnectParams
from ..wire.cm import PRIVATE_DATA_SIZE, RejReason, SidrStatus
from ..wire.cma import CMA_HDR_SIZE, PortSpace, pack_cma_hdr, service_id
from ..wire.mad import MgmtClass
from .cma_addr import CmaAddr
from .cma_ib import CmaIbHandler
from .cma_id import (
    AF_IB,
    CMA_CM_RESPONSE_TIMEOUT,
    CMA_IBOE_PACKET_LIFETIME,
    CMA_MAX_CM_RETRIES,
    CONNECT,
    DESTROYING,
    LISTEN,
    QP_TYPES,
    ROUTE_RESOLVED,
    STATE_NAMES,
    CmaId,
)
from .cma_mcast import CmaMcast
from .cma_route import CmaRoute, is_ib


def _conn_param(p: dict) -> dict:
    return {k: p.get(k, d) for k, d in (("responder_resources", 1), ("initiator_depth", 1), ("flow_control", 0),
                                        ("retry_count", 7), ("rnr_retry_count", 7), ("srq", 0),
                                        ("qp_num", 0), ("qkey", 0))}


class RdmaCm(CmaAddr, CmaIbHandler, CmaRoute, CmaMcast):
    """Every rdma_cm ID of the daemon and the CM agent of each device."""

    def __init__(self, daemon, rng: random.Random | None = None):
        self.daemon = daemon
        self.rng = rng or random.SystemRandom()
        self.bind_lists: dict[tuple[int, int], list[CmaId]] = {}
        # (device, port number, service ID) -> [CmId, users]
        self.agent_listens: dict[tuple[str, int, int], list] = {}
        self.outq: list = []            # (client, event record) waiting for the request's reply
        self.next_tick = 0.0

    # -- devices ---------------------------------------------------------------------------
    def add_device(self, dev, node_guid: int) -> None:
        """The CM agent of the device (its port 1; an IB device's further
        ports get theirs as they come: ``_port_agents``)."""
        gid = next((e.gid for i, e in dev.gid_table if i), bytes(16))
        self._add_agent(dev, node_guid, gid)

    def _add_agent(self, port, node_guid: int, gid: bytes) -> None:
        # the MAD layer's hi_tid is a small per-agent number (ib_mad_client_id)
        self._agents = getattr(self, "_agents", 0) + 1
        # LAP: no path migration here; the issue asks for the spec's answer
        # (APR status UNSUPPORTED) where the kernel's RoCE port stays silent
        agent = CmAgent(node_guid, gid, hi_tid=self._agents, rng=self.rng, answer_lap=True,
                        port_num=getattr(port, "num", 1))
        port.cm = agent
        port.gsi.register(MgmtClass.CM, agent)

    def _port_agents(self, dev) -> list:
        """The ports of ``dev`` with their CM agents: an IB device's port 2
        (cm.c's cm_add_one: one cm_port per port) gets its agent, registered
        on the port's QP1, the first time it is seen, and joins the listens
        bound to no device."""
        ports = getattr(dev, "ib_ports", None)
        if ports is None or len(ports) == 1:
            return [dev]
        for p in ports[1:]:
            if getattr(p, "cm", None) is None:
                self._add_agent(p, int.from_bytes(dev.node_guid, "big"), p.gid(0) or bytes(16))
                self.port_added(p)
        return ports

    @staticmethod
    def _sync_ib_agent(port) -> None:
        """An IB port learns its GUIDs and GIDs from the fabric after it is
        added: the CM agent takes the current ones (CA GUID, the port's GID 0)."""
        cm = port.cm
        cm.ca_guid = int.from_bytes(port.hca.node_guid, "big")
        cm.gid = port.gid(0) or bytes(16)

    # -- the loop ------------------------------------------------------------------------------
    def poll(self, devices, now: float) -> None:
        """Fire CM timers (at most every millisecond), move the agents' MADs
        to QP1 and their events to the owners -- for each port's agent."""
        tick = now >= self.next_tick
        if tick:
            self.next_tick = now + 0.001
        for d in devices:
            if getattr(d, "cm", None) is None:
                continue
            for dev in self._port_agents(d):
                self._poll_port(dev, now, tick)

    def _poll_port(self, dev, now: float, tick: bool) -> None:
        cm = dev.cm
        if tick:
            if is_ib(getattr(dev, "hca", dev)):     # InfiniBand: GUID and GID 0 may have changed
                self._sync_ib_agent(dev)
            cm.tick(now)
            if dev.gsi.requests:
                dev.gsi.tick(now)
        if cm.events:
            evs = cm.events[:]
            cm.events.clear()
            for ev in evs:
                ulp = getattr(ev.cm_id.context, "ulp_cm_event", None)
                if ulp is not None:                 # the daemon's own user (IPoIB's connected mode)
                    ulp(ev, now)
                else:
                    self._cm_event(dev, ev)
        if cm.mads:
            mads = cm.mads[:]
            cm.mads.clear()
            for om in mads:
                if om.dlid is not None:             # InfiniBand: LID-routed to the peer's port
                    dev.gsi.send_lid(om.data, om.dlid, sl=om.sl)
                else:
                    dev.gsi.send(om.data, om.dest_gid, om.src_gid)

    def flush(self) -> None:
        q, self.outq = self.outq, []
        for client, rec in q:
            client.send(rec, event=True)

    def _emit(self, cid: CmaId, etype: int, status: int = 0, **kw) -> None:
        if cid.destroyed:
            return
        rec = {"event": "cm", "type": int(etype), "id": cid.handle, "status": status}
        rec.update(kw)
        self.outq.append((cid.owner, rec))

    # -- IDs -----------------------------------------------------------------------------------
    def create_id(self, client, ps: int, qp_type: str) -> CmaId:
        if ps not in PortSpace._value2member_map_:
            raise VerbsError(errno.EINVAL, f"port space {ps:#x}")
        if qp_type not in QP_TYPES:
            raise VerbsError(errno.EINVAL, f"qp_type {qp_type!r}")
        cid = CmaId(client, ps, qp_type, self.rng.getrandbits(24))
        cid.handle = client.add("cm_id", cid)
        return cid

    def destroy_id(self, cid: CmaId) -> None:
        """rdma_destroy_id: answer the peer, leave the groups, free the port."""
        if cid.destroyed:
            return
        state = cid.state
        cid.state = DESTROYING
        self._cancel_route(cid)
        if cid.ib is not None and cid.dev is not None and getattr(cid.port, "cm", None) is not None:
            cid.port.cm.destroy(cid.ib)
            cid.ib = None
        if state == LISTEN:
            self._cancel_listens(cid)
        if cid.listener is not None and cid.listener.pending > 0 and state == CONNECT:
            cid.listener.pending -= 1
        if is_ib(cid.dev):
            for mgid in list(cid.mcast):
                self._ib_leave(cid, mgid)
        cid.mcast.clear()
        self._release_port(cid)
        cid.destroyed = True
        self.outq = [(c, r) for c, r in self.outq if not (c is cid.owner and r.get("id") == cid.handle)]

    def migrate(self, cid: CmaId, owner, handle: int) -> None:
        """The ID now belongs to ``owner`` as ``handle``; events queued for it
        follow (ucma_move_events)."""
        old_owner, old = cid.owner, cid.handle
        cid.owner, cid.handle = owner, handle
        for i, (client, rec) in enumerate(self.outq):
            if client is old_owner and rec.get("id") == old:
                self.outq[i] = (owner, dict(rec, id=handle))

    # -- connections ---------------------------------------------------------------------------
    def connect(self, cid: CmaId, p: dict, private_data: bytes) -> None:
        """rdma_connect: REQ, or SIDR_REQ for a UD ID."""
        if cid.state != ROUTE_RESOLVED:
            raise VerbsError(errno.EINVAL, f"connect in state {STATE_NAMES[cid.state]}")
        af_ib = cid.family == AF_IB                     # no cma_hdr: the private data is the user's alone
        room = (PRIVATE_DATA_SIZE["SIDR_REQ"] if cid.qp_type == QP_TYPE_UD else PRIVATE_DATA_SIZE["REQ"]) \
            - (0 if af_ib else CMA_HDR_SIZE)
        if len(private_data) > room:
            raise VerbsError(errno.EINVAL, f"{len(private_data)} bytes of private data > {room}")
        p = _conn_param(p)
        hdr = private_data if af_ib else pack_cma_hdr(cid.src_ip, cid.dst_ip, cid.src_port) + private_data
        sid = service_id(cid.ps, cid.dst_port)
        cm = cid.port.cm
        path = cid.path if is_ib(cid.dev) else None
        if path is not None:
            self._sync_ib_agent(cid.port)
        cid.state = CONNECT
        if cid.qp_type == QP_TYPE_UD:
            cid.ib = cm.sidr_request(sid, cid.dgid, local_gid=cid.sgid, private_data=hdr,
                                     timeout_ms=1 << (CMA_CM_RESPONSE_TIMEOUT - 8),
                                     max_cm_retries=CMA_MAX_CM_RETRIES, context=cid,
                                     pkey=path.pkey if path else 0xFFFF,
                                     dlid=path.dlid if path else None, sl=path.sl if path else 0)
            return
        if path is not None:                           # the SA's path (cma_connect_ib's primary_path)
            route = dict(pkey=path.pkey, packet_life_time=path.packet_life_time, traffic_class=path.traffic_class,
                         hop_limit=path.hop_limit, flow_label=path.flow_label, sl=path.sl, dlid=path.dlid,
                         slid=path.slid, packet_rate=path.rate, subnet_local=int(path.hop_limit <= 1))
        else:
            route = dict(packet_life_time=CMA_IBOE_PACKET_LIFETIME, traffic_class=cid.tos, hop_limit=64,
                         flow_label=_roce_udp_flow_label(cid))
        cid.ib = cm.connect(ConnectParams(
            service_id=sid, dest_gid=cid.dgid, local_gid=cid.sgid, qp_num=p["qp_num"],
            starting_psn=cid.seq_num, qp_type=cid.qp_type, private_data=hdr,
            responder_resources=p["responder_resources"], initiator_depth=p["initiator_depth"],
            remote_cm_response_timeout=CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout=CMA_CM_RESPONSE_TIMEOUT,
            retry_count=min(7, p["retry_count"]), rnr_retry_count=min(7, p["rnr_retry_count"]),
            max_cm_retries=CMA_MAX_CM_RETRIES, srq=bool(p["srq"]), path_mtu=cid.mtu,
            flow_control=p["flow_control"], **route),
            now=self.daemon_now(), context=cid)

    def daemon_now(self) -> float:
        return self.daemon.now()

    def accept(self, cid: CmaId, p: dict | None, private_data: bytes) -> None:
        """rdma_accept: REP / SIDR_REP on the passive side; without
        parameters on the active side (librdmacm after CONNECT_RESPONSE,
        rdma_establish) the RTU."""
        if cid.state != CONNECT or cid.ib is None:
            raise VerbsError(errno.EINVAL, f"accept in state {STATE_NAMES[cid.state]}")
        cm = cid.port.cm
        now = self.daemon_now()
        if is_ib(cid.dev):
            self._sync_ib_agent(cid.port)
        try:
            if cid.qp_type == QP_TYPE_UD:
                p = _conn_param(p or {})
                cid.qkey = p["qkey"] or cid.qkey or RDMA_UDP_QKEY
                cm.sidr_reply(cid.ib, SidrStatus.SUCCESS, qp_num=p["qp_num"], qkey=cid.qkey,
                              private_data=private_data, now=now)
                cid.ib = None
            elif p is not None:
                p = _conn_param(p)
                cm.accept(cid.ib, AcceptParams(
                    qp_num=p["qp_num"], starting_psn=cid.seq_num, private_data=private_data,
                    responder_resources=p["responder_resources"], initiator_depth=p["initiator_depth"],
                    rnr_retry_count=min(7, p["rnr_retry_count"]), srq=bool(p["srq"]),
                    flow_control=p["flow_control"]), now=now)
            else:
                cm.send_rtu(cid.ib, now=now)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None
        if cid.listener is not None and cid.listener.pending > 0 and p is not None:
            cid.listener.pending -= 1

    def reject(self, cid: CmaId, private_data: bytes, reason: int = RejReason.CONSUMER_DEFINED) -> None:
        if cid.ib is None:
            raise VerbsError(errno.EINVAL, "nothing to reject")
        cm = cid.port.cm
        try:
            if cid.qp_type == QP_TYPE_UD:
                cm.sidr_reply(cid.ib, SidrStatus.REJECT, private_data=private_data, now=self.daemon_now())
                cid.ib = None
            else:
                cm.reject(cid.ib, reason, private_data, now=self.daemon_now())
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None
        if cid.listener is not None and cid.listener.pending > 0:
            cid.listener.pending -= 1

    def disconnect(self, cid: CmaId) -> None:
        """rdma_disconnect: initiate (DREQ) or answer (DREP) a disconnect."""
        if cid.ib is None:
            raise VerbsError(errno.EINVAL, "not connected")
        cm = cid.port.cm
        now = self.daemon_now()
        if cid.ib.state == CmState.ESTABLISHED:
            cm.disconnect(cid.ib, now=now)
        elif cid.ib.state == CmState.DREQ_RCVD:
            cm.send_drep(cid.ib, now=now)

    def notify(self, cid: CmaId) -> None:
        """rdma_notify(IB_EVENT_COMM_EST)."""
        if cid.ib is None:
            raise VerbsError(errno.EINVAL, "no connection")
        try:
            cid.port.cm.established(cid.ib, now=self.daemon_now())
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None

    def init_qp_attr(self, cid: CmaId, qp_state: int) -> dict:
        """rdma_init_qp_attr: the attributes as the IB CM's qp_attrs names them."""
        if cid.dev is None:
            raise VerbsError(errno.EINVAL, "the ID has no device yet")
        if cid.ib is None or cid.qp_type == QP_TYPE_UD:
            if qp_state == 1:                                # cma_ib_init_qp_attr
                a = {"qp_state": 1, "pkey_index": 0, "port_num": cid.port_num}
                if cid.qp_type == QP_TYPE_UD:
                    if not cid.qkey and cid.ps in (PortSpace.UDP, PortSpace.IB):
                        cid.qkey = RDMA_UDP_QKEY
                    elif not cid.qkey:
                        # cma_set_qkey: IPoIB's Q_Key is the broadcast group's, from the
                        # SA -- a RoCE port has none to ask
                        raise VerbsError(errno.EINVAL, "no Q_Key for the IPoIB port space on RoCE (no SA)")
                    a["qkey"] = cid.qkey
                else:
                    a["qp_access_flags"] = 0
                return a
            if cid.qp_type == QP_TYPE_UD and qp_state in (2, 3):
                return {"qp_state": qp_state} if qp_state == 2 else {"qp_state": 3, "sq_psn": 0}
            raise VerbsError(errno.EINVAL, "no connection to take attributes from")
        try:
            a = cid.port.cm.qp_attrs(cid.ib, qp_state)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None
        if "ah_attr" in a:
            idx = cid.port.gid_table.find(cid.sgid)
            a["ah_attr"] = dict(a["ah_attr"], sgid_index=idx or 0, dgid=a["ah_attr"]["dgid"].hex())
        if qp_state == 2:
            a["rq_psn"] = cid.seq_num
        if "timeout" in a and cid.timeout is not None:
            a["timeout"] = cid.timeout
        return a

    # -- views -----------------------------------------------------------------------------------
    def ids(self):
        """Every live ID (for ``rdma resource show cm_id``)."""
        for client in list(self.daemon.clients.values()):
            for h, (kind, obj) in list(client.objects.items()):
                if kind == "cm_id" and not obj.destroyed:
                    yield client, obj


def _roce_udp_flow_label(cid: CmaId) -> int:
    """cma_get_roce_udp_flow_label: from the ports (IPv4, or IPv6 without a
    flow label of its own): sport * 31 + dport, 20 bits."""
    return (cid.src_port * 31 + cid.dst_port) & 0xFFFFF


__all__ = ["RdmaCm"]
