"""rdma_cm's IB CM events in the daemon: cma_ib_handler and cma_req_handler.

The IB CM's events become RDMA_CM_EVENT_* as cma_ib_handler maps them,
sent to the owning client as ``{"event": "cm", ...}`` records after the
reply to the request that caused them.  A REQ (or SIDR_REQ) is taken by a
listener whose service ID is (ps << 16) | port and whose ``cma_hdr``
destination is its address (or it is bound to any); it becomes a new ID
of the listener's client in CONNECT, announced as CONNECT_REQUEST; the
passive side then says MRA (delayed: only a retried REQ gets it,
CMA_CM_MRA_SETTING).  A listener bound to an AF_IB address takes any
REQ of its service ID (cma_match_private_data): an AF_IB peer sends no
``cma_hdr``, so its private data is the application's whole; the new ID's
addresses are the path's GIDs (cma_save_ib_info).  On an InfiniBand port
the new ID's path is the REQ's primary path, and a UD ID's address
handle after SIDR_REP is the SA path's (ib_init_ah_attr_from_path).
"""

from __future__ import annotations

import errno

from ..enums import rdma_cm_event_type as EV
from ..mgmt.cm.ids import QP_TYPE_UC, QP_TYPE_UD, CmEventType
from ..wire.cm import PRIVATE_DATA_SIZE, SidrStatus
from ..wire.cma import CMA_HDR_SIZE, from_service_id, parse_cma_hdr
from ..wire.errors import WireError
from .cma_id import AF_IB, CMA_CM_MRA_SERVICE_TIMEOUT, CONNECT, DISCONNECT, LISTEN, QP_TYPES, CmaId, cma_any_addr
from .cma_route import CmaPath, gid_addr, is_ib, port_mtu

_ETIMEDOUT = -errno.ETIMEDOUT


class CmaIbHandler:
    """The IB CM's events for ``RdmaCm`` (a mixin: it uses the
    ``bind_lists``, ``rng`` and ``_emit`` of ``rdma_cm.RdmaCm``)."""

    def _cm_event(self, port, ev) -> None:
        """An event of the CM agent of ``port`` (a device, or an IB device's port 2)."""
        t = ev.type
        if t in (CmEventType.REQ_RECEIVED, CmEventType.SIDR_REQ_RECEIVED):
            self._req(port, ev)
            return
        cid = ev.cm_id.context
        if not isinstance(cid, CmaId) or cid.destroyed:
            return
        if (t != CmEventType.TIMEWAIT_EXIT and cid.state != CONNECT) or \
                (t == CmEventType.TIMEWAIT_EXIT and cid.state != DISCONNECT):
            return
        m = ev.msg
        cm = port.cm
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
            if cid.path is not None:                             # InfiniBand: the SA's path
                ah = cid.path.ah_attr(cid.dgid, cid.port_num)
            else:
                idx = port.gid_table.find(cid.sgid) or 0
                ah = {"dgid": cid.dgid.hex(), "sgid_index": idx, "hop_limit": 64, "is_global": True,
                      "traffic_class": cid.tos, "flow_label": 0, "sl": 0, "port_num": cid.port_num, "dlid": 0}
            self._emit(cid, EV.RDMA_CM_EVENT_ESTABLISHED, ud={"qp_num": m["qpn"], "qkey": m["q_key"], "ah_attr": ah},
                       private_data=_pd_hex(m, "SIDR_REP"))

    def _find_listener(self, on, sid: int, hdr, ud: bool, tst: int | None):
        """cma_id_from_event + cma_find_listener + cma_check_req_qp_type."""
        try:
            ps, port = from_service_id(sid)
        except WireError:
            return None
        for cid in self.bind_lists.get((ps, port), ()):
            if cid.state != LISTEN or cid.destroyed:
                continue
            if cid.dev is not None and cid.port is not on:      # bound to another port
                continue
            if cid.family != AF_IB:                    # cma_match_private_data: AF_IB takes any
                if hdr is None or cid.family != hdr.ip_version:
                    continue
                if not cma_any_addr(cid.src_ip) and cid.src_ip != hdr.dst_addr:
                    continue
            if ud != (cid.qp_type == QP_TYPE_UD):
                continue
            if not ud and QP_TYPES.get(cid.qp_type) == QP_TYPE_UC and tst != 1:
                continue
            return cid
        return None

    def _req(self, port, ev) -> None:
        """cma_req_handler: a REQ or SIDR_REQ for one of our listens, on ``port``."""
        m = ev.msg
        cm = port.cm
        ud = ev.type == CmEventType.SIDR_REQ_RECEIVED
        pd = m.get("private_data", b"")
        try:
            hdr = parse_cma_hdr(pd)
        except WireError:
            hdr = None                            # an AF_IB peer's, or none: only an AF_IB listener takes it
        sid = m["serviceid"] if ud else m["service_id"]
        listener = self._find_listener(port, sid, hdr, ud, None if ud else m["transport_service_type"])
        if listener is None or listener.pending >= listener.backlog:
            cm.destroy(ev.cm_id)                  # (cma_save_ip_info failing too: the CM answers with a REJ)
            return
        client = listener.owner
        cid = CmaId(client, listener.ps, QP_TYPE_UD if ud else ev.cm_id.qp_type, self.rng.getrandbits(24))
        cid.handle = client.add("cm_id", cid)
        local_gid, remote_gid = ev.cm_id.local_gid or bytes(16), ev.cm_id.remote_gid or bytes(16)
        af_ib = listener.family == AF_IB
        if af_ib:                                 # cma_save_ib_info: the path's GIDs, the listener's SID
            cid.family = AF_IB
            cid.src_ip, cid.src_port = gid_addr(local_gid), sid & 0xFFFF
            cid.dst_ip, cid.dst_port = gid_addr(remote_gid), 0
            cid.pkey = ev.cm_id.pkey
        else:
            cid.family = hdr.ip_version
            cid.src_ip, cid.src_port = hdr.dst_addr, sid & 0xFFFF
            cid.dst_ip, cid.dst_port = hdr.src_addr, hdr.port
        cid.set_port(port)
        dev = cid.dev
        cid.sgid, cid.dgid = local_gid, remote_gid
        if is_ib(dev) and not ud:                 # the REQ's primary path, from this side
            c = ev.cm_id
            cid.path = CmaPath(dlid=c.path_dlid, slid=c.path_slid, sl=c.sl, mtu=c.path_mtu, rate=c.path_rate,
                               pkey=c.pkey, packet_life_time=c.packet_life_time, hop_limit=c.hop_limit,
                               traffic_class=c.traffic_class, flow_label=c.flow_label)
        mtu = port_mtu(port)
        cid.mtu = min(mtu, ev.cm_id.path_mtu) if not ud else mtu
        cid.tos = ev.cm_id.traffic_class
        cid.listener = listener
        cid.ib = ev.cm_id
        ev.cm_id.context = cid
        cid.state = CONNECT
        listener.pending += 1
        skip = 0 if af_ib else CMA_HDR_SIZE
        user = bytes(pd[skip:])
        if ud:
            size = PRIVATE_DATA_SIZE["SIDR_REQ"] - skip
            self._emit(cid, EV.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=listener.handle, info=cid.info(),
                       ud={"qp_num": 0, "qkey": 0}, private_data=user.ljust(size, b"\0").hex())
            return
        size = PRIVATE_DATA_SIZE["REQ"] - skip
        self._emit(cid, EV.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=listener.handle, info=cid.info(), conn={
            "responder_resources": m["initiator_depth"], "initiator_depth": m["responder_resources"],
            "flow_control": m["end_to_end_flow_control"], "retry_count": m["retry_count"],
            "rnr_retry_count": m["rnr_retry_count"], "srq": m["srq"], "qp_num": m["local_qpn"], "qkey": 0},
            private_data=user.ljust(size, b"\0").hex())
        cm.send_mra(ev.cm_id, CMA_CM_MRA_SERVICE_TIMEOUT, delay=True)


def _pd_hex(m: dict, msg: str) -> str:
    """The message's whole private data field (the IB CM carries no length)."""
    return bytes(m.get("private_data", b"")).ljust(PRIVATE_DATA_SIZE[msg], b"\0").hex()
