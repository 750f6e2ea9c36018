"""pyverbs.xrcd: XRC domains (pyverbs/xrcd.pyx) -- softrdma's are verbs.xrcd's."""

from ..verbs.xrcd import XRCD, XRCDInitAttr  # noqa: F401
