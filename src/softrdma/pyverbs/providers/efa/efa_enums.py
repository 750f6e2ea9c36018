"""pyverbs.providers.efa.efa_enums: efadv.h's constants (rdma-core 44's
efadv_enums.pxd)."""

EFADV_DEVICE_ATTR_CAPS_RDMA_READ = 1
EFADV_DEVICE_ATTR_CAPS_RNR_RETRY = 2
EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID = 4
EFADV_QP_DRIVER_TYPE_SRD = 0
EFADV_WC_EX_WITH_SGID = 1
