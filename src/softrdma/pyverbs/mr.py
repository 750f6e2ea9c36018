from ..verbs.dm import DMMR  # noqa: F401
from ..verbs.mr import MR, MW, MWBind, MWBindInfo  # noqa: F401
from ..verbs.buf import Buf, BufMR, DMAHandle, DmaHandleInitAttr, MREx  # noqa: F401
from ._unsupported import unsupported
DmaBufMR = unsupported("DmaBufMR", "dma-buf needs a kernel device")


def mwtype2str(mw_type):
    return {1: "IBV_MW_TYPE_1", 2: "IBV_MW_TYPE_2"}.get(mw_type, f"Unknown MW type ({mw_type})")
