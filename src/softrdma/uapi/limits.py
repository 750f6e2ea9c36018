"""Device limits the library reports without asking the daemon (they are
fixed, as rxe_param.h's are): ibv_query_device's multicast limits, which
the daemon's multicast groups (``device.mcast``) enforce."""

MAX_MCAST_GRP = 8192
MAX_MCAST_QP_ATTACH = 56
MAX_TOTAL_MCAST_QP_ATTACH = 0x70000
