from ..uapi.abi import WC  # noqa: F401
from ..verbs.cq import CQ, CompChannel  # noqa: F401
from ..verbs.cqex import CQEX, CqInitAttrEx, PollCqAttr, WcTmInfo  # noqa: F401
