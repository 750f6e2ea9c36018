"""The verbs steps ibv_*_pingpong and perftest take alike: finding the
device by name, a QP to INIT, RTR and RTS with exactly the attribute mask
each step needs, the address vector to a peer, and tearing the objects down
in order (pingpong.c's pp_init_ctx / pp_connect_ctx / pp_close_ctx,
perftest_resources.c's ctx_find_dev / ctx_modify_qp_to_init / ctx_connect /
destroy_ctx).

The functions raise PyverbsError; each tool prints its own message, since
those differ and must stay the real tools'.  An attribute left ``None`` is
not set and its bit is not in the mask.
"""

from __future__ import annotations

from ..enums import (
    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_RETRY_CNT,
    IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT, IBV_QPS_INIT, IBV_QPS_RTR,
    IBV_QPS_RTS,
)
from ..verbs.addr import GID, AHAttr, GlobalRoute
from ..verbs.device import get_device_list
from ..verbs.errors import PyverbsError
from ..verbs.qp import QPAttr


def device_names() -> list[str]:
    """ibv_get_device_list(): the names, in the list's order (raises what
    the daemon's answer raised)."""
    return [d.name.decode() if isinstance(d.name, bytes) else d.name for d in get_device_list()]


def _set(attr: QPAttr, mask: int, fields: dict) -> int:
    for name, (bit, value) in fields.items():
        if value is not None:
            setattr(attr, name, value)
            mask |= bit
    return mask


def qp_to_init(qp, port: int, pkey_index: int = 0, qkey: int | None = None, access: int | None = None) -> None:
    """RESET -> INIT: P_Key index and port, and the Q_Key (UD) or the
    remote access flags (RC, UC)."""
    a = QPAttr(qp_state=IBV_QPS_INIT)
    a.pkey_index = pkey_index
    a.port_num = port
    qp.modify(a, _set(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
                      {"qkey": (IBV_QP_QKEY, qkey), "qp_access_flags": (IBV_QP_ACCESS_FLAGS, access)}))


def qp_to_rtr(qp, ah_attr: AHAttr | None = None, path_mtu: int | None = None, dest_qp_num: int | None = None,
              rq_psn: int | None = None, max_dest_rd_atomic: int | None = None,
              min_rnr_timer: int | None = None) -> QPAttr:
    """INIT -> RTR (UD: the state alone; UC: the path; RC: and the responder's
    resources).  Returns the attributes, which the RTS step reuses as the C
    tools do."""
    a = QPAttr(qp_state=IBV_QPS_RTR)
    qp.modify(a, _set(a, IBV_QP_STATE, {
        "ah_attr": (IBV_QP_AV, ah_attr), "path_mtu": (IBV_QP_PATH_MTU, path_mtu),
        "dest_qp_num": (IBV_QP_DEST_QPN, dest_qp_num), "rq_psn": (IBV_QP_RQ_PSN, rq_psn),
        "max_dest_rd_atomic": (IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic),
        "min_rnr_timer": (IBV_QP_MIN_RNR_TIMER, min_rnr_timer)}))
    return a


def qp_to_rts(qp, a: QPAttr, sq_psn: int, timeout: int | None = None, retry_cnt: int | None = None,
              rnr_retry: int | None = None, max_rd_atomic: int | None = None) -> None:
    """RTR -> RTS: the send PSN, and for RC the retry parameters and the
    requester's outstanding reads."""
    a.qp_state = IBV_QPS_RTS
    a.sq_psn = sq_psn
    qp.modify(a, _set(a, IBV_QP_STATE | IBV_QP_SQ_PSN, {
        "timeout": (IBV_QP_TIMEOUT, timeout), "retry_cnt": (IBV_QP_RETRY_CNT, retry_cnt),
        "rnr_retry": (IBV_QP_RNR_RETRY, rnr_retry), "max_rd_atomic": (IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic)}))


def ah_attr(port: int, dlid: int, sl: int, dgid: bytes | None = None, sgid_index: int = 0, hop_limit: int = 1,
            traffic_class: int = 0, flow_label: int = 0) -> AHAttr:
    """The address vector to a peer: a GRH (is_global) only with ``dgid``."""
    if dgid is None:
        return AHAttr(is_global=0, port_num=port, dlid=dlid, sl=sl)
    gr = GlobalRoute(dgid=GID(dgid), sgid_index=sgid_index, hop_limit=hop_limit, traffic_class=traffic_class,
                     flow_label=flow_label)
    return AHAttr(gr=gr, is_global=1, port_num=port, dlid=dlid, sl=sl)


def destroy(steps, err, keep_going: bool = False) -> bool:
    """Close each ``(object, message)`` in order (None: skipped); a failure
    prints its message and stops the teardown (pingpong), or is remembered
    and the rest still closed (perftest, ``keep_going``).  True if all
    closed."""
    ok = True
    for obj, msg in steps:
        if obj is None:
            continue
        try:
            obj.close()
        except (PyverbsError, OSError):
            err(msg)
            ok = False
            if not keep_going:
                break
    return ok


def close_quietly(*objs) -> None:
    """An error exit: the C tools just return and the kernel cleans up;
    closing (the context, or what a failed try made) asks the daemon to do
    the same.  Nothing that goes wrong here is reported."""
    for obj in objs:
        if obj is not None:
            try:
                obj.close()
            except Exception:
                pass
