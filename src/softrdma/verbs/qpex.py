"""The extended QP (pyverbs.qp: QPEx, DataBuffer): libibverbs' ibv_wr_* API.

``wr_start`` opens a batch; each builder (``wr_send``, ``wr_rdma_write``,
...) writes one WQE into the next free send-queue slot, with ``wr_id`` and
``wr_flags`` as they are at that moment, and the setters (``wr_set_sge``,
``wr_set_inline_data``, ``wr_set_ud_addr``, ...) complete the WQE the last
builder wrote -- the same WQE layout ``QP.post_send`` writes (uapi/abi.py).
Nothing is visible to the device until ``wr_complete`` publishes the whole
batch with one producer-index store (and one doorbell if the daemon
sleeps); ``wr_abort`` discards it.

Errors, as ibv_wr_post(3) has them: builders and setters do not fail; a
problem found while building (queue full, too many SGEs, inline data above
max_inline_data: ENOSPC as in rxe; a setter with no WR, inline data on an
opcode that carries none or SGEs on a bind MW, a UD WR without
``wr_set_ud_addr``: EINVAL) makes
``wr_complete`` fail and post nothing.  What C cannot survive fails at
once: a builder for an opcode the QP was not created with
(``send_ops_flags``) is a NULL provider callback in libibverbs and raises
EINVAL here; operations softrdma does not do raise EOPNOTSUPP.  Either also
spoils the batch, so a later ``wr_complete`` posts nothing.
"""

from __future__ import annotations

import ctypes
import errno

from ..enums import (
    IBV_QPT_UD, IBV_QPT_XRC_SEND, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE,
    IBV_WR_BIND_MW, IBV_WR_FLUSH, IBV_WR_LOCAL_INV,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
    IBV_WR_SEND_WITH_INV, ibv_qp_create_send_ops_flags,
)
from ..uapi import abi
from ..uapi.wr import WR_INLINE_MASK, WR_OPCODE_INFO, wr_opcodes
from .errors import PyverbsRDMAError
from .qp import QP, QPInitAttrEx, encode_bind_wqe

_M32 = 0xFFFFFFFF
# opcodes that carry local data; inline data only for SEND and RDMA WRITE (ibv_wr_post(3))
_INLINE_OPS = wr_opcodes(WR_INLINE_MASK)
# opcode -> the IBV_QP_EX_WITH_* flag its builder needs (send_ops_flags)
_BUILDER_FLAG = {int(op): i.send_ops_flag for op, i in WR_OPCODE_INFO.items()}


class DataBuffer:
    """ibv_data_buf: one piece of ``wr_set_inline_data_list``."""

    def __init__(self, addr: int, length: int):
        self.addr = addr
        self.length = length


class QPEx(QP):
    """``QPEx(ctx, QPInitAttrEx(..., comp_mask=IBV_QP_INIT_ATTR_PD |
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, send_ops_flags=...), qp_attr)``."""

    def __init__(self, creator, init_attr: QPInitAttrEx, qp_attr=None):
        if not isinstance(init_attr, QPInitAttrEx):
            raise TypeError("QPEx is created from QPInitAttrEx on a Context (ibv_create_qp_ex)")
        super().__init__(creator, init_attr, qp_attr)
        self.wr_id = 0
        self.wr_flags = 0
        self.comp_mask = 0           # ibv_qp_ex.comp_mask
        self._active = False         # between wr_start and wr_complete/wr_abort
        self._n = 0                  # WQEs built in this batch
        self._slot = None            # the WQE the last builder wrote
        self._opcode = -1
        self._need_ud = False        # a UD WQE still without its destination
        self._err = 0                # first error of the batch, reported by wr_complete
        self._why = ""
        # the RSS indirection table (pyverbs' QPEx.ind_table): None unless the
        # QP was created on one -- which needs WQs, softrdma has none yet
        self.ind_table = init_attr.ind_table

    # ------------------------------------------------------------ the batch
    def wr_start(self) -> None:
        if self._active:
            raise PyverbsRDMAError("wr_start: a batch is open (wr_complete or wr_abort first)", errno.EINVAL)
        self._active = True
        self._n = 0
        self._slot = None
        self._need_ud = False
        self._err = 0

    def wr_complete(self) -> None:
        """Post the batch, all of it or (after an error) none of it."""
        if not self._active:
            raise PyverbsRDMAError("ibv_wr_complete failed: no wr_start", errno.EINVAL)
        self._active = False
        if self._need_ud and not self._err:
            self._spoil(errno.EINVAL, "a UD work request needs wr_set_ud_addr")
        if self._err:
            raise PyverbsRDMAError(f"ibv_wr_complete failed: {self._why}; nothing was posted", self._err)
        self._check_can_send("ibv_wr_complete failed")
        if self._n:
            self.sq_wq.commit(self._n)

    def wr_abort(self) -> None:
        """Discard the batch: its slots were never published."""
        self._active = False

    def _spoil(self, err: int, why: str) -> None:
        if not self._err:
            self._err, self._why = err, why

    def _fail(self, err: int, why: str):
        """An error C cannot survive: raise now and spoil the batch."""
        self._spoil(err, why)
        raise PyverbsRDMAError(why, err)

    def _next_slot(self, flag: int, name: str):
        """The free slot a builder writes its WQE into, or None if the
        batch is (now) spoiled."""
        if not self._active:
            raise PyverbsRDMAError(f"{name}: outside wr_start/wr_complete", errno.EINVAL)
        if not self.send_ops_flags & flag:
            self._fail(errno.EINVAL, f"{name}: {ibv_qp_create_send_ops_flags(flag).name} was not in the QP's"
                                     " send_ops_flags (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)")
        if self._err:
            return None
        if self._need_ud:
            self._spoil(errno.EINVAL, "a UD work request needs wr_set_ud_addr")
            return None
        slot = self.sq_wq.next_slot(self._n)
        if slot is None:
            self.ctx.conn.check_alive("post send")      # (nothing drains a dead daemon's queues)
            self._spoil(errno.ENOSPC, "send queue full")
        return slot

    def _built(self, slot, opcode: int) -> None:
        """The WQE in ``slot`` is the batch's next one (the setters' target)."""
        self._slot = slot
        self._opcode = opcode
        self._n += 1
        self._need_ud = self.qp_type == IBV_QPT_UD

    def _build(self, name: str, opcode: int, imm: int = 0, raddr: int = 0, rkey: int = 0,
               compare_add: int = 0, swap: int = 0) -> None:
        slot = self._next_slot(_BUILDER_FLAG[opcode], name)
        if slot is None:
            return
        abi.encode_send_wqe(slot, self.wr_id, opcode, self.wr_flags, (), imm_data=imm, remote_addr=raddr,
                            rkey=rkey, compare_add=compare_add, swap=swap)
        self._built(slot, opcode)

    def _last(self, name: str):
        """The WQE a setter completes, or None if the batch is spoiled."""
        if not self._active:
            raise PyverbsRDMAError(f"{name}: outside wr_start/wr_complete", errno.EINVAL)
        if self._err:
            return None
        if self._slot is None:
            self._spoil(errno.EINVAL, f"{name} with no work request built")
            return None
        return self._slot

    # ------------------------------------------------------------ builders
    def wr_send(self) -> None:
        self._build("wr_send", IBV_WR_SEND)

    def wr_send_imm(self, data: int) -> None:
        # pyverbs passes htobe32(data): on the wire ImmDt carries ``data``
        self._build("wr_send_imm", IBV_WR_SEND_WITH_IMM, imm=data & _M32)

    def wr_send_inv(self, invalidate_rkey: int) -> None:
        self._build("wr_send_inv", IBV_WR_SEND_WITH_INV, imm=invalidate_rkey & _M32)

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        self._build("wr_rdma_write", IBV_WR_RDMA_WRITE, raddr=remote_addr, rkey=rkey)

    def wr_rdma_write_imm(self, rkey: int, remote_addr: int, data: int) -> None:
        self._build("wr_rdma_write_imm", IBV_WR_RDMA_WRITE_WITH_IMM,
                    imm=data & _M32, raddr=remote_addr, rkey=rkey)

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        self._build("wr_rdma_read", IBV_WR_RDMA_READ, raddr=remote_addr, rkey=rkey)

    def wr_atomic_cmp_swp(self, rkey: int, remote_addr: int, compare: int, swap: int) -> None:
        self._build("wr_atomic_cmp_swp", IBV_WR_ATOMIC_CMP_AND_SWP,
                    raddr=remote_addr, rkey=rkey, compare_add=compare, swap=swap)

    def wr_atomic_fetch_add(self, rkey: int, remote_addr: int, add: int) -> None:
        self._build("wr_atomic_fetch_add", IBV_WR_ATOMIC_FETCH_AND_ADD,
                    raddr=remote_addr, rkey=rkey, compare_add=add)

    def wr_atomic_write(self, rkey: int, remote_addr: int, atomic_wr) -> None:
        """IBA 1.5 ATOMIC WRITE of the 8 bytes ``atomic_wr`` (bytes, as pyverbs
        passes a char *: its first 8 are taken, as the rxe provider's memcpy).
        The WQE carries them in compare_add (uapi.abi); no SGE."""
        data = bytes(atomic_wr.encode() if isinstance(atomic_wr, str) else atomic_wr)
        slot = self._next_slot(_BUILDER_FLAG[IBV_WR_ATOMIC_WRITE], "wr_atomic_write")
        if slot is None:
            return
        if len(data) < 8:
            self._spoil(errno.EINVAL, "wr_atomic_write needs 8 bytes of atomic_wr")
            return
        abi.encode_send_wqe(slot, self.wr_id, IBV_WR_ATOMIC_WRITE, self.wr_flags, (), remote_addr=remote_addr,
                            rkey=rkey, compare_add=int.from_bytes(data[:8], "little"))
        self._built(slot, IBV_WR_ATOMIC_WRITE)

    def wr_flush(self, rkey: int, remote_addr: int, length: int, ptype: int, level: int) -> None:
        """IBA 1.5 FLUSH of ``length`` bytes at ``remote_addr`` (``level``
        IBV_FLUSH_RANGE) or of the whole MR (IBV_FLUSH_MR), to the placement
        ``ptype`` (IBV_FLUSH_GLOBAL / IBV_FLUSH_PERSISTENT)."""
        slot = self._next_slot(_BUILDER_FLAG[IBV_WR_FLUSH], "wr_flush")
        if slot is None:
            return
        abi.encode_send_wqe(slot, self.wr_id, IBV_WR_FLUSH, self.wr_flags, (), remote_addr=remote_addr, rkey=rkey,
                            compare_add=length, swap=(ptype & 0xFF) | (level & 0xFF) << 8)
        self._built(slot, IBV_WR_FLUSH)

    def wr_bind_mw(self, mw, rkey: int, bind_info) -> None:
        """Bind ``mw`` (type 2; a type 1 window too, as ibv_bind_mw's WR
        does) to ``bind_info``'s MR range, its key byte taken from ``rkey``
        (pyverbs: ``inc_rkey(mw.rkey)``).  As in rxe, ``mw.rkey`` is left
        alone: the window answers to the new rkey once the bind completes.
        The WQE is the one ``QP.post_send`` writes for IBV_WR_BIND_MW."""
        slot = self._next_slot(_BUILDER_FLAG[IBV_WR_BIND_MW], "wr_bind_mw")
        if slot is None:
            return
        if mw is None or bind_info is None:
            self._spoil(errno.EINVAL, "wr_bind_mw needs an MW and an MWBindInfo")
            return
        encode_bind_wqe(slot, self.wr_id, self.wr_flags, mw, rkey, bind_info)
        self._built(slot, IBV_WR_BIND_MW)

    def wr_local_inv(self, invalidate_rkey: int) -> None:
        self._build("wr_local_inv", IBV_WR_LOCAL_INV, imm=invalidate_rkey & _M32)

    # ------------------------------------------------------------ setters
    def wr_set_sge(self, sge) -> None:
        slot = self._last("wr_set_sge")
        if slot is None:
            return
        if sge.length and self._opcode == IBV_WR_BIND_MW:
            self._spoil(errno.EINVAL, "wr_set_sge: a bind MW work request carries no data")
            return
        # rxe: a zero-length SGE leaves the WR without data
        abi.set_send_wqe_sges(slot, [(sge.addr, sge.length, sge.lkey)] if sge.length else [])

    def wr_set_sge_list(self, num_sge: int, sg_list) -> None:
        slot = self._last("wr_set_sge_list")
        if slot is None:
            return
        if num_sge and self._opcode == IBV_WR_BIND_MW:
            self._spoil(errno.EINVAL, "wr_set_sge_list: a bind MW work request carries no data")
            return
        if num_sge > self.cap.max_send_sge:
            self._spoil(errno.ENOSPC, f"{num_sge} SGEs > max_send_sge {self.cap.max_send_sge}")
            return
        abi.set_send_wqe_sges(slot, [(s.addr, s.length, s.lkey) for s in sg_list[:num_sge]])

    def wr_set_inline_data(self, addr: int, length: int) -> None:
        self._inline("wr_set_inline_data", ((addr, length),))

    def wr_set_inline_data_list(self, num_buf: int, buf_list) -> None:
        self._inline("wr_set_inline_data_list", [(b.addr, b.length) for b in buf_list[:num_buf]])

    def _inline(self, name: str, bufs) -> None:
        slot = self._last(name)
        if slot is None:
            return
        if self._opcode not in _INLINE_OPS:
            self._spoil(errno.EINVAL, f"{name}: inline data is for SEND and RDMA WRITE only")
            return
        total = sum(n for _, n in bufs)
        if total > self.cap.max_inline_data:
            self._spoil(errno.ENOSPC, f"inline data {total} > max_inline_data {self.cap.max_inline_data}")
            return
        # copied now: the caller may reuse its buffers as soon as the setter returns
        abi.set_send_wqe_inline(slot, b"".join(ctypes.string_at(a, n) for a, n in bufs))

    def wr_set_ud_addr(self, ah, remote_qpn: int, remote_qkey: int) -> None:
        slot = self._last("wr_set_ud_addr")
        if slot is None:
            return
        if self.qp_type != IBV_QPT_UD:
            self._spoil(errno.EINVAL, "wr_set_ud_addr on a QP that is not UD")
            return
        abi.set_send_wqe_ud(slot, ah.handle, remote_qpn & 0xFFFFFF, remote_qkey & _M32)
        self._need_ud = False

    # ------------------------------------------------------------ not in softrdma
    def _unsupported(self, name: str, why: str):
        if not self._active:
            raise PyverbsRDMAError(f"{name}: {why}", errno.EOPNOTSUPP)
        self._fail(errno.EOPNOTSUPP, f"{name}: {why}")

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        """ibv_wr_set_xrc_srqn: the remote XRC SRQ of the WQE just built."""
        slot = self._last("wr_set_xrc_srqn")
        if slot is None:
            return
        if self.qp_type != IBV_QPT_XRC_SEND:
            self._spoil(errno.EINVAL, "wr_set_xrc_srqn on a QP that is not XRC INI")
            return
        abi.set_send_wqe_xrc(slot, remote_srqn & 0xFFFFFF)

    def wr_send_tso(self, hdr, hdr_sz: int, mss: int) -> None:
        self._unsupported("wr_send_tso", "TSO is for raw packet QPs, which softrdma does not have")


    def close(self) -> None:
        self._active = False
        self._slot = None            # a view into the SQ ring, which close unmaps
        super().close()
