"""The binary ABI between the verbs library and the daemon: WQE and CQE slots,
and ``WC`` (ibv_wc), the completion a CQE carries.

Like rdma-core's provider ABI headers, this is the one definition both
sides compile against.  All little-endian, fixed offsets.  The daemon's
decoding of a WQE slot into the transport's work request is
``device.wqe``; everything else about the slots is here.

Send WQE (``SEND_WQE_HDR``, 64 bytes, then SGEs or inline data)::

     0 u64 wr_id           8 u8 opcode (ibv_wr_opcode)   9 u8 num_sge
    10 u16 send_flags     12 u32 imm_data / invalidate_rkey (wire value)
    16 u64 remote_addr    24 u32 rkey                     28 u32 inline_len
    32 u64 compare_add    40 u64 swap
    48 u32 ah_handle      52 u32 remote_qpn               56 u32 remote_qkey
    60 u32 reserved
  then num_sge x SGE (u64 addr, u32 length, u32 lkey), or inline_len bytes.
  IBV_WR_BIND_MW overlays the bind on the same fields, as rxe's ``wr.mw``
  union does (``transport.mw.bind_wqe``): imm_data = the window's current
  rkey, rkey = its new rkey, remote_addr = the window's address,
  compare_add = its length, swap = mw_access_flags, remote_qkey = the MR's
  lkey; no SGEs.  IBV_WR_LOCAL_INV carries the key in imm_data.  An XRC
  send carries its remote SRQ number (qp_type.xrc.remote_srqn) in remote_qpn.
  IBV_WR_ATOMIC_WRITE carries its 8 bytes in compare_add (read
  little-endian, so its bytes are the ones given); IBV_WR_FLUSH its length
  in compare_add and swap = placement type | selectivity level << 8; no SGEs.

``encode_send_wqe`` writes a whole send WQE (post_send, and the ibv_wr_*
builders); ``set_send_wqe_sges``/``_inline``/``_ud`` rewrite the parts the
ibv_wr_* setters give afterwards.

Receive WQE (``RECV_WQE_HDR``, 16 bytes): u64 wr_id, u32 num_sge, u32 0,
then SGEs.

CQE (``CQE``, 64 bytes; byte 63 is the owner bit, written last)::

     0 u64 wr_id           8 u32 byte_len    12 u32 imm_data / invalidated rkey
    16 u32 qp_num         20 u32 src_qp      24 u32 vendor_err
    28 u16 pkey_index     30 u16 slid        32 u8 status     33 u8 opcode
    34 u16 wc_flags       36 u8 sl           37 u8 dlid_path_bits
    38 u8 solicited       39 reserved
    40 u64 completion timestamp             48 u64 tm tag   56 u32 tm priv
    60..62 reserved       63 u8 owner

Bytes 40..59 (``CQE_EX``) are written only into the CQs whose wc_flags ask
for a completion timestamp or tag-matching info (``write_cqe_ex``, through
``uapi.queues.ExtCompletionQueueProducer``); a plain CQ's producer never
touches them, so the normal completion path costs what it did.  The
timestamp is taken by the daemon as it writes the CQE: the free-running
counter of ``uapi.clock`` (hca_core_clock ticks) if the CQ asked for
IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, else the wall clock in ns
(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK alone); a CQ that asked for
both gets the counter, and the library converts it to the wall clock as
mlx5's library converts its device clock.  The tm words are ibv_wc_tm_info
(the matched entry's tag, the TMH's app_ctx), 0 on other completions.
"""

from __future__ import annotations

import struct

from ..enums import (
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, IBV_WC_EX_WITH_TM_INFO,
    IBV_WC_STANDARD_FLAGS, ibv_send_flags, ibv_wc_opcode, ibv_wc_status,
)


SEND_WQE_HDR = struct.Struct("<QBBHIQIIQQIIII")
RECV_WQE_HDR = struct.Struct("<QII")
SGE = struct.Struct("<QII")
CQE = struct.Struct("<QIIIIIHHBBHBBB")
#: the CQE struct's values in order, for readers that unpack it themselves
#: (the extended CQ reads one field at a time from the unpacked tuple)
CQE_FIELDS = ("wr_id", "byte_len", "imm_data", "qp_num", "src_qp", "vendor_err", "pkey_index", "slid",
              "status", "opcode", "wc_flags", "sl", "dlid_path_bits", "solicited")
CQE_BYTES = 64
CQE_OWNER = 63
#: the extended words: completion timestamp, tm tag, tm priv (ibv_wc_tm_info)
CQE_EX = struct.Struct("<QQI")
CQE_EX_AT = 40
#: the CQE and its extended words in one pack (``write_cqe_ex``)
_CQE_WITH_EX = struct.Struct(CQE.format + "x" + CQE_EX.format.lstrip("<"))
WC_EX_TIMESTAMP = int(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
WC_EX_WALLCLOCK = int(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
WC_EX_TM_INFO = int(IBV_WC_EX_WITH_TM_INFO)
#: the ibv_create_cq_wc_flags a CQ's CQEs can carry: rxe's standard fields,
#: both completion timestamps and tag-matching info (not CVLAN, FLOW_TAG)
SUPPORTED_WC_FLAGS = int(IBV_WC_STANDARD_FLAGS) | WC_EX_TIMESTAMP | WC_EX_WALLCLOCK | WC_EX_TM_INFO
#: the wc_flags whose CQs get the extended words (``write_cqe_ex``)
WC_EX_WORDS = WC_EX_TIMESTAMP | WC_EX_WALLCLOCK | WC_EX_TM_INFO
IBV_SEND_INLINE = int(ibv_send_flags.IBV_SEND_INLINE)      # a plain int: no IntFlag built per WQE
# send WQE fields the ibv_wr_* setters rewrite after the builder wrote the header
_NUM_SGE_AT, _FLAGS_AT, _INLINE_LEN_AT, _UD_AT = 9, 10, 28, 48
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_UD = struct.Struct("<III")                 # ah_handle, remote_qpn, remote_qkey

assert SEND_WQE_HDR.size == 64 and RECV_WQE_HDR.size == 16 and SGE.size == 16 and CQE.size <= CQE_EX_AT
assert CQE_EX_AT + CQE_EX.size <= CQE_OWNER and _CQE_WITH_EX.size == CQE_EX_AT + CQE_EX.size
assert len(CQE_FIELDS) == len(CQE.unpack(bytes(CQE.size)))


def send_slot_size(max_sge: int, max_inline: int) -> int:
    """Smallest power of two holding the header and max_sge SGEs or the inline data."""
    need = SEND_WQE_HDR.size + max(SGE.size * max(max_sge, 1), max_inline)
    n = 64
    while n < need:
        n <<= 1
    return n


def recv_slot_size(max_sge: int) -> int:
    need = RECV_WQE_HDR.size + SGE.size * max(max_sge, 1)
    n = 32
    while n < need:
        n <<= 1
    return n


def encode_send_wqe(slot, wr_id: int, opcode: int, send_flags: int, sg_list=(), *, inline: bytes | None = None,
                    imm_data: int = 0, remote_addr: int = 0, rkey: int = 0, compare_add: int = 0,
                    swap: int = 0, ah_handle: int = 0, remote_qpn: int = 0, remote_qkey: int = 0) -> None:
    """Write one send WQE into ``slot`` (a writable memoryview)."""
    if inline is not None:
        n = len(inline)
        if SEND_WQE_HDR.size + n > len(slot):
            raise ValueError("inline data does not fit the WQE slot")
        SEND_WQE_HDR.pack_into(slot, 0, wr_id, opcode, 0, send_flags | IBV_SEND_INLINE, imm_data, remote_addr,
                               rkey, n, compare_add, swap, ah_handle, remote_qpn, remote_qkey, 0)
        slot[64:64 + n] = inline
        return
    nsge = len(sg_list)
    if SEND_WQE_HDR.size + SGE.size * nsge > len(slot):
        raise ValueError("too many SGEs for the WQE slot")
    SEND_WQE_HDR.pack_into(slot, 0, wr_id, opcode, nsge, send_flags & ~IBV_SEND_INLINE, imm_data, remote_addr,
                           rkey, 0, compare_add, swap, ah_handle, remote_qpn, remote_qkey, 0)
    off = 64
    for addr, length, lkey in sg_list:
        SGE.pack_into(slot, off, addr, length, lkey)
        off += 16


def set_send_wqe_sges(slot, sg_list) -> None:
    """Give a WQE that ``encode_send_wqe`` wrote these SGEs instead of its
    data (ibv_wr_set_sge / ibv_wr_set_sge_list)."""
    nsge = len(sg_list)
    if SEND_WQE_HDR.size + SGE.size * nsge > len(slot):
        raise ValueError("too many SGEs for the WQE slot")
    slot[_NUM_SGE_AT] = nsge
    (flags,) = _U16.unpack_from(slot, _FLAGS_AT)
    _U16.pack_into(slot, _FLAGS_AT, flags & ~IBV_SEND_INLINE)
    _U32.pack_into(slot, _INLINE_LEN_AT, 0)
    off = 64
    for addr, length, lkey in sg_list:
        SGE.pack_into(slot, off, addr, length, lkey)
        off += 16


def set_send_wqe_inline(slot, data: bytes) -> None:
    """Give a WQE that ``encode_send_wqe`` wrote this inline data instead of
    its data (ibv_wr_set_inline_data / ibv_wr_set_inline_data_list)."""
    n = len(data)
    if SEND_WQE_HDR.size + n > len(slot):
        raise ValueError("inline data does not fit the WQE slot")
    slot[_NUM_SGE_AT] = 0
    (flags,) = _U16.unpack_from(slot, _FLAGS_AT)
    _U16.pack_into(slot, _FLAGS_AT, flags | IBV_SEND_INLINE)
    _U32.pack_into(slot, _INLINE_LEN_AT, n)
    slot[64:64 + n] = data


def set_send_wqe_ud(slot, ah_handle: int, remote_qpn: int, remote_qkey: int) -> None:
    """The UD destination of a WQE that ``encode_send_wqe`` wrote (ibv_wr_set_ud_addr)."""
    _UD.pack_into(slot, _UD_AT, ah_handle, remote_qpn, remote_qkey)


def set_send_wqe_xrc(slot, remote_srqn: int) -> None:
    """The remote XRC SRQ of a WQE that ``encode_send_wqe`` wrote
    (ibv_wr_set_xrc_srqn): an XRC send carries it in ``remote_qpn``, which
    it has no other use for."""
    _U32.pack_into(slot, _UD_AT + 4, remote_srqn)


def encode_recv_wqe(slot, wr_id: int, sg_list) -> None:
    nsge = len(sg_list)
    if RECV_WQE_HDR.size + SGE.size * nsge > len(slot):
        raise ValueError("too many SGEs for the WQE slot")
    RECV_WQE_HDR.pack_into(slot, 0, wr_id, nsge, 0)
    off = 16
    for addr, length, lkey in sg_list:
        SGE.pack_into(slot, off, addr, length, lkey)
        off += 16


def write_cqe(slot, wc: "WC", owner: int, solicited: bool = False) -> None:
    """Fill a CQE slot; the owner byte goes last so a reader never sees a
    half-written entry as valid."""
    CQE.pack_into(slot, 0, wc.wr_id, wc.byte_len, wc.imm_data, wc.qp_num, wc.src_qp, wc.vendor_err,
                  wc.pkey_index, wc.slid, wc.status, wc.opcode, wc.wc_flags, wc.sl, wc.dlid_path_bits,
                  1 if solicited else 0)
    slot[CQE_OWNER] = owner


def write_cqe_ex(slot, wc: "WC", owner: int, solicited: bool, stamp: int) -> None:
    """``write_cqe`` for a CQ with the extended words: the CQE, then its
    timestamp and tag-matching info (0 unless ``wc`` is a ``TmWC``), then
    the owner byte."""
    if type(wc) is TmWC:
        tag, priv = wc.tm_tag, wc.tm_priv
    else:
        tag = priv = 0
    _CQE_WITH_EX.pack_into(slot, 0, wc.wr_id, wc.byte_len, wc.imm_data, wc.qp_num, wc.src_qp, wc.vendor_err,
                           wc.pkey_index, wc.slid, wc.status, wc.opcode, wc.wc_flags, wc.sl, wc.dlid_path_bits,
                           1 if solicited else 0, stamp, tag, priv)
    slot[CQE_OWNER] = owner


def read_cqe(slot) -> WC:
    (wr_id, byte_len, imm, qp_num, src_qp, vendor_err, pkey_index, slid, status, opcode, wc_flags, sl,
     dlid_path_bits, _) = CQE.unpack_from(slot, 0)
    return WC(wr_id, status, opcode, qp_num, byte_len, imm, src_qp, wc_flags, pkey_index, vendor_err,
              slid, sl, dlid_path_bits)


class WC:
    """A work completion (ibv_wc): what ``read_cqe`` returns to the poller,
    and what the transport completes a work request with (``write_cqe``
    takes any object with these fields)."""

    __slots__ = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data",
                 "qp_num", "src_qp", "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits")

    def __init__(self, wr_id: int, status: int, opcode: int, qp_num: int, byte_len: int = 0,
                 imm_data: int = 0, src_qp: int = 0, wc_flags: int = 0, pkey_index: int = 0,
                 vendor_err: int = 0, slid: int = 0, sl: int = 0, dlid_path_bits: int = 0):
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.imm_data = imm_data
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits

    def __repr__(self) -> str:
        try:
            op = ibv_wc_opcode(self.opcode).name
        except ValueError:
            op = str(self.opcode)
        return (f"WC(wr_id={self.wr_id}, status={ibv_wc_status(self.status).name}, opcode={op}, "
                f"byte_len={self.byte_len}, qp_num={self.qp_num})")


class TmWC(WC):
    """A tag-matching completion: a ``WC`` with ibv_wc_tm_info's tag and
    priv (the TMH's app_ctx), which ``write_cqe_ex`` stores."""

    __slots__ = ("tm_tag", "tm_priv")

    def __init__(self, wr_id: int, status: int, opcode: int, qp_num: int, byte_len: int = 0,
                 wc_flags: int = 0, tm_tag: int = 0, tm_priv: int = 0, src_qp: int = 0):
        super().__init__(wr_id, status, opcode, qp_num, byte_len, 0, src_qp, wc_flags)
        self.tm_tag = tm_tag
        self.tm_priv = tm_priv
