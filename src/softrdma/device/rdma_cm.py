"""rdma_cm in the daemon: what the kernel's cma.c and ucma.c do for RoCE.

An ``rdma_cm`` ID (``CmaId``) belongs to the client connection that made it
(librdmacm's event channel: a control connection with no device), lives
in ``rdma_cm_state``'s states and speaks to the peer through the IB CM of
its device (``transport.cm.CmAgent``, reached over QP1: ``device.gsi``):

* ``bind_addr`` / ``resolve_addr`` / ``resolve_route`` / ``listen`` as
  cma.c: port spaces (TCP, UDP, IB, IPoIB) with their bind lists, an
  ephemeral port from 32768..60999 when none is given, EADDRINUSE /
  EADDRNOTAVAIL / EACCES as cma_check_port and cma_use_port; the source
  address and device of a destination found by the host's routing (the
  device whose GID table holds the source address); a RoCE route built
  locally (cma_resolve_iboe_route: GIDs from the addresses, P_Key 0xFFFF,
  packet life time 16, MTU of the port);
* ``connect`` sends the REQ (or SIDR_REQ for UD) with librdmacm's
  ``cma_hdr`` before the application's private data, the ID's random
  24-bit ``seq_num`` as starting PSN, CM response timeouts 20 and 15 CM
  retries; a listener takes REQs whose service ID is (ps << 16) | port and
  whose ``cma_hdr`` destination is its address (or it is bound to any);
  each becomes a new ID of the listener's client in CONNECT, announced as
  CONNECT_REQUEST; the passive side then says MRA (delayed: only a
  retried REQ gets it, CMA_CM_MRA_SETTING);
* ``accept`` sends the REP (SIDR_REP for UD); on the active side,
  ``establish`` (librdmacm's accept without parameters) sends the RTU;
  ``reject`` a REJ (consumer defined) or SIDR_REP(REJECT); ``disconnect``
  a DREQ, or the DREP to one received;
* the IB CM's events become RDMA_CM_EVENT_* as cma_ib_handler maps them,
  sent to the owning client as ``{"event": "cm", ...}`` records after the
  reply to the request that caused them;
* ``init_qp_attr`` is rdma_init_qp_attr; the library modifies its own QP
  (the daemon never touches a user QP, as with librdmacm and ucma);
* multicast joins on RoCE (cma_iboe_join_multicast): the MGID of an IPv4
  group is its IPv4-mapped address, the Q_Key RDMA_UDP_QKEY for UDP; the
  library attaches its QP;
* a client that goes away has its IDs destroyed as rdma_destroy_id does
  (a REJ or DREQ goes to each peer).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import socket

from ..enums import RDMA_UDP_QKEY
from ..enums import rdma_cm_event_type as EV
from ..errors import VerbsError
from ..mgmt.cm.agent import CmAgent
from ..mgmt.cm.ids import QP_TYPE_RC, QP_TYPE_UC, QP_TYPE_UD, CmEventType, CmState
from ..mgmt.cm.request import AcceptParams, ConnectParams
from ..wire.cm import PRIVATE_DATA_SIZE, RejReason, SidrStatus
from ..wire.cma import CMA_HDR_SIZE, PortSpace, from_service_id, pack_cma_hdr, parse_cma_hdr, service_id
from ..wire.errors import WireError
from ..wire.gid import gid_ip, ip_gid
from ..wire.mad import MgmtClass

IDLE, ADDR_QUERY, ADDR_RESOLVED, ROUTE_QUERY, ROUTE_RESOLVED, CONNECT, DISCONNECT, ADDR_BOUND, LISTEN, \
    DEVICE_REMOVAL, DESTROYING = range(11)
STATE_NAMES = ("IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
               "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING")

# cma.c's constants; the environment may shorten them (tests of the
# timeout paths: 15 retries of 4.6 s each are 73 s)
CMA_CM_RESPONSE_TIMEOUT = int(os.environ.get("SOFTRDMA_CMA_RESPONSE_TIMEOUT", "20"))
CMA_MAX_CM_RETRIES = int(os.environ.get("SOFTRDMA_CMA_MAX_RETRIES", "15"))
CMA_IBOE_PACKET_LIFETIME = 18         # as the 6.1 kernel of the reference peer (later kernels: 16)
CMA_CM_MRA_SERVICE_TIMEOUT = 24        # CMA_CM_MRA_SETTING without IB_CM_MRA_FLAG_DELAY
MAX_BACKLOG = 1024                     # ucma's max_backlog
LOCAL_PORT_RANGE = (32768, 60999)      # net.ipv4.ip_local_port_range's default
QP_TYPES = {"RC": QP_TYPE_RC, "UC": QP_TYPE_UC, "UD": QP_TYPE_UD}
_ETIMEDOUT = -errno.ETIMEDOUT


def _any(ip) -> bool:
    """cma_any_addr: the zero address or loopback."""
    return ip is None or ip.is_unspecified or ip.is_loopback


class CmaId:
    """struct rdma_id_private."""

    def __init__(self, owner, ps: int, qp_type: str, seq_num: int):
        self.owner = owner              # the Client (event channel) it belongs to
        self.handle = 0
        self.ps = ps
        self.qp_type = qp_type
        self.state = IDLE
        self.family = 4
        self.src_ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
        self.src_port = 0
        self.dst_ip = None
        self.dst_port = 0
        self.dev = None
        self.sgid = bytes(16)
        self.dgid = bytes(16)
        self.ib = None                  # transport.cm.CmId
        self.seq_num = seq_num
        self.qkey = 0
        self.backlog = 0
        self.pending = 0                # connection requests not yet answered (listeners)
        self.listener: CmaId | None = None
        self.bound = None               # key of the bind list it is in
        self.reuseaddr = False
        self.tos = 0
        self.tos_set = False
        self.timeout: int | None = None    # RDMA_OPTION_ID_ACK_TIMEOUT
        self.mtu = 3
        self.mcast: dict[bytes, dict] = {}
        self.destroyed = False

    def addr(self, ip, port) -> dict:
        return {"family": self.family, "ip": str(ip) if ip is not None else None, "port": port}

    def info(self) -> dict:
        return {"id": self.handle, "state": STATE_NAMES[self.state], "ps": self.ps, "qp_type": self.qp_type,
                "src": self.addr(self.src_ip, self.src_port), "dst": self.addr(self.dst_ip, self.dst_port),
                "device": self.dev.name if self.dev is not None else None, "port_num": 1,
                "sgid": self.sgid.hex(), "dgid": self.dgid.hex(), "pkey": 0xFFFF, "qkey": self.qkey,
                "mtu": self.mtu}


def _conn_param(p: dict) -> dict:
    return {k: p.get(k, d) for k, d in (("responder_resources", 1), ("initiator_depth", 1), ("flow_control", 0),
                                        ("retry_count", 7), ("rnr_retry_count", 7), ("srq", 0),
                                        ("qp_num", 0), ("qkey", 0))}


class RdmaCm:
    """Every rdma_cm ID of the daemon and the CM agent of each device."""

    def __init__(self, daemon, rng: random.Random | None = None):
        self.daemon = daemon
        self.rng = rng or random.SystemRandom()
        self.bind_lists: dict[tuple[int, int], list[CmaId]] = {}
        self.agent_listens: dict[tuple[str, int], list] = {}   # (device, service ID) -> [CmId, users]
        self.outq: list = []            # (client, event record) waiting for the request's reply
        self.next_tick = 0.0

    # -- devices -----------------------------------------------------------------------------
    def add_device(self, dev, node_guid: int) -> None:
        gid = next((e.gid for i, e in dev.gid_table if i), bytes(16))
        # the MAD layer's hi_tid is a small per-agent number (ib_mad_client_id)
        self._agents = getattr(self, "_agents", 0) + 1
        # LAP: no path migration here; the issue asks for the spec's answer
        # (APR status UNSUPPORTED) where the kernel's RoCE port stays silent
        agent = CmAgent(node_guid, gid, hi_tid=self._agents, rng=self.rng, answer_lap=True)
        dev.cm = agent
        dev.gsi.register(MgmtClass.CM, agent)

    # -- the loop ------------------------------------------------------------------------------
    def poll(self, devices, now: float) -> None:
        """Fire CM timers (at most every millisecond), move the agents' MADs
        to QP1 and their events to the owners."""
        tick = now >= self.next_tick
        if tick:
            self.next_tick = now + 0.001
        for dev in devices:
            cm = getattr(dev, "cm", None)
            if cm is None:
                continue
            if tick:
                cm.tick(now)
                if dev.gsi.requests:
                    dev.gsi.tick(now)
            if cm.events:
                evs = cm.events[:]
                cm.events.clear()
                for ev in evs:
                    self._cm_event(dev, ev)
            if cm.mads:
                mads = cm.mads[:]
                cm.mads.clear()
                for om in mads:
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
        if cid.ib is not None and cid.dev is not None and getattr(cid.dev, "cm", None) is not None:
            cid.dev.cm.destroy(cid.ib)
            cid.ib = None
        if state == LISTEN:
            self._cancel_listens(cid)
        if cid.listener is not None and cid.listener.pending > 0 and state == CONNECT:
            cid.listener.pending -= 1
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

    # -- ports ---------------------------------------------------------------------------------
    def _release_port(self, cid: CmaId) -> None:
        if cid.bound is None:
            return
        owners = self.bind_lists.get(cid.bound)
        if owners is not None and cid in owners:
            owners.remove(cid)
            if not owners:
                del self.bind_lists[cid.bound]
        cid.bound = None

    def _check_port(self, owners: list[CmaId], cid: CmaId, reuseaddr: bool) -> None:
        for cur in owners:
            if cur is cid:
                continue
            if cur.state != LISTEN and reuseaddr and cur.reuseaddr:
                continue
            if cur.family != cid.family:
                continue                              # afonly: IPv4 and IPv6 do not collide
            if _any(cid.src_ip) or _any(cur.src_ip):
                raise VerbsError(errno.EADDRNOTAVAIL, "port in use on another address of the port space")
            if cid.src_ip == cur.src_ip:
                raise VerbsError(errno.EADDRINUSE, f"port {cid.src_port} in use")

    def _get_port(self, cid: CmaId) -> None:
        """cma_get_port: the given port (cma_use_port) or an ephemeral one."""
        ps = cid.ps
        if cid.src_port:
            if cid.src_port < 1024 and cid.owner.uid != 0:
                raise VerbsError(errno.EACCES, f"port {cid.src_port} needs CAP_NET_BIND_SERVICE")
            key = (ps, cid.src_port)
            owners = self.bind_lists.get(key)
            if owners:
                self._check_port(owners, cid, cid.reuseaddr)
            self.bind_lists.setdefault(key, []).append(cid)
            cid.bound = key
            return
        low, high = LOCAL_PORT_RANGE
        n = high - low + 1
        start = self.rng.randrange(n)
        for i in range(n):
            port = low + (start + i) % n
            if (ps, port) not in self.bind_lists:
                cid.src_port = port
                self.bind_lists[(ps, port)] = [cid]
                cid.bound = (ps, port)
                return
        raise VerbsError(errno.EADDRNOTAVAIL, "no free port in the port space")

    def _device_of(self, ip):
        return self.daemon.by_ip.get(str(ip))

    def bind_addr(self, cid: CmaId, ip: str | None, port: int, family: int = 4) -> None:
        """rdma_bind_addr."""
        if cid.state != IDLE:
            raise VerbsError(errno.EINVAL, f"bind in state {STATE_NAMES[cid.state]}")
        addr = ipaddress.ip_address(ip) if ip else (ipaddress.ip_address("0.0.0.0") if family == 4
                                                     else ipaddress.ip_address("::"))
        dev = None
        if not _any(addr):
            dev = self._device_of(addr)
            if dev is None:
                if not _is_local(addr):
                    raise VerbsError(errno.EADDRNOTAVAIL, f"{addr} is not an address of this host")
                raise VerbsError(errno.ENODEV, f"no RDMA device has {addr}")
        elif addr.is_loopback:
            dev = self._device_of(addr)
        cid.family = addr.version
        cid.src_ip = addr
        cid.src_port = port
        cid.dev = dev
        if dev is not None:
            cid.sgid = ip_gid(addr)
            cid.mtu = dev.caps.active_mtu
        try:
            self._get_port(cid)
        except VerbsError:
            cid.src_ip, cid.src_port, cid.dev = None, 0, None
            raise
        cid.state = ADDR_BOUND

    def resolve_addr(self, cid: CmaId, src: str | None, dst: str, dst_port: int) -> None:
        """rdma_resolve_addr: the reply now, ADDR_RESOLVED or ADDR_ERROR after it."""
        d = ipaddress.ip_address(dst)
        if cid.state == IDLE:
            s = ipaddress.ip_address(src) if src else None
            if s is not None and s.version != d.version:
                raise VerbsError(errno.EINVAL, "source and destination families differ")
            self.bind_addr(cid, str(s) if s is not None else None, 0, d.version)
        if cid.family != d.version:
            raise VerbsError(errno.EINVAL, "destination family differs from the bound address's")
        if cid.state != ADDR_BOUND:
            raise VerbsError(errno.EINVAL, f"resolve_addr in state {STATE_NAMES[cid.state]}")
        cid.dst_ip, cid.dst_port = d, dst_port
        cid.state = ADDR_QUERY
        status = 0
        dev = cid.dev
        src_ip = cid.src_ip
        if dev is None or _any(src_ip):
            try:
                src_ip = ipaddress.ip_address(_route_source(d))
            except OSError as e:
                status = -(e.errno or errno.EHOSTUNREACH)
            else:
                dev = self._device_of(src_ip)
                if dev is None and d.is_loopback and self.daemon.devices:
                    dev = next(iter(self.daemon.devices.values()))      # cma_bind_loopback
                    first = next((e.gid for i, e in dev.gid_table if i), None)
                    src_ip = gid_ip(first) if first is not None else src_ip
                if dev is None:
                    status = -errno.ENODEV
        if status:
            cid.state = ADDR_BOUND
            self._emit(cid, EV.RDMA_CM_EVENT_ADDR_ERROR, status)
            return
        cid.src_ip, cid.dev = src_ip, dev
        cid.sgid, cid.dgid = ip_gid(src_ip), ip_gid(d)
        cid.mtu = dev.caps.active_mtu
        cid.state = ADDR_RESOLVED
        self._emit(cid, EV.RDMA_CM_EVENT_ADDR_RESOLVED, info=cid.info())

    def resolve_route(self, cid: CmaId) -> None:
        """rdma_resolve_route for RoCE: the path is made locally."""
        if cid.state != ADDR_RESOLVED:
            raise VerbsError(errno.EINVAL, f"resolve_route in state {STATE_NAMES[cid.state]}")
        cid.state = ROUTE_RESOLVED
        self._emit(cid, EV.RDMA_CM_EVENT_ROUTE_RESOLVED, info=cid.info())

    def listen(self, cid: CmaId, backlog: int) -> None:
        """rdma_listen: on the bound device, or on every device (cma_listen_on_all)."""
        if cid.state == IDLE:
            self.bind_addr(cid, None, 0, 4)
        if cid.state != ADDR_BOUND:
            raise VerbsError(errno.EINVAL, f"listen in state {STATE_NAMES[cid.state]}")
        if cid.reuseaddr:
            self._check_port(self.bind_lists.get(cid.bound, []), cid, False)
        cid.backlog = backlog if 0 < backlog < MAX_BACKLOG else MAX_BACKLOG
        cid.state = LISTEN
        sid = service_id(cid.ps, cid.src_port)
        devs = [cid.dev] if cid.dev is not None else list(self.daemon.devices.values())
        for dev in devs:
            self._agent_listen(dev, sid)

    def _agent_listen(self, dev, sid: int) -> None:
        key = (dev.name, sid)
        entry = self.agent_listens.get(key)
        if entry is None:
            entry = self.agent_listens[key] = [dev.cm.listen(sid, context=("listen", sid)), 0]
        entry[1] += 1

    def _cancel_listens(self, cid: CmaId) -> None:
        sid = service_id(cid.ps, cid.src_port)
        for name, dev in self.daemon.devices.items():
            if cid.dev is not None and dev is not cid.dev:
                continue
            entry = self.agent_listens.get((name, sid))
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] <= 0:
                del self.agent_listens[(name, sid)]
                dev.cm.destroy(entry[0])

    def device_added(self, dev) -> None:
        """A new device joins every listen that is bound to no device."""
        seen = set()
        for owners in self.bind_lists.values():
            for cid in owners:
                if cid.state == LISTEN and cid.dev is None:
                    sid = service_id(cid.ps, cid.src_port)
                    if sid not in seen:
                        seen.add(sid)
                    self._agent_listen(dev, sid)

    def device_removed(self, dev) -> None:
        for key in [k for k in self.agent_listens if k[0] == dev.name]:
            del self.agent_listens[key]
        for owners in list(self.bind_lists.values()):
            for cid in list(owners):
                if cid.dev is dev and not cid.destroyed:
                    cid.ib = None
                    self._emit(cid, EV.RDMA_CM_EVENT_DEVICE_REMOVAL)
                    cid.state = DEVICE_REMOVAL

    # -- connections ---------------------------------------------------------------------------
    def connect(self, cid: CmaId, p: dict, private_data: bytes) -> None:
        """rdma_connect: REQ, or SIDR_REQ for a UD ID."""
        if cid.state != ROUTE_RESOLVED:
            raise VerbsError(errno.EINVAL, f"connect in state {STATE_NAMES[cid.state]}")
        room = (PRIVATE_DATA_SIZE["SIDR_REQ"] if cid.qp_type == QP_TYPE_UD else PRIVATE_DATA_SIZE["REQ"]) \
            - CMA_HDR_SIZE
        if len(private_data) > room:
            raise VerbsError(errno.EINVAL, f"{len(private_data)} bytes of private data > {room}")
        p = _conn_param(p)
        hdr = pack_cma_hdr(cid.src_ip, cid.dst_ip, cid.src_port) + private_data
        sid = service_id(cid.ps, cid.dst_port)
        cm = cid.dev.cm
        cid.state = CONNECT
        if cid.qp_type == QP_TYPE_UD:
            cid.ib = cm.sidr_request(sid, cid.dgid, local_gid=cid.sgid, private_data=hdr,
                                     timeout_ms=1 << (CMA_CM_RESPONSE_TIMEOUT - 8),
                                     max_cm_retries=CMA_MAX_CM_RETRIES, context=cid)
            return
        cid.ib = cm.connect(ConnectParams(
            service_id=sid, dest_gid=cid.dgid, local_gid=cid.sgid, qp_num=p["qp_num"],
            starting_psn=cid.seq_num, qp_type=cid.qp_type, private_data=hdr,
            responder_resources=p["responder_resources"], initiator_depth=p["initiator_depth"],
            remote_cm_response_timeout=CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout=CMA_CM_RESPONSE_TIMEOUT,
            retry_count=min(7, p["retry_count"]), rnr_retry_count=min(7, p["rnr_retry_count"]),
            max_cm_retries=CMA_MAX_CM_RETRIES, srq=bool(p["srq"]), path_mtu=cid.mtu,
            packet_life_time=CMA_IBOE_PACKET_LIFETIME, traffic_class=cid.tos, hop_limit=64,
            flow_label=_roce_udp_flow_label(cid), flow_control=p["flow_control"]),
            now=self.daemon_now(), context=cid)

    def daemon_now(self) -> float:
        return self.daemon.now()

    def accept(self, cid: CmaId, p: dict | None, private_data: bytes) -> None:
        """rdma_accept: REP / SIDR_REP on the passive side; without
        parameters on the active side (librdmacm after CONNECT_RESPONSE,
        rdma_establish) the RTU."""
        if cid.state != CONNECT or cid.ib is None:
            raise VerbsError(errno.EINVAL, f"accept in state {STATE_NAMES[cid.state]}")
        cm = cid.dev.cm
        now = self.daemon_now()
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
        cm = cid.dev.cm
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
        cm = cid.dev.cm
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
            cid.dev.cm.established(cid.ib, now=self.daemon_now())
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None

    def init_qp_attr(self, cid: CmaId, qp_state: int) -> dict:
        """rdma_init_qp_attr: the attributes as transport.cm.qp_attrs names them."""
        if cid.dev is None:
            raise VerbsError(errno.EINVAL, "the ID has no device yet")
        if cid.ib is None or cid.qp_type == QP_TYPE_UD:
            if qp_state == 1:                                # cma_ib_init_qp_attr
                a = {"qp_state": 1, "pkey_index": 0, "port_num": 1}
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
            a = cid.dev.cm.qp_attrs(cid.ib, qp_state)
        except ValueError as e:
            raise VerbsError(errno.EINVAL, str(e)) from None
        if "ah_attr" in a:
            idx = cid.dev.gid_table.find(cid.sgid)
            a["ah_attr"] = dict(a["ah_attr"], sgid_index=idx or 0, dgid=a["ah_attr"]["dgid"].hex())
        if qp_state == 2:
            a["rq_psn"] = cid.seq_num
        if "timeout" in a and cid.timeout is not None:
            a["timeout"] = cid.timeout
        return a

    # -- multicast -------------------------------------------------------------------------------
    def join_multicast(self, cid: CmaId, addr: str) -> None:
        if cid.state not in (ADDR_BOUND, ADDR_RESOLVED) or cid.dev is None:
            raise VerbsError(errno.EINVAL, f"join in state {STATE_NAMES[cid.state]}")
        a = ipaddress.ip_address(addr)
        if a.is_unspecified:
            raise VerbsError(errno.EINVAL, "zero multicast address")
        if a.version == 6:
            raise VerbsError(errno.EOPNOTSUPP, "IPv6 multicast over RoCEv2 (cma_iboe_join_multicast: -ENOTSUPP)")
        if not a.is_multicast:
            raise VerbsError(errno.EINVAL, f"{a} is not a multicast address")
        mgid = ip_gid(a)
        if cid.ps == PortSpace.UDP:
            cid.qkey = cid.qkey or RDMA_UDP_QKEY
        qkey = RDMA_UDP_QKEY if cid.ps == PortSpace.UDP else 0
        idx = cid.dev.gid_table.find(cid.sgid) or 0
        ud = {"qp_num": 0xFFFFFF, "qkey": qkey,
              "ah_attr": {"dgid": mgid.hex(), "sgid_index": idx, "hop_limit": 64, "is_global": True,
                          "traffic_class": 0, "flow_label": 0, "sl": 0, "port_num": 1, "dlid": 0}}
        cid.mcast[mgid] = ud
        self._emit(cid, EV.RDMA_CM_EVENT_MULTICAST_JOIN, ud=ud, addr=str(a))

    def leave_multicast(self, cid: CmaId, addr: str) -> None:
        mgid = ip_gid(ipaddress.ip_address(addr))
        if cid.mcast.pop(mgid, None) is None:
            raise VerbsError(errno.EADDRNOTAVAIL, f"not joined to {addr}")

    # -- IB CM events --------------------------------------------------------------------------
    def _cm_event(self, dev, ev) -> None:
        t = ev.type
        if t in (CmEventType.REQ_RECEIVED, CmEventType.SIDR_REQ_RECEIVED):
            self._req(dev, ev)
            return
        cid = ev.cm_id.context
        if not isinstance(cid, CmaId) or cid.destroyed:
            return
        if (t != CmEventType.TIMEWAIT_EXIT and cid.state != CONNECT) or \
                (t == CmEventType.TIMEWAIT_EXIT and cid.state != DISCONNECT):
            return
        m = ev.msg
        cm = dev.cm
        if t in (CmEventType.REQ_ERROR, CmEventType.REP_ERROR, CmEventType.SIDR_REQ_ERROR):
            if t == CmEventType.SIDR_REQ_ERROR:
                cid.ib = None
            self._emit(cid, EV.RDMA_CM_EVENT_UNREACHABLE, _ETIMEDOUT)
        elif t == CmEventType.REP_RECEIVED:
            if cid.qp_type != QP_TYPE_UD:
                cm.send_mra(ev.cm_id, CMA_CM_MRA_SERVICE_TIMEOUT, delay=True)
            self._emit(cid, EV.RDMA_CM_EVENT_CONNECT_RESPONSE, conn={
                "responder_resources": m["initiator_depth"], "initiator_depth": m["responder_resources"],
                "flow_control": m["end_to_end_flow_control"], "rnr_retry_count": m["rnr_retry_count"],
                "srq": m["srq"], "qp_num": m["local_qpn"], "retry_count": 0, "qkey": 0},
                private_data=_pd_hex(m, "REP"))
        elif t in (CmEventType.RTU_RECEIVED, CmEventType.USER_ESTABLISHED):
            self._emit(cid, EV.RDMA_CM_EVENT_ESTABLISHED)
        elif t in (CmEventType.DREQ_ERROR, CmEventType.DREQ_RECEIVED, CmEventType.DREP_RECEIVED):
            cid.state = DISCONNECT
            self._emit(cid, EV.RDMA_CM_EVENT_DISCONNECTED, _ETIMEDOUT if t == CmEventType.DREQ_ERROR else 0)
        elif t == CmEventType.TIMEWAIT_EXIT:
            self._emit(cid, EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)
        elif t == CmEventType.REJ_RECEIVED:
            self._emit(cid, EV.RDMA_CM_EVENT_REJECTED, int(m["reason"]), private_data=_pd_hex(m, "REJ"))
        elif t == CmEventType.SIDR_REP_RECEIVED:
            cid.ib = None
            if m["status"] != SidrStatus.SUCCESS:
                self._emit(cid, EV.RDMA_CM_EVENT_UNREACHABLE, int(m["status"]),
                           private_data=_pd_hex(m, "SIDR_REP"))
                return
            if cid.qkey and m["q_key"] != cid.qkey:              # cma_set_qkey
                self._emit(cid, EV.RDMA_CM_EVENT_ADDR_ERROR, -errno.EINVAL)
                return
            cid.qkey = m["q_key"]
            idx = dev.gid_table.find(cid.sgid) or 0
            self._emit(cid, EV.RDMA_CM_EVENT_ESTABLISHED, ud={
                "qp_num": m["qpn"], "qkey": m["q_key"],
                "ah_attr": {"dgid": cid.dgid.hex(), "sgid_index": idx, "hop_limit": 64, "is_global": True,
                            "traffic_class": cid.tos, "flow_label": 0, "sl": 0, "port_num": 1, "dlid": 0}},
                private_data=_pd_hex(m, "SIDR_REP"))

    def _find_listener(self, dev, sid: int, hdr, ud: bool, tst: int | None):
        """cma_id_from_event + cma_find_listener + cma_check_req_qp_type."""
        try:
            ps, port = from_service_id(sid)
        except WireError:
            return None
        for cid in self.bind_lists.get((ps, port), ()):
            if cid.state != LISTEN or cid.destroyed:
                continue
            if cid.dev is not None and cid.dev is not dev:
                continue
            if cid.family != hdr.ip_version:
                continue
            if not _any(cid.src_ip) and cid.src_ip != hdr.dst_addr:
                continue
            if ud != (cid.qp_type == QP_TYPE_UD):
                continue
            if not ud and QP_TYPES.get(cid.qp_type) == QP_TYPE_UC and tst != 1:
                continue
            return cid
        return None

    def _req(self, dev, ev) -> None:
        """cma_req_handler: a REQ or SIDR_REQ for one of our listens."""
        m = ev.msg
        cm = dev.cm
        ud = ev.type == CmEventType.SIDR_REQ_RECEIVED
        pd = m.get("private_data", b"")
        try:
            hdr = parse_cma_hdr(pd)
        except WireError:
            cm.destroy(ev.cm_id)                  # cma_save_ip_info fails: the CM answers with a REJ
            return
        sid = m["serviceid"] if ud else m["service_id"]
        listener = self._find_listener(dev, sid, hdr, ud, None if ud else m["transport_service_type"])
        if listener is None or listener.pending >= listener.backlog:
            cm.destroy(ev.cm_id)
            return
        client = listener.owner
        cid = CmaId(client, listener.ps, QP_TYPE_UD if ud else ev.cm_id.qp_type, self.rng.getrandbits(24))
        cid.handle = client.add("cm_id", cid)
        cid.family = hdr.ip_version
        cid.src_ip, cid.src_port = hdr.dst_addr, sid & 0xFFFF
        cid.dst_ip, cid.dst_port = hdr.src_addr, hdr.port
        cid.dev = dev
        cid.sgid, cid.dgid = ev.cm_id.local_gid, ev.cm_id.remote_gid
        cid.mtu = min(dev.caps.active_mtu, ev.cm_id.path_mtu) if not ud else dev.caps.active_mtu
        cid.tos = ev.cm_id.traffic_class
        cid.listener = listener
        cid.ib = ev.cm_id
        ev.cm_id.context = cid
        cid.state = CONNECT
        listener.pending += 1
        user = bytes(pd[CMA_HDR_SIZE:])
        if ud:
            size = PRIVATE_DATA_SIZE["SIDR_REQ"] - CMA_HDR_SIZE
            self._emit(cid, EV.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=listener.handle, info=cid.info(),
                       ud={"qp_num": 0, "qkey": 0}, private_data=user.ljust(size, b"\0").hex())
            return
        size = PRIVATE_DATA_SIZE["REQ"] - CMA_HDR_SIZE
        self._emit(cid, EV.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=listener.handle, info=cid.info(), conn={
            "responder_resources": m["initiator_depth"], "initiator_depth": m["responder_resources"],
            "flow_control": m["end_to_end_flow_control"], "retry_count": m["retry_count"],
            "rnr_retry_count": m["rnr_retry_count"], "srq": m["srq"], "qp_num": m["local_qpn"], "qkey": 0},
            private_data=user.ljust(size, b"\0").hex())
        cm.send_mra(ev.cm_id, CMA_CM_MRA_SERVICE_TIMEOUT, delay=True)

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


def _pd_hex(m: dict, msg: str) -> str:
    """The message's whole private data field (the IB CM carries no length)."""
    return bytes(m.get("private_data", b"")).ljust(PRIVATE_DATA_SIZE[msg], b"\0").hex()


def _is_local(addr) -> bool:
    fam = socket.AF_INET if addr.version == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        try:
            s.bind((str(addr), 0))
        except OSError:
            return False
    return True


def _route_source(dst) -> str:
    """The source address the host's routing picks for ``dst`` (a UDP
    connect sends nothing)."""
    fam = socket.AF_INET if dst.version == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        s.connect((str(dst), 4791))
        return s.getsockname()[0]


__all__ = ["RdmaCm", "CmaId", "STATE_NAMES"]
