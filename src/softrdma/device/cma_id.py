"""An rdma_cm ID in the daemon (cma.c's struct rdma_id_private), its
states (enum rdma_cm_state) and cma.c's constants.

A ``CmaId`` belongs to the client connection that made it (librdmacm's
event channel); ``ib`` is its IB CM ID (``mgmt.cm.ids.CmId``) while a
connection or SIDR exchange is under way.  Its family is 4, 6 or AF_IB
(27: struct sockaddr_ib, whose address -- held in ``src_ip``/``dst_ip``
as an IPv6 address, the way a GID is written -- is a GID, with a P_Key
and a flow label); on an InfiniBand port ``path`` is the route the SA
gave (``cma_route.CmaPath``).  ``port`` is the port of ``dev`` the ID is
on (cma.c's ``id.port_num``): the device itself for a RoCE device and an
IB device's port 1, an ``ib.IbSubPort`` for its port 2 -- whose GIDs,
SM, QP1 and CM agent the ID's route, joins and connection use.
"""

from __future__ import annotations

import ipaddress
import os

from ..mgmt.cm.ids import QP_TYPE_RC, QP_TYPE_UC, QP_TYPE_UD

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
AF_IB = 27                             # struct sockaddr_ib's family: the address is a GID


def cma_any_addr(ip) -> bool:
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
        self._port = None               # an IB device's port 2.. (``port``)
        self.sgid = bytes(16)
        self.dgid = bytes(16)
        self.ib = None                  # mgmt.cm.ids.CmId
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
        self.pkey = 0xFFFF                # sib_pkey (AF_IB), the path's P_Key
        self.flowinfo = 0                 # sib_flowinfo: the traffic class asked of the SA (bits 20..27)
        self.path = None                  # cma_route.CmaPath (InfiniBand)
        self.route_tid: int | None = None  # the SA query under way

    @property
    def port(self):
        """The port of ``dev`` the ID is on (the device itself unless a
        further port of it was set)."""
        p = self._port
        return p if p is not None and getattr(p, "hca", None) is self.dev and p is not self.dev else self.dev

    @port.setter
    def port(self, p) -> None:
        self._port = p

    def set_port(self, port) -> None:
        """The ID is on ``port`` (a device, or an IB device's port): its device and port."""
        self.dev = getattr(port, "hca", port)
        self._port = port

    @property
    def port_num(self) -> int:
        return getattr(self.port, "num", 1)

    def addr(self, ip, port) -> dict:
        a = {"family": self.family, "ip": str(ip) if ip is not None else None, "port": port}
        if self.family == AF_IB:                      # sockaddr_ib: the GID, P_Key, service ID
            a.update(pkey=self.pkey, sid=(self.ps << 16) | port)
        return a

    def info(self) -> dict:
        return {"id": self.handle, "state": STATE_NAMES[self.state], "ps": self.ps, "qp_type": self.qp_type,
                "src": self.addr(self.src_ip, self.src_port), "dst": self.addr(self.dst_ip, self.dst_port),
                "device": self.dev.name if self.dev is not None else None, "port_num": self.port_num,
                "sgid": self.sgid.hex(), "dgid": self.dgid.hex(), "pkey": self.pkey, "qkey": self.qkey,
                "mtu": self.mtu, "dlid": self.path.dlid if self.path is not None else 0,
                "sl": self.path.sl if self.path is not None else 0}
