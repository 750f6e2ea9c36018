from ..verbs.qp import ECE, QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx  # noqa: F401
from ..verbs.qpex import DataBuffer, QPEx  # noqa: F401


class QPRateLimitAttr:
    """ibv_qp_rate_limit_attr (rdma-core 64), for ``QP.modify_rate_limit``."""

    def __init__(self, rate_limit: int = 0, max_burst_sz: int = 0, typical_pkt_sz: int = 0, comp_mask: int = 0):
        self.rate_limit = rate_limit
        self.max_burst_sz = max_burst_sz
        self.typical_pkt_sz = typical_pkt_sz
        self.comp_mask = comp_mask
