"""ibv_qp_attr and ibv_qp_cap: the one model of a QP's attributes, shared by
the library (verbs.qp, pyverbs' QPAttr/QPCap), the daemon's request checks
(device.request) and the transport (transport.qp).

* ``QP_CAP`` -- ibv_qp_cap's fields, each with the largest value its C
  field holds;
* ``QP_ATTR`` -- ibv_qp_attr's integer fields, likewise (``ah_attr``,
  ``alt_ah_attr`` and ``cap`` are structs of their own);
* ``ATTR_MASK_FIELDS`` -- each ibv_qp_attr_mask bit and the fields it
  covers, in the mask's order (what ibv_modify_qp reads for it);
* ``UNSUPPORTED_MASK`` -- the bits softrdma does not do (alternate path,
  path migration, rate limit): the library does not send their fields, the
  transport answers the bit with EOPNOTSUPP;
* ``QPCap`` / ``QPAttr`` -- the structs.  ``QPAttr`` starts as the
  transport and the daemon need it (RESET, path_mtu IBV_MTU_1024, port 1,
  the rest zero, no address vectors); ``verbs.qp`` gives both pyverbs'
  constructors and defaults, ``transport.qp`` a QPCap with its defaults.
  ``to_wire`` is the form a control request carries.
"""

from __future__ import annotations

from ..enums import IBV_MTU_1024, IBV_QPS_RESET, ibv_qp_attr_mask as M

U8, U16, U32 = 0xFF, 0xFFFF, 0xFFFFFFFF

# ibv_qp_cap
QP_CAP = {"max_send_wr": U32, "max_recv_wr": U32, "max_send_sge": U32, "max_recv_sge": U32,
          "max_inline_data": U32}

# the integer fields of ibv_qp_attr, as wide as the C struct has them
QP_ATTR = {"qp_state": U32, "cur_qp_state": U32, "path_mtu": U32, "path_mig_state": U32, "qkey": U32,
           "rq_psn": U32, "sq_psn": U32, "dest_qp_num": U32, "qp_access_flags": U32, "pkey_index": U16,
           "alt_pkey_index": U16, "en_sqd_async_notify": U8, "sq_draining": U8, "max_rd_atomic": U8,
           "max_dest_rd_atomic": U8, "min_rnr_timer": U8, "port_num": U8, "timeout": U8, "retry_cnt": U8,
           "rnr_retry": U8, "alt_port_num": U8, "alt_timeout": U8, "rate_limit": U32}

# ibv_qp_attr_mask bit -> the ibv_qp_attr fields it covers
ATTR_MASK_FIELDS: tuple[tuple[int, tuple[str, ...]], ...] = tuple((int(bit), fields) for bit, fields in (
    (M.IBV_QP_STATE, ("qp_state",)),
    (M.IBV_QP_CUR_STATE, ("cur_qp_state",)),
    (M.IBV_QP_EN_SQD_ASYNC_NOTIFY, ("en_sqd_async_notify",)),
    (M.IBV_QP_ACCESS_FLAGS, ("qp_access_flags",)),
    (M.IBV_QP_PKEY_INDEX, ("pkey_index",)),
    (M.IBV_QP_PORT, ("port_num",)),
    (M.IBV_QP_QKEY, ("qkey",)),
    (M.IBV_QP_AV, ("ah_attr",)),
    (M.IBV_QP_PATH_MTU, ("path_mtu",)),
    (M.IBV_QP_TIMEOUT, ("timeout",)),
    (M.IBV_QP_RETRY_CNT, ("retry_cnt",)),
    (M.IBV_QP_RNR_RETRY, ("rnr_retry",)),
    (M.IBV_QP_RQ_PSN, ("rq_psn",)),
    (M.IBV_QP_MAX_QP_RD_ATOMIC, ("max_rd_atomic",)),
    (M.IBV_QP_ALT_PATH, ("alt_ah_attr", "alt_pkey_index", "alt_port_num", "alt_timeout")),
    (M.IBV_QP_MIN_RNR_TIMER, ("min_rnr_timer",)),
    (M.IBV_QP_SQ_PSN, ("sq_psn",)),
    (M.IBV_QP_MAX_DEST_RD_ATOMIC, ("max_dest_rd_atomic",)),
    (M.IBV_QP_PATH_MIG_STATE, ("path_mig_state",)),
    (M.IBV_QP_CAP, ("cap",)),
    (M.IBV_QP_DEST_QPN, ("dest_qp_num",)),
    (M.IBV_QP_RATE_LIMIT, ("rate_limit",)),
))
# an ibv_qp_attr field -> its mask bit
FIELD_MASK: dict[str, int] = {f: bit for bit, fields in ATTR_MASK_FIELDS for f in fields}


def mask_of(fields) -> int:
    """The ibv_qp_attr_mask that covers ``fields`` (names of ibv_qp_attr),
    as ucma_init_qp_attr returns one beside the attributes it set."""
    mask = 0
    for f in fields:
        mask |= FIELD_MASK[f]
    return mask


UNSUPPORTED_MASK = int(M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE | M.IBV_QP_RATE_LIMIT)


class QPCap:
    """ibv_qp_cap."""

    def __init__(self, max_send_wr: int = 0, max_recv_wr: int = 0, max_send_sge: int = 0,
                 max_recv_sge: int = 0, max_inline_data: int = 0):
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data

    def to_wire(self) -> dict:
        return {k: getattr(self, k) for k in QP_CAP}


class QPAttr:
    """ibv_qp_attr: ``QPAttr(qp_state=..., sq_psn=..., ...)``; a name that
    is not an ibv_qp_attr field is a TypeError."""

    def __init__(self, **fields):
        for k in QP_ATTR:
            setattr(self, k, 0)
        self.qp_state = self.cur_qp_state = IBV_QPS_RESET
        self.path_mtu = IBV_MTU_1024
        self.port_num = 1
        self.cap = QPCap()
        self.ah_attr = None
        self.alt_ah_attr = None
        for k, v in fields.items():
            if not hasattr(self, k):
                raise TypeError(f"QPAttr has no field {k!r}")
            setattr(self, k, v)

    def to_wire(self, mask: int) -> dict:
        """The fields ``mask`` names, as a modify_qp request carries them
        (structs by their own ``to_wire``); the unsupported bits' fields
        stay behind (the bit alone gets EOPNOTSUPP)."""
        out = {}
        for bit, fields in ATTR_MASK_FIELDS:
            if mask & bit and not bit & UNSUPPORTED_MASK:
                for field in fields:
                    v = getattr(self, field)
                    out[field] = v.to_wire() if hasattr(v, "to_wire") else int(v)
        return out


__all__ = ["QPAttr", "QPCap", "QP_ATTR", "QP_CAP", "ATTR_MASK_FIELDS", "FIELD_MASK", "mask_of", "UNSUPPORTED_MASK", "U8", "U16", "U32"]
