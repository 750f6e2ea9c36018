"""The extended CQ (pyverbs.cq: CQEX, CqInitAttrEx, PollCqAttr, WcTmInfo).

ibv_create_cq_ex's polling model: ``start_poll`` opens a batch on the
oldest completion, ``poll_next`` moves to the next one, ``read_*`` read
fields of the current one, ``end_poll`` releases the batch.  Both return 0
or ENOENT (no completion), as pyverbs does; after an ENOENT from
``start_poll`` there is no batch to end, after one from ``poll_next`` there
is (ibv_create_cq_ex(3)).  The CQEs are the same ring entries CQ.poll reads,
unpacked once per completion; the batch is released by one consumer-index
store at ``end_poll``.

Which fields exist is chosen at creation (``wc_flags``): opcode,
vendor_err and wc_flags always; byte_len, imm_data (and the invalidated
rkey, which libibverbs reads through the same union), qp_num, src_qp,
slid, sl and dlid_path_bits on request, as in rxe; beyond rxe, the
completion timestamp (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: the device's
free-running counter, ``uapi.clock``, in hca_core_clock ticks), the wall
clock (..._WALLCLOCK, ns since the epoch) and tag-matching info
(IBV_WC_EX_WITH_TM_INFO, ``read_tm_info``), which the daemon writes into
the CQE's extended words (``uapi.abi``) of the CQs that ask for them.  No
VLAN or flow tag: asking for those fails creation with EOPNOTSUPP, as the
provider refuses what it cannot report.  Reading a field that was not
asked for is a NULL provider callback in C; here it raises EINVAL.
"""

from __future__ import annotations

import errno
import time
from os import sched_yield

from ..enums import (
    IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD, IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
    IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
    IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_IMM,
    IBV_WC_EX_WITH_QP_NUM, IBV_WC_EX_WITH_SL, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SRC_QP,
    IBV_WC_EX_WITH_TM_INFO, IBV_WC_WITH_IMM, ibv_create_cq_wc_flags,
)
from ..uapi import clock
from ..uapi.abi import CQE, CQE_EX, CQE_EX_AT, CQE_FIELDS, SUPPORTED_WC_FLAGS, WC_EX_TIMESTAMP
from .connection import IDLE_POLLS
from .cq import CompChannel, CompletionQueue, bswap32
from .errors import PyverbsRDMAError
from .pd import ParentDomain

_WHY_NOT = {
    int(IBV_WC_EX_WITH_CVLAN): "no VLAN stripping",
    int(IBV_WC_EX_WITH_FLOW_TAG): "no flow tag in completions",
}
# libibverbs: comp_mask bits beyond the known ones are EINVAL; the provider
# (ibv_cmd_create_cq_ex) takes only IBV_CQ_INIT_ATTR_MASK_FLAGS
_KNOWN_COMP_MASK = int(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)

(_WR_ID, _BYTE_LEN, _IMM, _QP_NUM, _SRC_QP, _VENDOR_ERR, _PKEY_INDEX, _SLID, _STATUS, _OPCODE, _WC_FLAGS, _SL,
 _DLID_PATH_BITS) = (CQE_FIELDS.index(f) for f in (
    "wr_id", "byte_len", "imm_data", "qp_num", "src_qp", "vendor_err", "pkey_index", "slid", "status", "opcode",
    "wc_flags", "sl", "dlid_path_bits"))
_unpack = CQE.unpack_from
_unpack_ex = CQE_EX.unpack_from
_ENOENT = errno.ENOENT


class CqInitAttrEx:
    """ibv_cq_init_attr_ex (pyverbs' argument order)."""

    def __init__(self, cqe: int = 100, channel: CompChannel | None = None, comp_vector: int = 0,
                 wc_flags: int = 0, comp_mask: int = 0, flags: int = 0, parent_domain=None):
        self.cqe = cqe
        self.parent_domain = parent_domain      # rdma-core 64 (IBV_CQ_INIT_ATTR_MASK_PD)
        self.cq_context = None
        self.comp_channel = channel
        self.comp_vector = comp_vector
        self.wc_flags = wc_flags
        self.comp_mask = comp_mask
        self.flags = flags

    @property
    def channel(self):
        return self.comp_channel

    def __str__(self) -> str:
        names = " ".join(f.name for f in ibv_create_cq_wc_flags if f & self.wc_flags)
        return (f"{'Number of CQEs':22}: {self.cqe:<20}\n{'WC flags':22}: {names:<20}\n"
                f"{'comp mask':22}: {self.comp_mask:<20}\n{'flags':22}: {self.flags:<20}\n")


class PollCqAttr:
    """ibv_poll_cq_attr: no field is defined but comp_mask (which must be 0)."""

    def __init__(self, comp_mask: int = 0):
        self.comp_mask = comp_mask


class WcTmInfo:
    """ibv_wc_tm_info: the tag of a tag-matching completion and its priv (the TMH's app_ctx)."""

    def __init__(self, tag: int = 0, priv: int = 0):
        self.tag = tag
        self.priv = priv


class CQEX(CompletionQueue):
    """``CQEX(ctx, CqInitAttrEx(cqe, channel, comp_vector, wc_flags, comp_mask, flags))``."""

    def __init__(self, ctx, init_attr: CqInitAttrEx | None = None):
        a = init_attr if init_attr is not None else CqInitAttrEx()
        mask = int(a.comp_mask)
        if mask & ~_KNOWN_COMP_MASK:
            raise PyverbsRDMAError(f"Failed to create extended CQ: unknown comp_mask bits 0x{mask:x}", errno.EINVAL)
        wc_flags = int(a.wc_flags)
        if wc_flags & ~SUPPORTED_WC_FLAGS:
            bad = wc_flags & ~SUPPORTED_WC_FLAGS
            why = "; ".join(w for f, w in _WHY_NOT.items() if bad & f) or f"unknown wc_flags 0x{bad:x}"
            raise PyverbsRDMAError(f"Failed to create extended CQ: softrdma has {why}", errno.EOPNOTSUPP)
        parent_domain = None
        if mask & IBV_CQ_INIT_ATTR_MASK_PD:
            # the CQ's ring from a parent domain's allocators (verbs.pd); as
            # mlx5's create_cq, anything but a parent domain is EINVAL
            parent_domain = a.parent_domain
            if not isinstance(parent_domain, ParentDomain) or parent_domain.closed:
                raise PyverbsRDMAError("Failed to create extended CQ: parent_domain is not a parent domain",
                                       errno.EINVAL)
        if mask & IBV_CQ_INIT_ATTR_MASK_FLAGS and a.flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED:
            # SINGLE_THREADED only drops a lock; IGNORE_OVERRUN reaches rxe's
            # create_cq, which refuses any flag
            raise PyverbsRDMAError(f"Failed to create extended CQ: flags 0x{int(a.flags):x} not supported",
                                   errno.EOPNOTSUPP)
        super().__init__(ctx, a.cqe, a.cq_context, a.comp_channel, a.comp_vector, parent_domain, wc_flags)
        self.wc_flags = wc_flags
        self.status = 0
        self.wr_id = 0
        self._cur = None             # the current CQE's values (CQE_FIELDS order); None: no batch
        self._slot = None            # its ring slot (the extended words are read from it on demand)
        self._pos = 0                # its index in the batch

    # ------------------------------------------------------------- iterator
    def start_poll(self, attr: PollCqAttr | None = None) -> int:
        """0 and the oldest completion current, or ENOENT (no batch opened)."""
        if self._cur is not None:
            raise PyverbsRDMAError("start_poll: a polling batch is open (call end_poll first)", errno.EINVAL)
        if attr is not None and attr.comp_mask:
            return errno.EINVAL
        slot = self.consumer.peek(0)
        if slot is None:
            sched_yield()                # as CQ.poll: let the daemon have the core, and now and then
            self._idle -= 1              # ask whether it is still there
            if not self._idle:
                self._idle = IDLE_POLLS
                self.ctx.conn.check_alive()
            return _ENOENT
        self._cur = cur = _unpack(slot)
        self._slot = slot
        self._pos = 0
        self.wr_id = cur[_WR_ID]
        self.status = cur[_STATUS]
        return 0

    def poll_next(self) -> int:
        """0 and the next completion current, or ENOENT (the batch stays
        open on the same completion; end it with ``end_poll``)."""
        if self._cur is None:
            raise PyverbsRDMAError("poll_next: no polling batch (call start_poll first)", errno.EINVAL)
        slot = self.consumer.peek(self._pos + 1)
        if slot is None:
            return _ENOENT
        self._pos += 1
        self._cur = cur = _unpack(slot)
        self._slot = slot
        self.wr_id = cur[_WR_ID]
        self.status = cur[_STATUS]
        return 0

    def end_poll(self) -> None:
        """Release every completion of the batch."""
        if self._cur is None:
            raise PyverbsRDMAError("end_poll: no polling batch (start_poll returned ENOENT or was not called)",
                                   errno.EINVAL)
        self.consumer.consume(self._pos + 1)
        self._cur = self._slot = None

    # ------------------------------------------------------------- fields
    def _field(self, index: int, flag: int, name: str) -> int:
        cur = self._cur
        if cur is None:
            raise PyverbsRDMAError(f"{name}: no current completion (start_poll first)", errno.EINVAL)
        if flag and not self.wc_flags & flag:
            raise PyverbsRDMAError(f"{name}: {ibv_create_cq_wc_flags(flag).name} was not in the CQ's wc_flags",
                                   errno.EINVAL)
        return cur[index]

    def read_opcode(self) -> int:
        return self._field(_OPCODE, 0, "read_opcode")

    def read_vendor_err(self) -> int:
        return self._field(_VENDOR_ERR, 0, "read_vendor_err")

    def read_wc_flags(self) -> int:
        return self._field(_WC_FLAGS, 0, "read_wc_flags")

    def read_byte_len(self) -> int:
        return self._field(_BYTE_LEN, IBV_WC_EX_WITH_BYTE_LEN, "read_byte_len")

    def read_imm_data(self) -> int:
        """The __be32 immediate as pyverbs returns it (socket.ntohl gives the
        sender's value); for a SEND with invalidate, the union's other
        member, the invalidated rkey."""
        v = self._field(_IMM, IBV_WC_EX_WITH_IMM, "read_imm_data")
        return bswap32(v) if self._cur[_WC_FLAGS] & IBV_WC_WITH_IMM else v

    def read_invalidated_rkey(self) -> int:
        """libibverbs' ibv_wc_read_invalidated_rkey reads imm_data's union."""
        v = self._field(_IMM, IBV_WC_EX_WITH_IMM, "read_invalidated_rkey")
        return bswap32(v) if self._cur[_WC_FLAGS] & IBV_WC_WITH_IMM else v

    def read_qp_num(self) -> int:
        return self._field(_QP_NUM, IBV_WC_EX_WITH_QP_NUM, "read_qp_num")

    def read_src_qp(self) -> int:
        return self._field(_SRC_QP, IBV_WC_EX_WITH_SRC_QP, "read_src_qp")

    def read_slid(self) -> int:
        return self._field(_SLID, IBV_WC_EX_WITH_SLID, "read_slid")

    def read_sl(self) -> int:
        return self._field(_SL, IBV_WC_EX_WITH_SL, "read_sl")

    def read_dlid_path_bits(self) -> int:
        return self._field(_DLID_PATH_BITS, IBV_WC_EX_WITH_DLID_PATH_BITS, "read_dlid_path_bits")

    def _ex(self, flag: int, name: str) -> tuple:
        """The current CQE's extended words (stamp, tm tag, tm priv)."""
        self._field(0, flag, name)
        return _unpack_ex(self._slot, CQE_EX_AT)

    def read_timestamp(self) -> int:
        """The completion's time on the device's free-running counter
        (hca_core_clock ticks), taken as the daemon wrote the CQE."""
        return self._ex(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, "read_timestamp")[0]

    def read_completion_wallclock_ns(self) -> int:
        """The completion's time in ns since the epoch.  A CQ that asked
        for both timestamps has the counter in its CQEs: it is converted
        here through the counter's time line (CLOCK_MONOTONIC_RAW)."""
        stamp = self._ex(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, "read_completion_wallclock_ns")[0]
        if self.wc_flags & WC_EX_TIMESTAMP:
            offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
            return clock.free_running_to_ns(stamp) + offset
        return stamp

    def read_tm_info(self) -> WcTmInfo:
        """ibv_wc_read_tm_info: the matched tag and the TMH's app_ctx (0
        on completions that matched no tag)."""
        _, tag, priv = self._ex(IBV_WC_EX_WITH_TM_INFO, "read_tm_info")
        return WcTmInfo(tag, priv)

    # fields no softrdma CQ has (creation refuses their wc_flags)
    def _absent(self, flag: int, name: str):
        raise PyverbsRDMAError(f"{name}: softrdma has {_WHY_NOT[flag]}", errno.EOPNOTSUPP)

    def read_cvlan(self) -> int:
        self._absent(int(IBV_WC_EX_WITH_CVLAN), "read_cvlan")

    def read_flow_tag(self) -> int:
        self._absent(int(IBV_WC_EX_WITH_FLOW_TAG), "read_flow_tag")

    def close(self) -> None:
        self._cur = self._slot = None
        super().close()

    def __str__(self) -> str:
        return f"Extended CQ:\n{'Handle':<22}: {self.handle:<20}\n{'CQEs':<22}: {self.cqe:<20}\n"
