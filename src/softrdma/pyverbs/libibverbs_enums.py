"""pyverbs.libibverbs_enums: libibverbs' constants, as rdma-core 64's
libibverbs_enums.pyx exports them: every enum as a class
(``ibv_qp_type.IBV_QPT_RC``) and its members flat, plus the underscore
aliases of values verbs.h defines as 64-bit constants or anonymous enums."""
from ..enums import *  # noqa: F401,F403
from ..enums import (_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,  # noqa: F401
                     _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, _IBV_ADVISE_MR_FLAG_FLUSH, _IBV_ALLOCATOR_USE_DEFAULT,
                     _IBV_DEVICE_CC_DMA_BOUNCE, _IBV_DEVICE_PCI_WRITE_END_PADDING, _IBV_DEVICE_RAW_SCATTER_FCS)
