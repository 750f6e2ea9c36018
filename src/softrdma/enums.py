"""libibverbs' enums (verbs.h) and librdmacm's (rdma_cma.h), the one place
every layer takes them from.

Values are the ABI values of rdma-core's <infiniband/verbs.h>, so a work
completion or a QP attribute mask means the same number here as in C, and
``softrdma.pyverbs.enums`` can re-export them unchanged.
"""

from enum import IntEnum, IntFlag


class ibv_qp_type(IntEnum):
    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4
    IBV_QPT_RAW_PACKET = 8
    IBV_QPT_XRC_SEND = 9
    IBV_QPT_XRC_RECV = 10
    IBV_QPT_DRIVER = 0xff


class ibv_qp_state(IntEnum):
    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6
    IBV_QPS_UNKNOWN = 7


class ibv_qp_attr_mask(IntFlag):
    IBV_QP_STATE = 1 << 0
    IBV_QP_CUR_STATE = 1 << 1
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2
    IBV_QP_ACCESS_FLAGS = 1 << 3
    IBV_QP_PKEY_INDEX = 1 << 4
    IBV_QP_PORT = 1 << 5
    IBV_QP_QKEY = 1 << 6
    IBV_QP_AV = 1 << 7
    IBV_QP_PATH_MTU = 1 << 8
    IBV_QP_TIMEOUT = 1 << 9
    IBV_QP_RETRY_CNT = 1 << 10
    IBV_QP_RNR_RETRY = 1 << 11
    IBV_QP_RQ_PSN = 1 << 12
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
    IBV_QP_ALT_PATH = 1 << 14
    IBV_QP_MIN_RNR_TIMER = 1 << 15
    IBV_QP_SQ_PSN = 1 << 16
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
    IBV_QP_PATH_MIG_STATE = 1 << 18
    IBV_QP_CAP = 1 << 19
    IBV_QP_DEST_QPN = 1 << 20
    IBV_QP_RATE_LIMIT = 1 << 25


class ibv_mtu(IntEnum):
    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


def mtu_to_bytes(mtu: int) -> int:
    """ibv_mtu enum -> bytes (IBV_MTU_1024 -> 1024)."""
    return 128 << mtu


def bytes_to_mtu(nbytes: int) -> ibv_mtu:
    """Largest ibv_mtu not above ``nbytes`` (4200 -> IBV_MTU_4096)."""
    for m in reversed(ibv_mtu):
        if mtu_to_bytes(m) <= nbytes:
            return m
    raise ValueError(f"MTU {nbytes} below 256")


class ibv_access_flags(IntFlag):
    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 1 << 1
    IBV_ACCESS_REMOTE_READ = 1 << 2
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3
    IBV_ACCESS_MW_BIND = 1 << 4
    IBV_ACCESS_ZERO_BASED = 1 << 5
    IBV_ACCESS_ON_DEMAND = 1 << 6
    IBV_ACCESS_HUGETLB = 1 << 7
    IBV_ACCESS_FLUSH_GLOBAL = 1 << 8
    IBV_ACCESS_FLUSH_PERSISTENT = 1 << 9
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20


class ibv_mw_type(IntEnum):
    IBV_MW_TYPE_1 = 1
    IBV_MW_TYPE_2 = 2


class ibv_wr_opcode(IntEnum):
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_LOCAL_INV = 7
    IBV_WR_BIND_MW = 8
    IBV_WR_SEND_WITH_INV = 9
    IBV_WR_TSO = 10
    IBV_WR_DRIVER1 = 11
    IBV_WR_FLUSH = 14
    IBV_WR_ATOMIC_WRITE = 15


# ibv_wr_flush's type and level (IBA 1.5 FETH: PLT and SEL)
class ibv_placement_type(IntFlag):
    IBV_FLUSH_GLOBAL = 1 << 0
    IBV_FLUSH_PERSISTENT = 1 << 1


class ibv_selectivity_level(IntEnum):
    IBV_FLUSH_RANGE = 0
    IBV_FLUSH_MR = 1


class ibv_send_flags(IntFlag):
    IBV_SEND_FENCE = 1
    IBV_SEND_SIGNALED = 1 << 1
    IBV_SEND_SOLICITED = 1 << 2
    IBV_SEND_INLINE = 1 << 3
    IBV_SEND_IP_CSUM = 1 << 4


class ibv_wc_status(IntEnum):
    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_EEC_OP_ERR = 3
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_MW_BIND_ERR = 6
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_LOC_RDD_VIOL_ERR = 14
    IBV_WC_REM_INV_RD_REQ_ERR = 15
    IBV_WC_REM_ABORT_ERR = 16
    IBV_WC_INV_EECN_ERR = 17
    IBV_WC_INV_EEC_STATE_ERR = 18
    IBV_WC_FATAL_ERR = 19
    IBV_WC_RESP_TIMEOUT_ERR = 20
    IBV_WC_GENERAL_ERR = 21
    IBV_WC_TM_ERR = 22
    IBV_WC_TM_RNDV_INCOMPLETE = 23


# ibv_wc_status_str() texts, for tools that print a status.
WC_STATUS_STR = {
    0: "success", 1: "local length error", 2: "local QP operation error",
    3: "local EE context operation error", 4: "local protection error",
    5: "Work Request Flushed Error", 6: "memory management operation error",
    7: "bad response error", 8: "local access error",
    9: "remote invalid request error", 10: "remote access error",
    11: "remote operation error", 12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded", 14: "local RDD violation error",
    15: "remote invalid RD request", 16: "aborted error",
    17: "invalid EE context number", 18: "invalid EE context state",
    19: "fatal error", 20: "response timeout error", 21: "general error",
    22: "TM error", 23: "TM software rendezvous",
}


class ibv_wc_opcode(IntEnum):
    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_COMP_SWAP = 3
    IBV_WC_FETCH_ADD = 4
    IBV_WC_BIND_MW = 5
    IBV_WC_LOCAL_INV = 6
    IBV_WC_TSO = 7
    IBV_WC_FLUSH = 8
    IBV_WC_ATOMIC_WRITE = 9
    IBV_WC_RECV = 1 << 7
    IBV_WC_RECV_RDMA_WITH_IMM = (1 << 7) + 1
    IBV_WC_TM_ADD = (1 << 7) + 2
    IBV_WC_TM_DEL = (1 << 7) + 3
    IBV_WC_TM_SYNC = (1 << 7) + 4
    IBV_WC_TM_RECV = (1 << 7) + 5
    IBV_WC_TM_NO_TAG = (1 << 7) + 6
    IBV_WC_DRIVER2 = (1 << 7) + 8
    IBV_WC_DRIVER3 = (1 << 7) + 9


class ibv_wc_flags(IntFlag):
    IBV_WC_GRH = 1
    IBV_WC_WITH_IMM = 1 << 1
    IBV_WC_IP_CSUM_OK = 1 << 2
    IBV_WC_WITH_INV = 1 << 3
    IBV_WC_TM_SYNC_REQ = 1 << 4
    IBV_WC_TM_MATCH = 1 << 5
    IBV_WC_TM_DATA_VALID = 1 << 6


class ibv_create_cq_wc_flags(IntFlag):
    """ibv_cq_init_attr_ex.wc_flags: the fields an extended CQ reports."""
    IBV_WC_EX_WITH_BYTE_LEN = 1 << 0
    IBV_WC_EX_WITH_IMM = 1 << 1
    IBV_WC_EX_WITH_QP_NUM = 1 << 2
    IBV_WC_EX_WITH_SRC_QP = 1 << 3
    IBV_WC_EX_WITH_SLID = 1 << 4
    IBV_WC_EX_WITH_SL = 1 << 5
    IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7
    IBV_WC_EX_WITH_CVLAN = 1 << 8
    IBV_WC_EX_WITH_FLOW_TAG = 1 << 9
    IBV_WC_EX_WITH_TM_INFO = 1 << 10
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11
    # verbs.h's anonymous enum: what every provider reports
    IBV_WC_STANDARD_FLAGS = (1 << 7) - 1


class ibv_cq_init_attr_mask(IntFlag):
    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1


class ibv_create_cq_attr_flags(IntFlag):
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1


class ibv_qp_init_attr_mask(IntFlag):
    IBV_QP_INIT_ATTR_PD = 1 << 0
    IBV_QP_INIT_ATTR_XRCD = 1 << 1
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3
    IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4
    IBV_QP_INIT_ATTR_RX_HASH = 1 << 5
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6


class ibv_qp_create_flags(IntFlag):
    IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1
    IBV_QP_CREATE_SCATTER_FCS = 1 << 8
    IBV_QP_CREATE_CVLAN_STRIPPING = 1 << 9
    IBV_QP_CREATE_SOURCE_QPN = 1 << 10
    IBV_QP_CREATE_PCI_WRITE_END_PADDING = 1 << 11


class ibv_qp_create_send_ops_flags(IntFlag):
    """ibv_qp_init_attr_ex.send_ops_flags: the ibv_wr_* builders a QP gets."""
    IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1
    IBV_QP_EX_WITH_SEND = 1 << 2
    IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3
    IBV_QP_EX_WITH_RDMA_READ = 1 << 4
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6
    IBV_QP_EX_WITH_LOCAL_INV = 1 << 7
    IBV_QP_EX_WITH_BIND_MW = 1 << 8
    IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9
    IBV_QP_EX_WITH_TSO = 1 << 10
    IBV_QP_EX_WITH_FLUSH = 1 << 11
    IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12


class ibv_odp_general_caps(IntFlag):
    IBV_ODP_SUPPORT = 1 << 0
    IBV_ODP_SUPPORT_IMPLICIT = 1 << 1


class ibv_odp_transport_cap_bits(IntFlag):
    IBV_ODP_SUPPORT_SEND = 1 << 0
    IBV_ODP_SUPPORT_RECV = 1 << 1
    IBV_ODP_SUPPORT_WRITE = 1 << 2
    IBV_ODP_SUPPORT_READ = 1 << 3
    IBV_ODP_SUPPORT_ATOMIC = 1 << 4
    IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5
    IBV_ODP_SUPPORT_FLUSH = 1 << 6
    IBV_ODP_SUPPORT_ATOMIC_WRITE = 1 << 7


class ibv_event_type(IntEnum):
    IBV_EVENT_CQ_ERR = 0
    IBV_EVENT_QP_FATAL = 1
    IBV_EVENT_QP_REQ_ERR = 2
    IBV_EVENT_QP_ACCESS_ERR = 3
    IBV_EVENT_COMM_EST = 4
    IBV_EVENT_SQ_DRAINED = 5
    IBV_EVENT_PATH_MIG = 6
    IBV_EVENT_PATH_MIG_ERR = 7
    IBV_EVENT_DEVICE_FATAL = 8
    IBV_EVENT_PORT_ACTIVE = 9
    IBV_EVENT_PORT_ERR = 10
    IBV_EVENT_LID_CHANGE = 11
    IBV_EVENT_PKEY_CHANGE = 12
    IBV_EVENT_SM_CHANGE = 13
    IBV_EVENT_SRQ_ERR = 14
    IBV_EVENT_SRQ_LIMIT_REACHED = 15
    IBV_EVENT_QP_LAST_WQE_REACHED = 16
    IBV_EVENT_CLIENT_REREGISTER = 17
    IBV_EVENT_GID_CHANGE = 18
    IBV_EVENT_WQ_FATAL = 19
    IBV_EVENT_DEVICE_SPEED_CHANGE = 20


class ibv_srq_attr_mask(IntFlag):
    IBV_SRQ_MAX_WR = 1 << 0
    IBV_SRQ_LIMIT = 1 << 1


class ibv_gid_type(IntEnum):
    IBV_GID_TYPE_IB = 0
    IBV_GID_TYPE_ROCE_V1 = 1
    IBV_GID_TYPE_ROCE_V2 = 2


class ibv_port_state(IntEnum):
    IBV_PORT_NOP = 0
    IBV_PORT_DOWN = 1
    IBV_PORT_INIT = 2
    IBV_PORT_ARMED = 3
    IBV_PORT_ACTIVE = 4
    IBV_PORT_ACTIVE_DEFER = 5


class ibv_node_type(IntEnum):
    IBV_NODE_UNKNOWN = -1
    IBV_NODE_CA = 1
    IBV_NODE_SWITCH = 2
    IBV_NODE_ROUTER = 3
    IBV_NODE_RNIC = 4
    IBV_NODE_USNIC = 5
    IBV_NODE_USNIC_UDP = 6
    IBV_NODE_UNSPECIFIED = 7


class ibv_transport_type(IntEnum):
    IBV_TRANSPORT_UNKNOWN = -1
    IBV_TRANSPORT_IB = 0
    IBV_TRANSPORT_IWARP = 1
    IBV_TRANSPORT_USNIC = 2
    IBV_TRANSPORT_USNIC_UDP = 3
    IBV_TRANSPORT_UNSPECIFIED = 4


class ibv_link_layer(IntEnum):
    IBV_LINK_LAYER_UNSPECIFIED = 0
    IBV_LINK_LAYER_INFINIBAND = 1
    IBV_LINK_LAYER_ETHERNET = 2


class ibv_atomic_cap(IntEnum):
    IBV_ATOMIC_NONE = 0
    IBV_ATOMIC_HCA = 1
    IBV_ATOMIC_GLOB = 2


class ibv_fork_status(IntEnum):
    """enum ibv_fork_status (verbs.h): what ibv_is_fork_initialized() says."""
    IBV_FORK_DISABLED = 0
    IBV_FORK_ENABLED = 1
    IBV_FORK_UNNEEDED = 2


class ibv_rereg_mr_err_code(IntEnum):
    """enum ibv_rereg_mr_err_code (verbs.h): ibv_rereg_mr's negative returns."""
    IBV_REREG_MR_ERR_INPUT = -1
    IBV_REREG_MR_ERR_DONT_FORK_NEW = -2
    IBV_REREG_MR_ERR_DO_FORK_OLD = -3
    IBV_REREG_MR_ERR_CMD = -4
    IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW = -5


class ibv_rereg_mr_flags(IntEnum):
    """enum ibv_rereg_mr_flags (verbs.h): what ibv_rereg_mr changes."""
    IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0
    IBV_REREG_MR_CHANGE_PD = 1 << 1
    IBV_REREG_MR_CHANGE_ACCESS = 1 << 2
    IBV_REREG_MR_KEEP_VALID = 1 << 3
    IBV_REREG_MR_FLAGS_SUPPORTED = (1 << 4) - 1        # ((IBV_REREG_MR_KEEP_VALID << 1) - 1)


class rdma_cm_event_type(IntEnum):
    """enum rdma_cm_event_type (rdma/rdma_cma.h)."""

    RDMA_CM_EVENT_ADDR_RESOLVED = 0
    RDMA_CM_EVENT_ADDR_ERROR = 1
    RDMA_CM_EVENT_ROUTE_RESOLVED = 2
    RDMA_CM_EVENT_ROUTE_ERROR = 3
    RDMA_CM_EVENT_CONNECT_REQUEST = 4
    RDMA_CM_EVENT_CONNECT_RESPONSE = 5
    RDMA_CM_EVENT_CONNECT_ERROR = 6
    RDMA_CM_EVENT_UNREACHABLE = 7
    RDMA_CM_EVENT_REJECTED = 8
    RDMA_CM_EVENT_ESTABLISHED = 9
    RDMA_CM_EVENT_DISCONNECTED = 10
    RDMA_CM_EVENT_DEVICE_REMOVAL = 11
    RDMA_CM_EVENT_MULTICAST_JOIN = 12
    RDMA_CM_EVENT_MULTICAST_ERROR = 13
    RDMA_CM_EVENT_ADDR_CHANGE = 14
    RDMA_CM_EVENT_TIMEWAIT_EXIT = 15
    RDMA_CM_EVENT_ADDRINFO_RESOLVED = 16
    RDMA_CM_EVENT_ADDRINFO_ERROR = 17


# verbs.h's enums for XRC, WQs/RSS, flow steering, tag matching, SRQ
# types, MR rereg, device/port capabilities and parent domains (values
# as libibverbs 44 defines them; pyverbs exports every one).
class ibv_port_cap_flags(IntFlag):
    IBV_PORT_SM = 0x2
    IBV_PORT_NOTICE_SUP = 0x4
    IBV_PORT_TRAP_SUP = 0x8
    IBV_PORT_OPT_IPD_SUP = 0x10
    IBV_PORT_AUTO_MIGR_SUP = 0x20
    IBV_PORT_SL_MAP_SUP = 0x40
    IBV_PORT_MKEY_NVRAM = 0x80
    IBV_PORT_PKEY_NVRAM = 0x100
    IBV_PORT_LED_INFO_SUP = 0x200
    IBV_PORT_SYS_IMAGE_GUID_SUP = 0x800
    IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP = 0x1000
    IBV_PORT_EXTENDED_SPEEDS_SUP = 0x4000
    IBV_PORT_CAP_MASK2_SUP = 0x8000
    IBV_PORT_CM_SUP = 0x10000
    IBV_PORT_SNMP_TUNNEL_SUP = 0x20000
    IBV_PORT_REINIT_SUP = 0x40000
    IBV_PORT_DEVICE_MGMT_SUP = 0x80000
    IBV_PORT_VENDOR_CLASS_SUP = 0x100000
    IBV_PORT_DR_NOTICE_SUP = 0x200000
    IBV_PORT_CAP_MASK_NOTICE_SUP = 0x400000
    IBV_PORT_BOOT_MGMT_SUP = 0x800000
    IBV_PORT_LINK_LATENCY_SUP = 0x1000000
    IBV_PORT_CLIENT_REG_SUP = 0x2000000
    IBV_PORT_IP_BASED_GIDS = 0x4000000


class ibv_port_cap_flags2(IntFlag):
    IBV_PORT_SET_NODE_DESC_SUP = 0x1
    IBV_PORT_INFO_EXT_SUP = 0x2
    IBV_PORT_VIRT_SUP = 0x4
    IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP = 0x8
    IBV_PORT_LINK_WIDTH_2X_SUP = 0x10
    IBV_PORT_LINK_SPEED_HDR_SUP = 0x20
    IBV_PORT_LINK_SPEED_NDR_SUP = 0x400


class ibv_ops_wr_opcode(IntEnum):
    IBV_WR_TAG_ADD = 0
    IBV_WR_TAG_DEL = 1
    IBV_WR_TAG_SYNC = 2


class ibv_ops_flags(IntFlag):
    IBV_OPS_SIGNALED = 1
    IBV_OPS_TM_SYNC = 2


class ibv_tm_cap_flags(IntFlag):
    IBV_TM_CAP_RC = 1


class ibv_srq_type(IntEnum):
    IBV_SRQT_BASIC = 0
    IBV_SRQT_XRC = 1
    IBV_SRQT_TM = 2


class ibv_srq_init_attr_mask(IntFlag):
    IBV_SRQ_INIT_ATTR_TYPE = 0x1
    IBV_SRQ_INIT_ATTR_PD = 0x2
    IBV_SRQ_INIT_ATTR_XRCD = 0x4
    IBV_SRQ_INIT_ATTR_CQ = 0x8
    IBV_SRQ_INIT_ATTR_TM = 0x10


class ibv_mig_state(IntEnum):
    IBV_MIG_MIGRATED = 0
    IBV_MIG_REARM = 1
    IBV_MIG_ARMED = 2


class ibv_wq_type(IntEnum):
    IBV_WQT_RQ = 0


class ibv_wq_init_attr_mask(IntFlag):
    IBV_WQ_INIT_ATTR_FLAGS = 1


class ibv_wq_flags(IntFlag):
    IBV_WQ_FLAGS_CVLAN_STRIPPING = 0x1
    IBV_WQ_FLAGS_SCATTER_FCS = 0x2
    IBV_WQ_FLAGS_DELAY_DROP = 0x4
    IBV_WQ_FLAGS_PCI_WRITE_END_PADDING = 0x8


class ibv_wq_state(IntEnum):
    IBV_WQS_RESET = 0
    IBV_WQS_RDY = 1
    IBV_WQS_ERR = 2
    IBV_WQS_UNKNOWN = 3


class ibv_wq_attr_mask(IntFlag):
    IBV_WQ_ATTR_STATE = 0x1
    IBV_WQ_ATTR_CURR_STATE = 0x2
    IBV_WQ_ATTR_FLAGS = 0x4


class ibv_rx_hash_function_flags(IntFlag):
    IBV_RX_HASH_FUNC_TOEPLITZ = 1


class ibv_rx_hash_fields(IntFlag):
    IBV_RX_HASH_SRC_IPV4 = 0x1
    IBV_RX_HASH_DST_IPV4 = 0x2
    IBV_RX_HASH_SRC_IPV6 = 0x4
    IBV_RX_HASH_DST_IPV6 = 0x8
    IBV_RX_HASH_SRC_PORT_TCP = 0x10
    IBV_RX_HASH_DST_PORT_TCP = 0x20
    IBV_RX_HASH_SRC_PORT_UDP = 0x40
    IBV_RX_HASH_DST_PORT_UDP = 0x80


class ibv_flow_flags(IntFlag):
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP = 0x2
    IBV_FLOW_ATTR_FLAGS_EGRESS = 0x4


class ibv_flow_attr_type(IntEnum):
    IBV_FLOW_ATTR_NORMAL = 0
    IBV_FLOW_ATTR_ALL_DEFAULT = 1
    IBV_FLOW_ATTR_MC_DEFAULT = 2
    IBV_FLOW_ATTR_SNIFFER = 3


class ibv_flow_spec_type(IntEnum):
    IBV_FLOW_SPEC_ETH = 32
    IBV_FLOW_SPEC_IPV4 = 48
    IBV_FLOW_SPEC_IPV6 = 49
    IBV_FLOW_SPEC_IPV4_EXT = 50
    IBV_FLOW_SPEC_ESP = 52
    IBV_FLOW_SPEC_TCP = 64
    IBV_FLOW_SPEC_UDP = 65
    IBV_FLOW_SPEC_VXLAN_TUNNEL = 80
    IBV_FLOW_SPEC_GRE = 81
    IBV_FLOW_SPEC_MPLS = 96
    IBV_FLOW_SPEC_INNER = 256
    IBV_FLOW_SPEC_ACTION_TAG = 4096
    IBV_FLOW_SPEC_ACTION_DROP = 4097
    IBV_FLOW_SPEC_ACTION_HANDLE = 4098
    IBV_FLOW_SPEC_ACTION_COUNT = 4099


class ibv_counter_description(IntEnum):
    IBV_COUNTER_PACKETS = 0
    IBV_COUNTER_BYTES = 1


class ibv_read_counters_flags(IntFlag):
    IBV_READ_COUNTERS_ATTR_PREFER_CACHED = 1


class ibv_device_cap_flags(IntFlag):
    IBV_DEVICE_RESIZE_MAX_WR = 0x1
    IBV_DEVICE_BAD_PKEY_CNTR = 0x2
    IBV_DEVICE_BAD_QKEY_CNTR = 0x4
    IBV_DEVICE_RAW_MULTI = 0x8
    IBV_DEVICE_AUTO_PATH_MIG = 0x10
    IBV_DEVICE_CHANGE_PHY_PORT = 0x20
    IBV_DEVICE_UD_AV_PORT_ENFORCE = 0x40
    IBV_DEVICE_CURR_QP_STATE_MOD = 0x80
    IBV_DEVICE_SHUTDOWN_PORT = 0x100
    IBV_DEVICE_INIT_TYPE = 0x200
    IBV_DEVICE_PORT_ACTIVE_EVENT = 0x400
    IBV_DEVICE_SYS_IMAGE_GUID = 0x800
    IBV_DEVICE_RC_RNR_NAK_GEN = 0x1000
    IBV_DEVICE_SRQ_RESIZE = 0x2000
    IBV_DEVICE_N_NOTIFY_CQ = 0x4000
    IBV_DEVICE_MEM_WINDOW = 0x20000
    IBV_DEVICE_UD_IP_CSUM = 0x40000
    IBV_DEVICE_XRC = 0x100000
    IBV_DEVICE_MEM_MGT_EXTENSIONS = 0x200000
    IBV_DEVICE_MEM_WINDOW_TYPE_2A = 0x800000
    IBV_DEVICE_MEM_WINDOW_TYPE_2B = 0x1000000
    IBV_DEVICE_RC_IP_CSUM = 0x2000000
    IBV_DEVICE_RAW_IP_CSUM = 0x4000000
    IBV_DEVICE_MANAGED_FLOW_STEERING = 0x20000000


class ibv_raw_packet_caps(IntFlag):
    IBV_RAW_PACKET_CAP_CVLAN_STRIPPING = 0x1
    IBV_RAW_PACKET_CAP_SCATTER_FCS = 0x2
    IBV_RAW_PACKET_CAP_IP_CSUM = 0x4
    IBV_RAW_PACKET_CAP_DELAY_DROP = 0x8


class ibv_xrcd_init_attr_mask(IntFlag):
    IBV_XRCD_INIT_ATTR_FD = 0x1
    IBV_XRCD_INIT_ATTR_OFLAGS = 0x2
    IBV_XRCD_INIT_ATTR_RESERVED = 0x4


class ibv_values_mask(IntFlag):
    IBV_VALUES_MASK_RAW_CLOCK = 1


class ibv_query_qp_data_in_order_flags(IntFlag):
    IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS = 1 << 0
    IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY = 1 << 1


class ibv_query_qp_data_in_order_caps(IntFlag):
    IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG = 1 << 0
    IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES = 1 << 1


class ibv_parent_domain_init_attr_mask(IntFlag):
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 2
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC = 4


# rdma-core 64: ibv_reg_mr_ex's and ibv_alloc_dmah's
class ibv_mr_init_attr_mask(IntFlag):
    IBV_REG_MR_MASK_IOVA = 1 << 0
    IBV_REG_MR_MASK_ADDR = 1 << 1
    IBV_REG_MR_MASK_FD = 1 << 2
    IBV_REG_MR_MASK_FD_OFFSET = 1 << 3
    IBV_REG_MR_MASK_DMAH = 1 << 4
    IBV_REG_MR_MASK_BUF = 1 << 5


class ibv_tph_mem_type(IntEnum):
    IBV_TPH_MEM_TYPE_VM = 0
    IBV_TPH_MEM_TYPE_PM = 1


class ibv_dmah_init_attr_mask(IntFlag):
    IBV_DMAH_INIT_ATTR_MASK_CPU_ID = 1 << 0
    IBV_DMAH_INIT_ATTR_MASK_PH = 1 << 1
    IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE = 1 << 2


class ibv_gid_type_sysfs(IntEnum):
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0
    IBV_GID_TYPE_SYSFS_ROCE_V2 = 1


class ibv_tmh_op(IntEnum):
    IBV_TMH_NO_TAG = 0
    IBV_TMH_RNDV = 1
    IBV_TMH_FIN = 2
    IBV_TMH_EAGER = 3


# pyverbs' underscore aliases (enums.pyx) for values verbs.h defines as
# 64-bit constants, pointers or anonymous enums
_IBV_DEVICE_RAW_SCATTER_FCS = 1 << 34
_IBV_DEVICE_PCI_WRITE_END_PADDING = 1 << 36
_IBV_DEVICE_CC_DMA_BOUNCE = 1 << 41
# the kernel's IB_UVERBS_DEVICE_FLUSH_GLOBAL/_FLUSH_PERSISTENT/_ATOMIC_WRITE
# (ib_user_ioctl_verbs.h): bits of device_cap_flags_ex that libibverbs and
# pyverbs leave unnamed; rxe sets them
IB_UVERBS_DEVICE_FLUSH_GLOBAL = 1 << 38
IB_UVERBS_DEVICE_FLUSH_PERSISTENT = 1 << 39
IB_UVERBS_DEVICE_ATOMIC_WRITE = 1 << 40
#: (size_t)IBV_ALLOCATOR_USE_DEFAULT, ((void *)-1): a parent domain allocator's
#: "use the default allocator" answer
_IBV_ALLOCATOR_USE_DEFAULT = (1 << 64) - 1
_IBV_ADVISE_MR_ADVICE_PREFETCH = 0
_IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1
_IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2
_IBV_ADVISE_MR_FLAG_FLUSH = 1 << 0
IBV_QPF_GRH_REQUIRED = 1 << 0


#: rdma_event_str()'s names (librdmacm cma.c)
RDMA_CM_EVENT_STR = {e.value: e.name for e in rdma_cm_event_type}

#: the Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY)
RDMA_UDP_QKEY = 0x01234567


def ints(enum_cls) -> type:
    """A plain class whose attributes are the enum's values as ints.

    Hot paths use it (``ST = ints(ibv_wc_status)``; ``ST.IBV_WC_SUCCESS``):
    the same names, but a plain class attribute costs a third of an enum
    member lookup and compares and indexes as a bare int."""
    return type(enum_cls.__name__, (), {k: int(v) for k, v in enum_cls.__members__.items()})


# Flatten every enum's members into this module's namespace, as pyverbs'
# enums module does (``from softrdma.enums import IBV_WC_SUCCESS``).
for _e in list(globals().values()):
    if isinstance(_e, type) and issubclass(_e, (IntEnum, IntFlag)) and _e.__name__.startswith(("ibv_", "rdma_")):
        globals().update(_e.__members__)
del _e
