"""pyverbs.xrcd: XRC domains (pyverbs/xrcd.pyx).

``XRCDInitAttr`` is ibv_xrcd_init_attr. softrdma's device has no XRC yet,
so ``XRCD`` fails as ibv_open_xrcd does on rxe (uverbs: no alloc_xrcd,
EOPNOTSUPP) with pyverbs' message."""

from ._unsupported import not_supported


class XRCDInitAttr:
    """ibv_xrcd_init_attr: comp_mask (IBV_XRCD_INIT_ATTR_*), oflags (open(2)
    flags for the inode), fd (-1 for a domain not shared through a file)."""

    def __init__(self, comp_mask, oflags, fd):
        self.comp_mask = comp_mask
        self.oflags = oflags
        self.fd = fd


class XRCD:
    def __init__(self, context, init_attr):
        if context is None or init_attr is None:
            raise TypeError("XRCD needs a Context and an XRCDInitAttr")
        raise not_supported("Failed to allocate XRCD")
