from ..verbs.srq import SRQ, SrqAttr, SrqInitAttr  # noqa: F401
from ._unsupported import unsupported

SrqInitAttrEx = unsupported("SrqInitAttrEx", "XRC/tag-matching SRQs are not implemented")
