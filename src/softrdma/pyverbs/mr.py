from ..verbs.mr import MR  # noqa: F401
from ._unsupported import unsupported

MW = unsupported("MW", "memory windows are not implemented yet")
MWBindInfo = unsupported("MWBindInfo", "memory windows are not implemented yet")
DMMR = unsupported("DMMR", "device memory does not exist on a software device")
DmaBufMR = unsupported("DmaBufMR", "dma-buf needs a kernel device")
