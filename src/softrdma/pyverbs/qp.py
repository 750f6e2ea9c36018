from ..verbs.qp import QP, QPAttr, QPCap, QPInitAttr  # noqa: F401
from ._unsupported import unsupported

QPEx = unsupported("QPEx", "the extended QP (wr_*) API is not implemented yet")
QPInitAttrEx = unsupported("QPInitAttrEx", "the extended QP (wr_*) API is not implemented yet")
