"""pyverbs.librdmacm_enums: librdmacm's constants (rdma_cma.h, rdma_user_cm.h)."""

from ..enums import RDMA_UDP_QKEY, rdma_cm_event_type  # noqa: F401
from ..enums import *  # noqa: F401,F403  (the RDMA_CM_EVENT_* names, flat)

from enum import IntEnum, IntFlag

from ..wire.cma import PortSpace

# Plain ints, as pyverbs' cdef enums are.
RDMA_PS_IPOIB = int(PortSpace.IPOIB)
RDMA_PS_IB = int(PortSpace.IB)
RDMA_PS_TCP = int(PortSpace.TCP)
RDMA_PS_UDP = int(PortSpace.UDP)

# struct rdma_addrinfo's ai_flags
RAI_PASSIVE = 0x00000001
RAI_NUMERICHOST = 0x00000002
RAI_NOROUTE = 0x00000004
RAI_FAMILY = 0x00000008
RAI_SA = 0x00000010
RAI_DNS = 0x00000020

# rdma_set_option
RDMA_OPTION_ID = 0
RDMA_OPTION_IB = 1
RDMA_OPTION_ID_TOS = 0
RDMA_OPTION_ID_REUSEADDR = 1
RDMA_OPTION_ID_AFONLY = 2
RDMA_OPTION_ID_ACK_TIMEOUT = 3
RDMA_OPTION_IB_PATH = 1

# rdma_join_multicast_ex's join flags and comp mask
RDMA_MC_JOIN_FLAG_FULLMEMBER = 0
RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER = 1
RDMA_CM_JOIN_MC_ATTR_ADDRESS = 1
RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = 2

RDMA_CM_JOIN_MC_ATTR_RESERVED = 4
RDMA_MC_JOIN_FLAG_RESERVED = 2


class rdma_port_space(IntEnum):
    """enum rdma_port_space (rdma-core 64 names it)."""
    RDMA_PS_IPOIB = RDMA_PS_IPOIB
    RDMA_PS_TCP = RDMA_PS_TCP
    RDMA_PS_UDP = RDMA_PS_UDP
    RDMA_PS_IB = RDMA_PS_IB


class rdma_cm_join_mc_attr_mask(IntFlag):
    RDMA_CM_JOIN_MC_ATTR_ADDRESS = RDMA_CM_JOIN_MC_ATTR_ADDRESS
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS
    RDMA_CM_JOIN_MC_ATTR_RESERVED = RDMA_CM_JOIN_MC_ATTR_RESERVED


class rdma_cm_mc_join_flags(IntEnum):
    RDMA_MC_JOIN_FLAG_FULLMEMBER = RDMA_MC_JOIN_FLAG_FULLMEMBER
    RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
    RDMA_MC_JOIN_FLAG_RESERVED = RDMA_MC_JOIN_FLAG_RESERVED


RDMA_MAX_RESP_RES = 0xFF
RDMA_MAX_INIT_DEPTH = 0xFF
