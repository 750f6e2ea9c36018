"""rdma_cm's addresses in the daemon: ports, binding, address and route
resolution, listens, devices coming and going, multicast joins.

As cma.c for RoCE:

* port spaces (TCP, UDP, IB, IPoIB) with their bind lists, an ephemeral
  port from 32768..60999 when none is given, EADDRINUSE / EADDRNOTAVAIL /
  EACCES as cma_check_port and cma_use_port;
* ``resolve_addr``: the source address and device of a destination found
  by the host's routing (the device whose GID table holds the source
  address; an InfiniBand device has no IP address until IPoIB's neighbour
  resolution gives one -- ``cma_route._ipoib_neigh``, the hook -- so an IP
  destination resolves onto one only through it: ADDR_ERROR -ENODEV when
  no device has the source); an AF_IB destination (a GID) on the IB
  port that holds the GID or shares its subnet prefix and P_Key, ENODEV
  at once when none does (cma_resolve_ib_addr); ``resolve_route``: a RoCE
  route built locally (cma_resolve_iboe_route: GIDs from the addresses),
  an IB route from the SA (``cma_route``);
* ``listen`` on the bound device, or on every device (cma_listen_on_all),
  as one IB CM listen per (device, service ID) shared by the IDs;
* multicast joins on RoCE (cma_iboe_join_multicast): the MGID of an IPv4
  group is its IPv4-mapped address, the Q_Key RDMA_UDP_QKEY for UDP; the
  library attaches its QP; on an InfiniBand port the join and leave go
  through the SA (``cma_mcast``).
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from ..enums import RDMA_UDP_QKEY
from ..enums import rdma_cm_event_type as EV
from ..errors import VerbsError
from ..wire.cma import PortSpace, service_id
from ..wire.gid import gid_ip, ip_gid
from .cma_mcast import mgid_of
from .cma_route import gid_addr, is_ib, port_mtu
from .ipoib_host import PENDING
from .cma_id import (
    AF_IB,
    ADDR_BOUND,
    ADDR_QUERY,
    ADDR_RESOLVED,
    DEVICE_REMOVAL,
    IDLE,
    LISTEN,
    LOCAL_PORT_RANGE,
    MAX_BACKLOG,
    ROUTE_RESOLVED,
    STATE_NAMES,
    CmaId,
    cma_any_addr,
)


LINK_LAYER_ETHERNET = 2                 # IBV_LINK_LAYER_ETHERNET: a RoCE port, addresses on its netdev


class CmaAddr:
    """Ports, addresses, listens and multicast of ``RdmaCm`` (a mixin: it
    uses the ``bind_lists``, ``agent_listens``, ``daemon``, ``rng`` and
    ``_emit`` of ``rdma_cm.RdmaCm``)."""

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
            if cma_any_addr(cid.src_ip) or cma_any_addr(cur.src_ip):
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
        if family == AF_IB:
            self._bind_ib(cid, ip, port)
            return
        addr = ipaddress.ip_address(ip) if ip else (ipaddress.ip_address("0.0.0.0") if family == 4
                                                     else ipaddress.ip_address("::"))
        dev = None
        sgid = ip_gid(addr)
        if not cma_any_addr(addr):
            dev = self._device_of(addr)
            if dev is None:                     # an IPoIB interface's address: its IB port (rdma_translate_ip)
                ipoib = getattr(self.daemon, "ipoib", None)
                dev = ipoib.device_of(addr) if ipoib is not None else None
                if dev is not None:
                    sgid = dev.gid(0)
            if dev is None:
                if not _is_local(addr):
                    raise VerbsError(errno.EADDRNOTAVAIL, f"{addr} is not an address of this host")
                raise VerbsError(errno.ENODEV, f"no RDMA device has {addr}")
        elif addr.is_loopback:
            dev = self._device_of(addr)
        self._bind(cid, addr.version, addr, port, dev, sgid)

    def _bind(self, cid: CmaId, family: int, addr, port: int, dev, sgid: bytes) -> None:
        """What every bind ends with: the address, the device and its GID,
        and the port (cma_get_port) -- or nothing, if the port is refused."""
        cid.family, cid.src_ip, cid.src_port = family, addr, port
        cid.set_port(dev)                               # (an IB port: the device it is a port of, and it)
        if dev is not None:
            cid.sgid = sgid
            cid.mtu = port_mtu(dev)
        try:
            self._get_port(cid)
        except VerbsError:
            cid.src_ip, cid.src_port = None, 0
            cid.set_port(None)
            raise
        cid.state = ADDR_BOUND

    def _bind_ib(self, cid: CmaId, gid: str | None, port: int) -> None:
        """rdma_bind_addr of a sockaddr_ib: a GID of one of this host's IB
        ports -- any port of a device, port 2's too (ENODEV for any other),
        or the zero GID (any port)."""
        addr = ipaddress.IPv6Address(gid) if gid else ipaddress.IPv6Address("::")
        dev = None
        if not cma_any_addr(addr):
            dev = self._ib_device_of(addr.packed)
            if dev is None:
                raise VerbsError(errno.ENODEV, f"no InfiniBand port has GID {addr}")
        self._bind(cid, AF_IB, addr, port, dev, addr.packed)

    def _resolve_ib_addr(self, cid: CmaId, src: str | None, dst: str, dst_port: int) -> None:
        """rdma_resolve_addr of a sockaddr_ib (cma_resolve_ib_addr): the
        device now (ENODEV when no IB port can reach the GID), the event after
        the reply.  Where the GID's port is, the SA says at route resolution."""
        d = ipaddress.IPv6Address(dst)
        if cid.state == IDLE:
            self.bind_addr(cid, src, 0, AF_IB)
        if cid.family != AF_IB:
            raise VerbsError(errno.EINVAL, "destination family differs from the bound address's")
        if cid.state != ADDR_BOUND:
            raise VerbsError(errno.EINVAL, f"resolve_addr in state {STATE_NAMES[cid.state]}")
        dev, sgid = (cid.port if cid.dev is not None else None), cid.sgid
        if cma_any_addr(d):
            found = self._ib_loopback() if dev is None else (dev, sgid)
            if found is None:
                raise VerbsError(errno.ENODEV, "no Active InfiniBand port")
            dev, sgid = found
            dgid = sgid
        else:
            dgid = d.packed
            if dev is None:
                found = self._resolve_ib_dev(dgid, cid.pkey)
                if found is None:
                    raise VerbsError(errno.ENODEV, f"no InfiniBand port reaches GID {d}")
                dev, sgid = found
        cid.dst_ip, cid.dst_port = d, dst_port
        cid.set_port(dev)
        cid.sgid, cid.dgid = sgid, dgid
        if cma_any_addr(cid.src_ip):
            cid.src_ip = gid_addr(sgid)
        cid.mtu = port_mtu(dev)
        cid.state = ADDR_RESOLVED
        self._emit(cid, EV.RDMA_CM_EVENT_ADDR_RESOLVED, info=cid.info())

    def resolve_addr(self, cid: CmaId, src: str | None, dst: str, dst_port: int, family: int = 0) -> None:
        """rdma_resolve_addr: the reply now, ADDR_RESOLVED or ADDR_ERROR after it."""
        if family == AF_IB:
            self._resolve_ib_addr(cid, src, dst, dst_port)
            return
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
        neigh = self._ipoib_neigh(None if cma_any_addr(src_ip) else src_ip, d,
                                  lambda got, cid=cid: self._ipoib_answer(cid, got))
        if neigh is PENDING:                        # IPoIB asks the neighbour: ``_ipoib_answer`` follows
            return
        if neigh is not None:                       # an IPoIB neighbour: an IB device and the peer's GID
            dev, src_ip, dgid = neigh
        elif dev is None or cma_any_addr(src_ip):
            try:
                src_ip = ipaddress.ip_address(_route_source(d))
            except OSError as e:
                status = -(e.errno or errno.EHOSTUNREACH)
            else:
                dev = self._device_of(src_ip)
                if dev is None and d.is_loopback:
                    # cma_bind_loopback, among the devices that carry IP: an
                    # InfiniBand port would need IPoIB, which it does not have
                    dev = next((x for x in self.daemon.devices.values() if x.link_layer == LINK_LAYER_ETHERNET),
                               None)
                    first = next((e.gid for i, e in dev.gid_table if i), None) if dev is not None else None
                    src_ip = gid_ip(first) if first is not None else src_ip
                if dev is None:
                    status = -errno.ENODEV
        if status:
            cid.state = ADDR_BOUND
            self._emit(cid, EV.RDMA_CM_EVENT_ADDR_ERROR, status)
            return
        self._addr_resolved(cid, dev, src_ip, bytes(dgid) if neigh is not None else None)

    def _addr_resolved(self, cid: CmaId, dev, src_ip, dgid: bytes | None) -> None:
        """The address is resolved: onto ``dev`` from ``src_ip``, to the IPoIB
        neighbour's GID ``dgid`` (None: a RoCE destination, its address's GID)."""
        cid.src_ip = src_ip
        cid.set_port(dev)
        if dgid is not None:
            cid.sgid, cid.dgid = dev.gid(0), dgid
        else:
            cid.sgid, cid.dgid = ip_gid(src_ip), ip_gid(cid.dst_ip)
        cid.mtu = port_mtu(dev)
        cid.state = ADDR_RESOLVED
        self._emit(cid, EV.RDMA_CM_EVENT_ADDR_RESOLVED, info=cid.info())

    def _ipoib_answer(self, cid: CmaId, got) -> None:
        """IPoIB's answer for an address resolution it had pending: the
        neighbour (device, source address, GID), or None (no answer to ARP or
        neighbour discovery: ADDR_ERROR -EHOSTUNREACH, as an unanswered ARP)."""
        if cid.destroyed or cid.state != ADDR_QUERY:
            return
        if got is None:
            cid.state = ADDR_BOUND
            self._emit(cid, EV.RDMA_CM_EVENT_ADDR_ERROR, -errno.EHOSTUNREACH)
            return
        dev, src_ip, dgid = got
        self._addr_resolved(cid, dev, src_ip, bytes(dgid))

    def resolve_route(self, cid: CmaId, timeout_ms: int = 2000) -> None:
        """rdma_resolve_route: for RoCE the path is made locally; on an
        InfiniBand port the SA is asked (``cma_route``)."""
        if cid.state != ADDR_RESOLVED:
            raise VerbsError(errno.EINVAL, f"resolve_route in state {STATE_NAMES[cid.state]}")
        if is_ib(cid.dev):
            self._ib_route(cid, timeout_ms)
            return
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
        for port in ([cid.port] if cid.dev is not None else self._listen_ports()):
            self._agent_listen(port, sid)

    def _listen_ports(self) -> list:
        """Every port with a CM agent: where a listen bound to no device is."""
        return [p for d in self.daemon.devices.values() for p in getattr(d, "ib_ports", (d,))
                if getattr(p, "cm", None) is not None]

    def _agent_listen(self, port, sid: int) -> None:
        key = (port.name, getattr(port, "num", 1), sid)
        entry = self.agent_listens.get(key)
        if entry is None:
            entry = self.agent_listens[key] = [port.cm.listen(sid, context=("listen", sid)), 0]
        entry[1] += 1

    def _cancel_listens(self, cid: CmaId) -> None:
        sid = service_id(cid.ps, cid.src_port)
        for port in ([cid.port] if cid.dev is not None else self._listen_ports()):
            key = (port.name, getattr(port, "num", 1), sid)
            entry = self.agent_listens.get(key)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] <= 0:
                del self.agent_listens[key]
                port.cm.destroy(entry[0])

    def port_added(self, port) -> None:
        """A new port's CM agent (a new device's, or an IB device's port 2)
        joins every listen that is bound to no device."""
        name, num = port.name, getattr(port, "num", 1)
        for key in [k for k in self.agent_listens if k[:2] == (name, num)]:
            del self.agent_listens[key]                 # (a port that was there before: its old agent's)
        for owners in self.bind_lists.values():
            for cid in owners:
                if cid.state == LISTEN and cid.dev is None:
                    self._agent_listen(port, service_id(cid.ps, cid.src_port))

    def device_added(self, dev) -> None:
        """A new device joins every listen that is bound to no device."""
        self.port_added(dev)

    def device_removed(self, dev) -> None:
        for key in [k for k in self.agent_listens if k[0] == dev.name]:
            del self.agent_listens[key]
        for owners in list(self.bind_lists.values()):
            for cid in list(owners):
                if cid.dev is dev and not cid.destroyed:
                    cid.ib = None
                    self._emit(cid, EV.RDMA_CM_EVENT_DEVICE_REMOVAL)
                    cid.state = DEVICE_REMOVAL

    # -- multicast -------------------------------------------------------------------------------
    def join_multicast(self, cid: CmaId, addr: str) -> None:
        if cid.state not in (ADDR_BOUND, ADDR_RESOLVED) or cid.dev is None:
            raise VerbsError(errno.EINVAL, f"join in state {STATE_NAMES[cid.state]}")
        if is_ib(cid.dev):
            self._ib_join(cid, addr)                     # the SA's MCMemberRecord join (cma_mcast)
            return
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
        if is_ib(cid.dev):
            mgid = mgid_of(cid, addr, cid.pkey)
            if mgid not in cid.mcast:
                raise VerbsError(errno.EADDRNOTAVAIL, f"not joined to {addr}")
            self._ib_leave(cid, mgid)
            return
        mgid = ip_gid(ipaddress.ip_address(addr))
        if cid.mcast.pop(mgid, None) is None:
            raise VerbsError(errno.EADDRNOTAVAIL, f"not joined to {addr}")


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
