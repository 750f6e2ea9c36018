"""What the library and the daemon share about raw packet QPs, WQs and RSS:
the device's fixed RSS and WQ limits (query_device_ex's rss_caps and
max_wq_type_rq, which the daemon enforces) and the Toeplitz key length."""

from ..enums import IBV_QPT_RAW_PACKET, IBV_RX_HASH_FUNC_TOEPLITZ

#: rss_caps.supported_qpts: RSS on raw packet QPs only (a bit per QP type)
RSS_SUPPORTED_QPTS = 1 << int(IBV_QPT_RAW_PACKET)
#: rss_caps.rx_hash_function
RX_HASH_FUNCTIONS = int(IBV_RX_HASH_FUNC_TOEPLITZ)
#: rss_caps.max_rwq_indirection_tables, per device
MAX_RWQ_IND_TABLES = 1024
#: rss_caps.max_rwq_indirection_table_size (entries; a table has 2^log of them)
MAX_RWQ_IND_TABLE_SIZE = 1 << 12
#: max_wq_type_rq: receive WQs per device
MAX_WQ_TYPE_RQ = 1 << 14
#: the Toeplitz key's length (mlx5's, and the RSS specification's 40 bytes)
RSS_KEY_LEN = 40
