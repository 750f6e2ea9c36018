"""pyverbs.wq: receive work queues, RSS indirection tables and the RX hash
configuration (pyverbs/wq.pyx).

The attribute classes are ibv_wq_init_attr, ibv_wq_attr,
ibv_rwq_ind_table_init_attr and ibv_rx_hash_conf, with pyverbs' checks.
softrdma's device has no WQs yet: ``WQ`` and ``RwqIndTable`` fail as
ibv_create_wq / ibv_create_rwq_ind_table do on rxe (EOPNOTSUPP)."""

from ..enums import IBV_WQT_RQ
from ..verbs.errors import PyverbsUserError
from ._unsupported import not_supported


class WQInitAttr:
    def __init__(self, wq_context=None, wq_pd=None, wq_cq=None, wq_type=IBV_WQT_RQ,
                 max_wr=100, max_sge=1, comp_mask=0, create_flags=0):
        self.wq_context = wq_context
        self.pd = wq_pd
        self.cq = wq_cq
        self.wq_type = wq_type
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.comp_mask = comp_mask
        self.create_flags = create_flags


class WQAttr:
    def __init__(self, attr_mask=0, wq_state=0, curr_wq_state=0, flags=0, flags_mask=0):
        self.attr_mask = attr_mask
        self.wq_state = wq_state
        self.curr_wq_state = curr_wq_state
        self.flags = flags
        self.flags_mask = flags_mask


class WQ:
    def __init__(self, ctx, attr):
        raise not_supported("Failed to create WQ")


class RwqIndTableInitAttr:
    def __init__(self, log_ind_tbl_size=5, wqs_list=None, comp_mask=0):
        wqs_list = list(wqs_list or [])
        if log_ind_tbl_size <= 0:
            raise PyverbsUserError('Invalid indirection table size. Log size must be > 0')
        if (1 << log_ind_tbl_size) < len(wqs_list):
            raise PyverbsUserError(f'Requested table size ({1 << log_ind_tbl_size}) is smaller '
                                   f'than the number of wqs ({len(wqs_list)})')
        self.log_ind_tbl_size = log_ind_tbl_size
        self.wqs_list = wqs_list
        self.comp_mask = comp_mask


class RwqIndTable:
    def __init__(self, ctx, attr):
        raise not_supported("Failed to create RwqIndTable")


class RxHashConf:
    """ibv_rx_hash_conf: the hash function, its key, and which header fields
    (IBV_RX_HASH_*) feed it."""

    def __init__(self, rx_hash_function=0, rx_hash_key_len=0, rx_hash_key=None, rx_hash_fields_mask=0):
        self.rx_hash_function = rx_hash_function
        self._key_len = 0
        self._key = b""
        if rx_hash_key:
            if rx_hash_key_len != len(rx_hash_key):
                raise PyverbsUserError('Length of rx_hash_key not equal to rx_hash_key_len')
            self.rx_hash_key_len = rx_hash_key_len
            self.rx_hash_key = rx_hash_key
        self.rx_hash_fields_mask = rx_hash_fields_mask

    @property
    def rx_hash_key_len(self):
        return self._key_len

    @rx_hash_key_len.setter
    def rx_hash_key_len(self, val):
        if val <= 0:
            raise PyverbsUserError('Invalid rx_hash_key_len. Must be greater then 0')
        self._key_len = val

    @property
    def rx_hash_key(self):
        return list(self._key)

    @rx_hash_key.setter
    def rx_hash_key(self, vals):
        self._key = bytes(vals)
        self._key_len = len(self._key)
