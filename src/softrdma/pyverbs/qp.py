from ..verbs.qp import ECE, QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx  # noqa: F401
from ..verbs.qpex import DataBuffer, QPEx  # noqa: F401
