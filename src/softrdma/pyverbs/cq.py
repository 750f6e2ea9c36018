from ..transport.wr import WC  # noqa: F401
from ..verbs.cq import CQ, CompChannel  # noqa: F401
from ._unsupported import unsupported

CQEX = unsupported("CQEX", "extended CQs are not implemented yet")
CqInitAttrEx = unsupported("CqInitAttrEx", "extended CQs are not implemented yet")
