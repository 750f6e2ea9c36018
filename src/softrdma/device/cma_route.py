"""rdma_cm on InfiniBand ports: the device an AF_IB address is on, the
route from the subnet administrator, and the hook IPoIB fills in.

As cma.c and sa_query.c do for an IB port:

* ``_ib_device_of(gid)`` (cma_acquire_dev_by_src_ip for AF_IB): the IB
  device whose GID table holds a bound GID; ``_resolve_ib_dev(dgid,
  pkey)`` (cma_resolve_ib_dev): the device of a destination GID -- one of
  this host's own GIDs, else the first Active IB port with the GID's
  subnet prefix and the P_Key.  Where the destination port is in the
  subnet is the SA's to say, at route resolution;
* ``_ib_route`` (cma_query_ib_route, ib_sa_path_rec_get): a PathRecord
  Get (SGID, DGID, P_Key, NumbPath 1, Reversible, ServiceID, TClass) from
  the port's QP1 to the SM LID the port holds, at the port's SM SL.  The
  answer's DLID, SLID, SL, MTU, rate, packet life time, hop limit,
  traffic class and flow label are the route (``CmaPath``): the REQ's
  primary path and the QP's address vector (LID-routed; a GRH only when
  the hop limit says the path leaves the subnet).  Errors as the kernel
  gives them: a port with no SM address (not Active) fails the call with
  EAGAIN; no answer within the call's timeout (sa_query's retries
  included) is ROUTE_ERROR -ETIMEDOUT; an answer with a nonzero MAD status
  (no path: ERR_NO_RECORDS) is ROUTE_ERROR -EINVAL (recv_handler's
  ``mad_hdr.status ? -EINVAL : 0``); the ID is back in ADDR_RESOLVED;
* ``_ipoib_neigh`` -- the one place an IP address would reach an IB
  device: IPoIB's neighbour resolution turns the destination address into
  (device, source address, destination GID).  The daemon has no IPoIB
  layer yet (``daemon.ipoib`` absent), so IP addresses on IB-only hosts
  keep failing with ADDR_ERROR -ENODEV; an IPoIB layer that sets
  ``daemon.ipoib`` with ``resolve(src_ip, dst_ip) -> (device, src_ip,
  dgid) | None`` makes rdma_cm's IP IDs run over IB with the same route
  and CM code as AF_IB IDs.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass

from ..enums import rdma_cm_event_type as EV
from ..errors import VerbsError
from ..wire.mad import MgmtClass, Method
from ..wire.sa import PATH_RECORD, SA_CLASS_VERSION, SA_DATA_OFFSET, SA_HDR, SA_HDR_OFFSET, SaAttr
from .cma_id import ADDR_RESOLVED, ROUTE_QUERY, ROUTE_RESOLVED, CmaId

LINK_LAYER_IB = 1                      # IBV_LINK_LAYER_INFINIBAND
PORT_ACTIVE = 4
AF_IB = 27
# ib_sa_path_rec component mask bits (IB_SA_PATH_REC_*)
PR_SERVICE_ID = (1 << 0) | (1 << 1)
PR_DGID, PR_SGID, PR_TCLASS, PR_REVERSIBLE, PR_NUMB_PATH, PR_PKEY = (1 << 2, 1 << 3, 1 << 10, 1 << 11, 1 << 12,
                                                                     1 << 13)
SA_QUERY_TRIES = 10                    # sa_query.c's nmbr_sa_query_retries: the timeout shared out
SA_TID_HI = 0                          # the daemon's SA queries: upper TID word 0 (CM agents 1..; umad files 0x100..)


@dataclass
class CmaPath:
    """A PathRecord as rdma_cm's route holds it (struct sa_path_rec)."""

    dlid: int
    slid: int
    sl: int
    mtu: int
    rate: int
    pkey: int
    packet_life_time: int
    hop_limit: int
    traffic_class: int
    flow_label: int

    def ah_attr(self, dgid: bytes, port_num: int = 1) -> dict:
        """ib_init_ah_attr_from_path: the address vector of the path from port ``port_num``."""
        return {"dgid": dgid.hex(), "sgid_index": 0, "hop_limit": self.hop_limit,
                "is_global": self.hop_limit > 0, "traffic_class": self.traffic_class,
                "flow_label": self.flow_label, "sl": self.sl, "port_num": port_num, "dlid": self.dlid,
                "static_rate": self.rate, "src_path_bits": 0}


def is_ib(dev) -> bool:
    return dev is not None and dev.link_layer == LINK_LAYER_IB


def port_mtu(port) -> int:
    """The active MTU of the port: a device's (RoCE, an IB device's port 1)
    is in its caps, a further IB port (``ib.IbSubPort``) holds its own."""
    return port.active_mtu if getattr(port, "hca", port) is not port else port.caps.active_mtu


def gid_addr(gid: bytes) -> ipaddress.IPv6Address:
    """A GID as an AF_IB ID's address (sib_addr, printed as IPv6)."""
    return ipaddress.IPv6Address(bytes(gid))


class CmaRoute:
    """AF_IB devices and IB routes of ``RdmaCm`` (a mixin: it uses the
    ``daemon``, ``sa_tids`` and ``_emit`` of ``rdma_cm.RdmaCm``)."""

    # -- devices ---------------------------------------------------------------------------------
    def _ib_ports(self):
        """Every port of every IB device (port 1 is the device itself)."""
        return [p for d in self.daemon.devices.values() if is_ib(d) for p in getattr(d, "ib_ports", (d,))]

    def _ib_device_of(self, gid: bytes):
        """The IB port one of whose GIDs ``gid`` is (None: no such port)."""
        for p in self._ib_ports():
            if p.gid_table.find(bytes(gid)) is not None:
                return p
        return None

    def _resolve_ib_dev(self, dgid: bytes, pkey: int):
        """cma_resolve_ib_dev: (port, source GID) for ``dgid``, or None."""
        found = None
        for p in self._ib_ports():
            if not any(k & 0x7FFF == pkey & 0x7FFF for k in p.pkeys):
                continue
            for _, e in p.gid_table:
                if e.gid == bytes(dgid):
                    return p, e.gid                       # one of our own ports
                if found is None and e.gid[:8] == bytes(dgid)[:8] and p.state == PORT_ACTIVE:
                    found = p, e.gid
        return found

    def _ib_loopback(self):
        """cma_bind_loopback among the IB ports: the first Active one's (port, GID 0)."""
        for p in self._ib_ports():
            if p.state == PORT_ACTIVE and p.gid(0) is not None:
                return p, p.gid(0)
        return None

    def _ipoib_neigh(self, src_ip, dst_ip, waiter=None):
        """The IPoIB hook (see the module): (device, source address, destination
        GID) for an IP destination reached over an IB device, or None; PENDING
        while IPoIB asks the neighbour (ARP, neighbour discovery): ``waiter``
        gets the answer (or None) later."""
        ipoib = getattr(self.daemon, "ipoib", None)
        if ipoib is None:
            return None
        return ipoib.resolve(src_ip, dst_ip, waiter)

    # -- routes ------------------------------------------------------------------------------------
    def _ib_route(self, cid: CmaId, timeout_ms: int) -> None:
        """rdma_resolve_route on an IB port: a PathRecord Get to the SA; the
        event follows its answer."""
        dev = cid.port                                  # the port's SM, SA and QP1
        if dev.state != PORT_ACTIVE or not dev.sm_lid:
            # ib_sa_path_rec_get -> alloc_mad: no SM address handle on the port
            raise VerbsError(errno.EAGAIN, f"{dev.name}: the port has no subnet manager to ask (not Active)")
        tid = self._sa_tid()
        mad = path_record_get(tid, cid.sgid, cid.dgid, cid.pkey, sid_of(cid), (cid.flowinfo >> 20) & 0xFF)
        cid.state = ROUTE_QUERY
        cid.route_tid = tid
        tries = SA_QUERY_TRIES
        per_try = max(1, timeout_ms // tries)

        def done(resp, cid=cid, dev=dev):
            self._route_answer(cid, dev, resp)

        dev.gsi.request_lid(mad, dev.sm_lid, done, now=self.daemon_now(), sl=dev.sm_sl, timeout_ms=per_try,
                            retries=tries - 1)

    def _route_answer(self, cid: CmaId, dev, resp) -> None:
        """cma_query_handler."""
        cid.route_tid = None
        if cid.destroyed or cid.state != ROUTE_QUERY or cid.port is not dev:
            return
        if resp is None:
            status = -errno.ETIMEDOUT
        elif int.from_bytes(resp[4:6], "big"):
            status = -errno.EINVAL
        else:
            r = PATH_RECORD.decode(resp, SA_DATA_OFFSET)
            cid.path = CmaPath(dlid=r["DLID"], slid=r["SLID"], sl=r["SL"], mtu=r["Mtu"], rate=r["Rate"],
                               pkey=r["PKey"], packet_life_time=r["PacketLifeTime"], hop_limit=r["HopLimit"],
                               traffic_class=r["TClass"], flow_label=r["FlowLabel"])
            mtu = port_mtu(dev)
            cid.mtu = min(mtu, r["Mtu"] or mtu)
            cid.state = ROUTE_RESOLVED
            self._emit(cid, EV.RDMA_CM_EVENT_ROUTE_RESOLVED, info=cid.info())
            return
        cid.state = ADDR_RESOLVED
        self._emit(cid, EV.RDMA_CM_EVENT_ROUTE_ERROR, status)

    def _cancel_route(self, cid: CmaId) -> None:
        tid = getattr(cid, "route_tid", None)
        if tid is not None and cid.dev is not None:
            cid.port.gsi.cancel(tid)
        cid.route_tid = None


def sid_of(cid: CmaId) -> int:
    """rdma_get_service_id of the destination: (ps << 16) | port."""
    return (cid.ps << 16) | cid.dst_port


def path_record_get(tid: int, sgid: bytes, dgid: bytes, pkey: int, service_id: int, tclass: int) -> bytes:
    """SubnAdmGet(PathRecord) as cma_query_ib_route asks it."""
    mad = bytearray(256)
    mad[0:4] = bytes([1, int(MgmtClass.SUBN_ADM), SA_CLASS_VERSION, int(Method.GET)])
    mad[8:16] = tid.to_bytes(8, "big")
    mad[16:18] = int(SaAttr.PATH_RECORD).to_bytes(2, "big")
    mask = PR_DGID | PR_SGID | PR_PKEY | PR_NUMB_PATH | PR_REVERSIBLE | PR_SERVICE_ID | PR_TCLASS
    SA_HDR.pack_into(mad, SA_HDR_OFFSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, mask)
    PATH_RECORD.encode_into(mad, SA_DATA_OFFSET, ServiceID=service_id, DGID=int.from_bytes(dgid, "big"),
                            SGID=int.from_bytes(sgid, "big"), TClass=tclass, Reversible=1, NumbPath=1, PKey=pkey)
    return bytes(mad)


__all__ = ["CmaRoute", "CmaPath", "AF_IB", "is_ib", "port_mtu", "gid_addr", "path_record_get"]
