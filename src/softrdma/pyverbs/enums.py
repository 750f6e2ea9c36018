"""pyverbs.enums: every libibverbs constant, flat (as pyverbs' enums.pxd)."""
from ..enums import *  # noqa: F401,F403
from ..enums import ibv_gid_type  # noqa: F401
from ..enums import (_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,  # noqa: F401
                     _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, _IBV_ADVISE_MR_FLAG_FLUSH, _IBV_ALLOCATOR_USE_DEFAULT,
                     _IBV_DEVICE_CC_DMA_BOUNCE, _IBV_DEVICE_PCI_WRITE_END_PADDING, _IBV_DEVICE_RAW_SCATTER_FCS)
