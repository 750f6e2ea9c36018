"""rdma_cm multicast on InfiniBand ports: the join and leave through the
subnet administrator (cma.c's cma_join_ib_multicast, multicast.c's
ib_sa_join_multicast and ib_sa_free_multicast).

* The MGID (cma_set_mgid): an AF_IB ID's group address is the MGID
  itself; an IPv6 address that is an SA-assigned MGID (ff1x:a01b::) too;
  any other IP group is mapped as IPoIB maps it (ip_ib_mc_map /
  ipv6_ib_mc_map under the broadcast address ff12:401b:<P_Key>::, signature
  0x01 in place of 0x1b for RDMA_PS_UDP).
* The join: SubnAdmSet(MCMemberRecord) from the port's QP1 to the SM LID
  the port holds (at its SM SL): MGID, PortGID (the ID's source GID),
  Q_Key RDMA_UDP_QKEY (RDMA_PS_UDP's; the other port spaces would take
  IPoIB's broadcast group's, which is not there: EADDRNOTAVAIL), the ID's P_Key,
  JoinState full member, SL, FlowLabel and TClass 0 -- the components
  cma_join_ib_multicast sets.  The answer's record becomes the event
  (cma_make_mc_event, ib_init_ah_from_mcmember): MULTICAST_JOIN with
  ud.qp_num 0xFFFFFF, ud.qkey the group's Q_Key and an address handle to
  the MLID with the group's SL and rate and a GRH to the MGID; the library
  attaches the ID's QP to (MGID, MLID) as librdmacm's ucma_process_join
  does.  Errors as the kernel gives them: a port with no SM (not Active)
  gives MULTICAST_ERROR -EAGAIN (the join MAD cannot be sent); an SA that does not answer gives
  MULTICAST_ERROR -ETIMEDOUT, one that refuses (a nonzero MAD status)
  MULTICAST_ERROR -EINVAL; the ID stays a member of the group until it
  leaves it (cma.c keeps the failed join on the ID's list too).
* The leave: SubnAdmDelete(MCMemberRecord) with the same JoinState, once
  the last ID of this daemon joined to the group on that port has left
  (each port -- port 2 of a device too -- joins through its own subnet's SA)
  (multicast.c keeps one membership per port and group); no answer is
  waited for (rdma_leave_multicast returns at once).
"""

from __future__ import annotations

import errno
import ipaddress

from ..enums import RDMA_UDP_QKEY
from ..enums import rdma_cm_event_type as EV
from ..errors import VerbsError
from ..wire.cma import PortSpace
from ..wire.mad import MgmtClass, Method
from ..wire.sa import (MCMEMBER_RECORD, MCR_COMP, SA_CLASS_VERSION, SA_DATA_OFFSET, SA_HDR, SA_HDR_OFFSET, SaAttr,
                       SaMethod)
from .cma_id import AF_IB, CmaId
from .cma_route import PORT_ACTIVE, SA_QUERY_TRIES, SA_TID_HI

JOIN_FULL_MEMBER = 1                    # JoinState bit 0 (IBA 15.2.5.17)
JOIN_COMP_MASK = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "PKey", "JoinState", "QKey", "SL", "FlowLabel",
                                           "TClass"))
LEAVE_COMP_MASK = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "JoinState"))
JOIN_TIMEOUT_MS = 1000                  # the MAD's timeout (multicast.c's 3000 ms over sa_query's retries)
IPOIB_BROADCAST_SCOPE = 2               # the IPoIB broadcast address's scope nibble (link local)


def mgid_of(cid: CmaId, addr: str, pkey: int) -> bytes:
    """cma_set_mgid: the MGID of the group ``addr`` names for ``cid``."""
    a = ipaddress.ip_address(addr)
    if a.is_unspecified:
        return bytes(16)
    if cid.family == AF_IB and a.version == 6:      # a sockaddr_ib: the GID (an IPv4 group is mapped)
        return a.packed
    if a.version == 6 and int.from_bytes(a.packed[:4], "big") & 0xFFF0FFFF == 0xFF10A01B:
        return a.packed                                 # an SA-assigned MGID
    sig = 0x01 if cid.ps == PortSpace.UDP else 0x1B     # the RDMA CM signature in place of IPoIB's
    head = bytes([0xFF, 0x10 | IPOIB_BROADCAST_SCOPE, 0x40, sig]) + (pkey | 0x8000).to_bytes(2, "big")
    if a.version == 4:                                  # ip_ib_mc_map: 28 bits of the address
        return head + bytes(6) + (int(a) & 0x0FFFFFFF).to_bytes(4, "big")
    return head + a.packed[6:16]                        # ipv6_ib_mc_map: the address's last 10 bytes


def mcmember_mad(tid: int, method: int, mask: int, **fields) -> bytes:
    """A SubnAdm(MCMemberRecord) MAD (Set for a join, Delete for a leave)."""
    mad = bytearray(256)
    mad[0:4] = bytes([1, int(MgmtClass.SUBN_ADM), SA_CLASS_VERSION, method])
    mad[8:16] = tid.to_bytes(8, "big")
    mad[16:18] = int(SaAttr.MCMEMBER_RECORD).to_bytes(2, "big")
    SA_HDR.pack_into(mad, SA_HDR_OFFSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, mask)
    mad[SA_DATA_OFFSET:SA_DATA_OFFSET + 52] = MCMEMBER_RECORD.encode(**fields)
    return bytes(mad)


class CmaMcast:
    """IB multicast joins of ``RdmaCm`` (a mixin: it uses the ``daemon``,
    ``_emit``, ``_sa_tid`` and ``daemon_now`` of ``rdma_cm.RdmaCm``)."""

    def _ib_join(self, cid: CmaId, addr: str) -> None:
        """rdma_join_multicast on an IB port: the reply now, the event after the SA's answer."""
        dev = cid.port                                  # the port's SM, SA and QP1
        mgid = mgid_of(cid, addr, cid.pkey)
        if mgid in cid.mcast:
            raise VerbsError(errno.EADDRINUSE, f"already joined to {addr}")
        if cid.ps != PortSpace.UDP:
            # the other port spaces take the Q_Key of IPoIB's broadcast group (ib_sa_get_mcmember_rec)
            raise VerbsError(errno.EADDRNOTAVAIL, "no IPoIB broadcast group on the port to take the Q_Key from")
        qkey = RDMA_UDP_QKEY
        tid = self._sa_tid()
        mad = mcmember_mad(tid, int(Method.SET), JOIN_COMP_MASK, MGID=int.from_bytes(mgid, "big"),
                           PortGID=int.from_bytes(cid.sgid, "big"), QKey=qkey, PKey=cid.pkey | 0x8000,
                           JoinState=JOIN_FULL_MEMBER, SL=0, FlowLabel=0, TClass=0)
        entry = {"addr": addr, "tid": tid, "joined": False}
        cid.mcast[mgid] = entry
        if dev.state != PORT_ACTIVE or not dev.sm_lid:
            # multicast.c's join work: send_join fails (alloc_mad: no SM address handle)
            entry["tid"] = None
            self._emit(cid, EV.RDMA_CM_EVENT_MULTICAST_ERROR, -errno.EAGAIN, addr=addr)
            return

        def done(resp, cid=cid, mgid=mgid, entry=entry, dev=dev):
            self._ib_join_answer(cid, dev, mgid, entry, resp)

        dev.gsi.request_lid(mad, dev.sm_lid, done, now=self.daemon_now(), sl=dev.sm_sl,
                            timeout_ms=JOIN_TIMEOUT_MS, retries=SA_QUERY_TRIES - 1)

    def _ib_join_answer(self, cid: CmaId, dev, mgid: bytes, entry: dict, resp) -> None:
        """cma_ib_mc_handler / cma_make_mc_event."""
        entry["tid"] = None
        if cid.destroyed or cid.mcast.get(mgid) is not entry or cid.port is not dev:
            return
        if resp is None or int.from_bytes(resp[4:6], "big"):     # (the membership stays until the leave)
            self._emit(cid, EV.RDMA_CM_EVENT_MULTICAST_ERROR, -errno.ETIMEDOUT if resp is None else -errno.EINVAL,
                       addr=entry["addr"])
            return
        r = MCMEMBER_RECORD.decode(resp, SA_DATA_OFFSET)
        if cid.qkey and cid.qkey != r["QKey"]:          # cma_set_qkey
            self._send_leave(dev, r["MGID"].to_bytes(16, "big"), cid.sgid)
            self._emit(cid, EV.RDMA_CM_EVENT_MULTICAST_ERROR, -errno.EINVAL, addr=entry["addr"])
            return
        cid.qkey = r["QKey"]
        entry["joined"] = True
        entry["mgid"] = r["MGID"].to_bytes(16, "big")     # (an SA-assigned one when asked with zero)
        idx = dev.gid_table.find(cid.sgid) or 0
        ud = {"qp_num": 0xFFFFFF, "qkey": r["QKey"],
              "ah_attr": {"dgid": entry["mgid"].hex(), "sgid_index": idx, "hop_limit": r["HopLimit"],
                          "is_global": True, "traffic_class": r["TClass"], "flow_label": r["FlowLabel"],
                          "sl": r["SL"], "port_num": cid.port_num, "dlid": r["MLID"], "static_rate": r["Rate"],
                          "src_path_bits": 0}}
        entry["ud"] = ud
        self._emit(cid, EV.RDMA_CM_EVENT_MULTICAST_JOIN, ud=ud, addr=entry["addr"])

    def _ib_leave(self, cid: CmaId, mgid: bytes) -> None:
        """rdma_leave_multicast (and rdma_destroy_id's leaves): the SA Delete
        when no other ID of this daemon is joined to the group on the port."""
        entry = cid.mcast.pop(mgid, None)
        if entry is None:
            return
        dev = cid.port if cid.dev is not None else None
        if entry.get("tid") is not None:
            dev.gsi.cancel(entry["tid"])
        if not entry.get("joined") or dev is None:
            return
        group = entry["mgid"]
        for _, other in self.ids():
            if other is not cid and other.port is dev and any(e.get("joined") and e.get("mgid") == group
                                                             for e in other.mcast.values()):
                return
        self._send_leave(dev, group, cid.sgid)

    def _send_leave(self, dev, mgid: bytes, port_gid: bytes) -> None:
        if dev.state != PORT_ACTIVE or not dev.sm_lid:
            return                                      # no SM to tell: its next sweep drops the member
        mad = mcmember_mad(self._sa_tid(), int(SaMethod.DELETE), LEAVE_COMP_MASK, MGID=int.from_bytes(mgid, "big"),
                           PortGID=int.from_bytes(port_gid, "big"), JoinState=JOIN_FULL_MEMBER)
        dev.gsi.request_lid(mad, dev.sm_lid, lambda resp: None, now=self.daemon_now(), sl=dev.sm_sl,
                            timeout_ms=JOIN_TIMEOUT_MS, retries=2)

    def _sa_tid(self) -> int:
        self._sa_seq = (getattr(self, "_sa_seq", 0) + 1) & 0xFFFFFFFF or 1
        return (SA_TID_HI << 32) | self._sa_seq


__all__ = ["CmaMcast", "mgid_of", "mcmember_mad"]
