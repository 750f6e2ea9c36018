"""ib_cm_init_qp_attr: the QP attributes a connection's CM ID dictates.

``qp_attrs(cm_id, "INIT"/"RTR"/"RTS")`` returns a dict named as
``struct ibv_qp_attr``'s fields (``ah_attr`` as a dict of the address
vector's fields), plain data: the caller (the daemon's rdma_cm, then the
library's rdma_init_qp_attr) turns the names into its QP attribute model
and the ibv_qp_attr_mask.
"""

from __future__ import annotations

from ...enums import ibv_qp_state as QPS
from .ids import QP_TYPE_RC, CmId, CmState


class CmInitQpAttr:
    """``qp_attrs`` of ``CmAgent`` (a mixin)."""

    def qp_attrs(self, cm_id: CmId, qp_state) -> dict:
        """ib_cm_init_qp_attr: the attributes of a modify to INIT, RTR or RTS
        ("INIT"/"RTR"/"RTS" or IBV_QPS_*), named as ibv_qp_attr's fields
        (``ah_attr`` as a dict of the address vector's); the library's
        ``verbs.cm.qp_attr_mask`` makes their mask."""
        if not isinstance(qp_state, str):
            qp_state = {1: "INIT", 2: "RTR", 3: "RTS"}.get(int(qp_state), str(qp_state))
        if cm_id.state not in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD, CmState.REQ_RCVD,
                               CmState.MRA_REQ_SENT, CmState.REP_RCVD, CmState.MRA_REP_SENT,
                               CmState.REP_SENT, CmState.MRA_REP_RCVD, CmState.ESTABLISHED):
            raise ValueError(f"qp_attrs in {cm_id.state.name} (EINVAL)")
        rc = cm_id.qp_type == QP_TYPE_RC
        if qp_state == "INIT":
            # cm_init_qp_init_attr: remote write, plus read/atomic when
            # the peer may have reads outstanding with us
            flags = 0x2 | (0xC if cm_id.responder_resources else 0)
            return {"qp_state": int(QPS.IBV_QPS_INIT), "port_num": self.port_num, "pkey_index": 0,
                    "qp_access_flags": flags}
        if qp_state == "RTR":
            if cm_id.state in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD):
                raise ValueError("RTR attributes before the REP (EINVAL)")
            ah = {"dgid": cm_id.remote_gid, "sgid_index": 0, "flow_label": cm_id.flow_label,
                  "hop_limit": cm_id.hop_limit, "traffic_class": cm_id.traffic_class, "sl": cm_id.sl,
                  "is_global": True, "port_num": self.port_num}
            if cm_id.path_dlid != 0xFFFF:
                # InfiniBand (ib_init_ah_attr_from_path): LID-routed, a GRH only
                # when the path has a hop limit (it leaves the subnet)
                ah.update(dlid=cm_id.path_dlid, is_global=cm_id.hop_limit > 0, static_rate=cm_id.path_rate,
                          src_path_bits=0)
            a = {"qp_state": int(QPS.IBV_QPS_RTR), "ah_attr": ah,
                 "path_mtu": cm_id.path_mtu, "dest_qp_num": cm_id.remote_qpn,
                 "rq_psn": cm_id.rq_psn}
            if rc:
                a["max_dest_rd_atomic"] = cm_id.responder_resources
                a["min_rnr_timer"] = 0
            return a
        if qp_state == "RTS":
            # cm_init_qp_rts_attr: the passive side goes to RTS before its REP
            if cm_id.state not in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT, CmState.REP_RCVD,
                                   CmState.MRA_REP_SENT, CmState.REP_SENT, CmState.MRA_REP_RCVD,
                                   CmState.ESTABLISHED):
                raise ValueError(f"RTS attributes in {cm_id.state.name} (EINVAL)")
            a = {"qp_state": int(QPS.IBV_QPS_RTS), "sq_psn": cm_id.sq_psn}
            if rc:
                a.update(timeout=cm_id.ack_timeout, retry_cnt=cm_id.retry_count,
                         rnr_retry=cm_id.rnr_retry_count, max_rd_atomic=cm_id.initiator_depth)
            return a
        raise ValueError(f"qp_state {qp_state!r}")
