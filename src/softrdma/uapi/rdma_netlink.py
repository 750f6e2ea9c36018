"""Constants of the kernel's include/uapi/rdma/rdma_netlink.h that the
``rdma statistic`` commands carry: the QP counter mode and the auto-mode
criteria mask (the daemon's ``device.rdma_counter``, the tool's
``tools.rdma_stat``)."""

# enum rdma_nl_counter_mode
RDMA_COUNTER_MODE_NONE, RDMA_COUNTER_MODE_MANUAL, RDMA_COUNTER_MODE_AUTO = 0, 1, 2
# enum rdma_nl_counter_mask
RDMA_COUNTER_MASK_QP_TYPE, RDMA_COUNTER_MASK_PID = 1, 2
ALL_AUTO_MODE_MASKS = RDMA_COUNTER_MASK_QP_TYPE | RDMA_COUNTER_MASK_PID
