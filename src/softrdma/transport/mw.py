"""Memory windows: allocation, bind, invalidation (rxe_mw.c's job).

A window is an entry of the device's ``MemoryTable`` in the MR key space
(``index << 8 | key byte``).  Bound, it names a range of one MR with its own
remote access rights; ``MemoryTable.remote_view`` then resolves its rkey like
an MR's: the window's ``view`` is the slice of the MR, ``addr``/``length``
its bounds (``addr`` 0 for a zero-based window), ``access`` its rights.

Types and states as rxe (type 1 and type 2B):

* type 1 -- bound by ``ibv_bind_mw`` (a BIND_MW WQE the library posts);
  VALID from allocation; a bind with length 0 unbinds; never invalidated.
* type 2 -- bound by an IBV_WR_BIND_MW work request, to the posting QP:
  only that QP reaches memory through it (``bound_qp``).  FREE until bound,
  VALID once bound, FREE again after LOCAL_INV / SEND_WITH_INV.

Every bind check fails the WQE with IBV_WC_MW_BIND_ERR (rxe_do_local_ops).
Beyond rxe, the binding QP and the MR must be in the window's PD for both
types: the daemon's table holds every client's windows and MRs.
A BIND_MW ``SendWQE`` carries the bind in the fields rxe's ``wr.mw`` union
overlays (see ``bind_wqe``): ``invalidate_rkey`` the window's current rkey,
``rkey`` the new one (only its key byte is taken), ``remote_addr`` and
``compare_add`` the range, ``swap`` the window's access flags,
``remote_qkey`` the MR's lkey.
"""

from __future__ import annotations

from ..enums import ibv_access_flags as A, ibv_mw_type, ibv_wc_status, ibv_wr_opcode, ints
from ..uapi.wr import WR_LOCAL_OP_MASK, wr_opcodes
from .odp import sub_view
from .wr import SendWQE

ST = ints(ibv_wc_status)
WR = ints(ibv_wr_opcode)
TYPE_1, TYPE_2 = int(ibv_mw_type.IBV_MW_TYPE_1), int(ibv_mw_type.IBV_MW_TYPE_2)

# rxe_mw_state
STATE_INVALID, STATE_FREE, STATE_VALID = 0, 1, 2

_LOCAL_WRITE = int(A.IBV_ACCESS_LOCAL_WRITE)
_MW_BIND = int(A.IBV_ACCESS_MW_BIND)
_ZERO_BASED = int(A.IBV_ACCESS_ZERO_BASED)
_WRITABLE = int(A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_ATOMIC)
# RXE_ACCESS_SUPPORTED_MW, as far as softrdma has the flags
SUPPORTED_MW_ACCESS = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ
                          | A.IBV_ACCESS_REMOTE_ATOMIC | A.IBV_ACCESS_MW_BIND | A.IBV_ACCESS_ON_DEMAND
                          | A.IBV_ACCESS_RELAXED_ORDERING | A.IBV_ACCESS_ZERO_BASED)

LOCAL_OPS = wr_opcodes(WR_LOCAL_OP_MASK)


class MW:
    """A memory window (rxe_mw).  The attributes ``MemoryTable.remote_view``
    reads are kept so that an unusable window fails its checks: ``valid`` is
    true only while bound with a non-zero length; ``lkey`` is -1 (a window
    is never a local key)."""

    __slots__ = ("table", "type", "pd", "rkey", "lkey", "state", "mr", "bound_qp", "addr", "length",
                 "access", "view", "valid")

    def __init__(self, table, pd, mw_type: int):
        if mw_type not in (TYPE_1, TYPE_2):
            raise ValueError(f"memory window type {mw_type}")
        self.table = table
        self.type = mw_type
        self.pd = pd
        self.lkey = -1
        self.state = STATE_VALID if mw_type == TYPE_1 else STATE_FREE
        self.mr = None
        self.bound_qp = None
        self.addr = self.length = self.access = 0
        self.view = None
        self.valid = False
        self.rkey = table.add_window(self)

    def _unlink(self) -> None:
        mr = self.mr
        if mr is not None:
            mr.mws.remove(self)
            self.mr = None
        self.view = None
        self.valid = False

    def unbind(self) -> None:
        """Its MR is deregistered under it (the owner went away): a type 1
        window stays VALID with nothing bound, a type 2 window is FREE."""
        self._unlink()
        self.bound_qp = None
        self.addr = self.length = self.access = 0
        if self.type == TYPE_2:
            self.state = STATE_FREE

    def invalidate(self) -> bool:
        """LOCAL_INV / SEND_WITH_INV with this window's rkey
        (rxe_check_invalidate_mw, o10-37.2.26: never a type 1 window)."""
        if self.type == TYPE_1 or self.state != STATE_VALID:
            return False
        self.unbind()
        return True

    def dealloc(self) -> None:
        self._unlink()
        self.bound_qp = None
        self.state = STATE_INVALID
        self.table.remove_window(self)

    def __repr__(self) -> str:
        return (f"MW(type {self.type}, rkey=0x{self.rkey:08x}, state={self.state}, "
                f"addr=0x{self.addr:x}, length={self.length})")


def bind_wqe(wr_id: int, mw_rkey: int, new_rkey: int, mr_lkey: int, addr: int, length: int,
             access: int, send_flags: int = 0) -> SendWQE:
    """A BIND_MW work request as the transport takes it (fields as in the
    module docstring)."""
    return SendWQE(wr_id, WR.IBV_WR_BIND_MW, (), send_flags=send_flags, invalidate_rkey=mw_rkey,
                   rkey=new_rkey, remote_addr=addr, compare_add=length, swap=access, remote_qkey=mr_lkey)


def bind(qp, wqe) -> int:
    """Execute a BIND_MW WQE on ``qp``: IBV_WC_SUCCESS or IBV_WC_MW_BIND_ERR
    (rxe_bind_mw, rxe_check_bind_mw, rxe_do_bind_mw)."""
    table = qp.memory
    mw_rkey, addr, length, access = wqe.invalidate_rkey, wqe.remote_addr, wqe.compare_add, wqe.swap
    mw = table.lookup(mw_rkey)
    if not isinstance(mw, MW) or mw.rkey != mw_rkey:
        return ST.IBV_WC_MW_BIND_ERR
    if length:
        mr = table.lookup(wqe.remote_qkey)
        if mr is None or isinstance(mr, MW) or mr.lkey != wqe.remote_qkey or not mr.valid:
            return ST.IBV_WC_MW_BIND_ERR
    else:
        mr = None
    if access & ~SUPPORTED_MW_ACCESS:
        return ST.IBV_WC_MW_BIND_ERR
    if qp.pd is not mw.pd:            # C10-72 (rxe checks it for type 2 only; the daemon's windows
        return ST.IBV_WC_MW_BIND_ERR  # belong to many clients: no QP binds another PD's window)
    if mw.type == TYPE_1:
        if mw.state != STATE_VALID or access & _ZERO_BASED:      # o10-36.2.2
            return ST.IBV_WC_MW_BIND_ERR
    elif mw.state != STATE_FREE:                                    # o10-37.2.30
        return ST.IBV_WC_MW_BIND_ERR
    if mw.type == TYPE_2 and mr is None:                            # o10-37.2.40
        return ST.IBV_WC_MW_BIND_ERR
    if mr is not None:
        # the MR must be in the window's PD: libibverbs' EPERM, which a
        # daemon serving many processes cannot leave to the library
        if mr.pd is not mw.pd or mr.access & _ZERO_BASED:
            return ST.IBV_WC_MW_BIND_ERR
        if not mr.access & _MW_BIND:                                # C10-73
            return ST.IBV_WC_MW_BIND_ERR
        if access & _WRITABLE and not mr.access & _LOCAL_WRITE:     # C10-74
            return ST.IBV_WC_MW_BIND_ERR
        off = addr - mr.addr                                        # C10-75, also for zero-based:
        if off < 0 or off + length > mr.length:                     # the window is a slice of the MR
            return ST.IBV_WC_MW_BIND_ERR
    # rxe_do_bind_mw
    mw._unlink()
    mw.rkey = (mw.rkey & ~0xFF) | (wqe.rkey & 0xFF)
    mw.access = access
    mw.state = STATE_VALID
    mw.length = length
    mw.addr = 0 if access & _ZERO_BASED else addr
    if length:
        mw.mr = mr
        mr.mws.append(mw)
        mw.view = sub_view(mr.view, off, length)
        mw.valid = True
    mw.bound_qp = qp if mw.type == TYPE_2 else None
    return ST.IBV_WC_SUCCESS


def local_op(qp, wqe) -> int:
    """A LOCAL_INV or BIND_MW WQE, executed by the requester in SQ order:
    its completion status (rxe_do_local_ops: a failed invalidation is
    IBV_WC_LOC_QP_OP_ERR, a failed bind IBV_WC_MW_BIND_ERR)."""
    if wqe.opcode == WR.IBV_WR_BIND_MW:
        return bind(qp, wqe)
    if qp.memory.invalidate(qp.pd, wqe.invalidate_rkey):
        return ST.IBV_WC_SUCCESS
    return ST.IBV_WC_LOC_QP_OP_ERR


__all__ = ["MW", "TYPE_1", "TYPE_2", "STATE_INVALID", "STATE_FREE", "STATE_VALID", "LOCAL_OPS",
           "SUPPORTED_MW_ACCESS", "bind", "bind_wqe", "local_op"]
