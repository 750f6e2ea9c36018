"""Device limits the library reports without asking the daemon (they are
fixed, as rxe_param.h's are): ibv_query_device's multicast limits, which
the daemon's multicast groups (``device.mcast``) enforce."""

MAX_MCAST_GRP = 8192
MAX_MCAST_QP_ATTACH = 56
MAX_TOTAL_MCAST_QP_ATTACH = 0x70000

#: device memory (ibv_alloc_dm): the bytes of one device's pool, reported
#: as query_device_ex's max_dm_size (256 KiB, the size of mlx5's MEMIC)
MAX_DM_SIZE = 256 * 1024
#: ibv_memcpy_to/from_dm: offset and length are multiples of 4 (mlx5)
DM_ALIGNMENT = 4

#: tag matching (ibv_tm_caps): the device's limits for a TM SRQ and its
#: messages, mlx5's values; transport.tm enforces them
TM_MAX_RNDV_HDR_SIZE = 64          # TMH + RVH + user header of a rendezvous message
TM_MAX_NUM_TAGS = 1023             # entries of one SRQ's tag list
TM_MAX_OPS = 1024                  # outstanding list operations
TM_MAX_SGE = 1                     # SGEs of a tag entry
