"""Memory regions and windows (pyverbs.mr): ``MR`` is memory the library
allocates in shared memory, so the daemon reaches it without the process's
help; ``MW`` a memory window the daemon allocates (ibv_alloc_mw), bound
with ``QP.bind_mw`` (type 1) or an IBV_WR_BIND_MW work request (type 2:
``SendWR.set_bind_wr`` or ``QPEx.wr_bind_mw``).  ``MR.rereg`` is
ibv_rereg_mr: PD and access change in place; a new translation moves the
MR onto the caller's pages (as an MR with ``address``, below), and the
memory the library allocated for it is freed, as pyverbs frees its
buffer.

An MR with IBV_ACCESS_ON_DEMAND, ``implicit`` or an ``address`` is on the
process's own memory instead (``verbs.usermem``; the daemon reaches it
through the process's address space, ``device.odp``): an ODP MR, an
implicit ODP MR (the whole address space), or an MR on the caller's pages
with pinned semantics (every page mapped when registered)."""

from __future__ import annotations

import ctypes
import errno

from ..enums import (IBV_ACCESS_HUGETLB, IBV_ACCESS_ON_DEMAND, IBV_REREG_MR_CHANGE_ACCESS, IBV_REREG_MR_CHANGE_PD,
                     IBV_REREG_MR_CHANGE_TRANSLATION,
                     IBV_REREG_MR_ERR_CMD, IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_FLAGS_SUPPORTED)
from ..uapi.commands import CMD
from ..uapi.shm import SharedRegion
from .base import PDObject
from .errors import PyverbsError, PyverbsRDMAError
from .usermem import HUGE_PAGE_SIZE, UserMemory

SIZE_MAX = (1 << 64) - 1

_REREG_ERR = {IBV_REREG_MR_ERR_INPUT: "IBV_REREG_MR_ERR_INPUT", IBV_REREG_MR_ERR_CMD: "IBV_REREG_MR_ERR_CMD"}


def _why(e: PyverbsRDMAError) -> str:
    """The daemon's reason, after pyverbs' own text."""
    reason = getattr(e, "reason", None)
    return f" ({reason})" if reason else ""


def _rereg_error(ret: int, err: int, why: str = "") -> PyverbsRDMAError:
    """pyverbs' rereg failure: the error code's name, then the errno."""
    return PyverbsRDMAError(f"Failed to rereg MR: {_REREG_ERR[ret]}{why}", err)


class MR(PDObject):
    destroy_cmd = CMD.dereg_mr
    close_rank = 4
    _user = None                        # the process's own memory under an ODP/user MR (verbs.usermem)

    def __init__(self, pd, length: int = 0, access: int = 0, address=None, implicit: bool = False, **kw):
        if kw.get("handle") is not None:
            self._import(pd, kw["handle"], address)
            return
        if address or implicit or int(access) & IBV_ACCESS_ON_DEMAND:
            self._reg_user(pd, length, int(access), address, implicit)
            return
        if length <= 0:
            raise PyverbsRDMAError("Failed to register a MR", errno.EINVAL)
        max_size = pd.ctx._attr.get("max_mr_size")
        if max_size is not None and length > max_size:     # before allocating it (the daemon checks too)
            raise PyverbsRDMAError(f"Failed to register a MR: {length} bytes, above the device's max_mr_size"
                                   f" ({max_size})", errno.EINVAL)
        self.pd = pd
        self.length = length
        self.access = int(access)
        try:                                          # IBV_ACCESS_HUGETLB: in huge pages, as pyverbs maps it
            self.region = SharedRegion(length, "softrdma-mr",
                                       huge_page=HUGE_PAGE_SIZE if self.access & IBV_ACCESS_HUGETLB else 0)
        except OSError:
            raise PyverbsError(f"Failed to allocate MR buffer of size {length}") from None
        self.buf = self.region.address
        self._view = self.region.view[:length]        # the MR's bytes in the region
        try:
            reply, _ = pd.ctx.conn.call(CMD.reg_mr, fds=[self.region.fd], pd=pd.handle, length=length,
                                        access=self.access, addr=self.buf)
        except PyverbsRDMAError as e:
            self._view.release()
            self.region.close()
            raise PyverbsRDMAError(f"Failed to register a MR. length: {length}, access flags: {access}"
                                   + _why(e), e.error_code) from None
        self.handle = reply["mr"]
        self.lkey = reply["lkey"]
        self.rkey = reply["rkey"]
        self.closed = False
        self.pd.add_ref(self)

    def _reg_user(self, pd, length: int, access: int, address, implicit: bool) -> None:
        """An MR on the process's own memory: ``address``, or memory mapped
        here when there is none; with IBV_ACCESS_ON_DEMAND an ODP MR, and
        ``implicit`` the whole address space (ibv_reg_mr(pd, NULL,
        SIZE_MAX, access): pyverbs still allocates ``length`` bytes as
        ``buf``)."""
        self.pd = pd
        self.access = access
        self.region = None
        if not address and length <= 0 and not implicit:
            raise PyverbsRDMAError("Failed to register a MR", errno.EINVAL)
        self._user = UserMemory(address, length, bool(access & IBV_ACCESS_HUGETLB))
        self.buf = self._user.address
        self._span = length                            # the bytes at buf that write/read may touch
        reg_addr, reg_len = (0, SIZE_MAX) if implicit else (self.buf, length)
        try:
            reply, _ = pd.ctx.conn.call(CMD.reg_user_mr, pd=pd.handle, length=reg_len, access=access,
                                        addr=reg_addr)
        except PyverbsRDMAError as e:
            self._user.close()
            raise PyverbsRDMAError(f"Failed to register a MR. length: {length}, access flags: {access}"
                                   + _why(e), e.error_code) from None
        self.length = reg_len
        self.handle = reply["mr"]
        self.lkey = reply["lkey"]
        self.rkey = reply["rkey"]
        self.closed = False
        self.pd.add_ref(self)

    def _import(self, pd, handle: int, address) -> None:
        """ibv_import_mr: the MR ``handle`` of the connection ``pd``'s
        context shares (see Context(cmd_fd=...)); its keys and length come
        from the daemon, its address is NULL unless the caller gives the
        original's (pyverbs' ``address``), which read/write then use."""
        try:
            reply, _ = pd.ctx.conn.call(CMD.query_mr, mr=handle)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to import MR", e.error_code) from None
        self.pd = pd
        self.handle = handle
        self.lkey, self.rkey, self.length = reply["lkey"], reply["rkey"], reply["length"]
        self.access = 0
        self.destroy_cmd = None                   # the original deregisters it
        self.region = None
        self.buf = int(address or 0)
        self._view = memoryview((ctypes.c_char * self.length).from_address(self.buf)).cast("B") \
            if self.buf else memoryview(b"")
        self.closed = False
        pd.add_ref(self)

    def unimport(self) -> None:
        """ibv_unimport_mr: forget an imported MR; it stays its original's."""
        self.close()

    def write(self, data, length: int | None = None, offset: int = 0) -> None:
        if isinstance(data, str):
            data = data.encode()
        n = len(data) if length is None else length
        if offset < 0 or offset + n > (self.length if self._user is None else self._span):
            raise PyverbsRDMAError("Failed to write to MR: out of bounds", errno.EINVAL)
        if self._user is not None:
            self._user.write(bytes(data[:n]), offset)
            return
        self._view[offset:offset + n] = bytes(data[:n])

    def read(self, length: int, offset: int = 0) -> bytes:
        if offset < 0 or offset + length > (self.length if self._user is None else self._span):
            raise PyverbsRDMAError("Failed to read from MR: out of bounds", errno.EINVAL)
        if self._user is not None:
            return self._user.read(length, offset)
        return bytes(self._view[offset:offset + length])

    @property
    def view(self) -> memoryview:
        """The MR's bytes from ``buf`` as a memoryview (softrdma's, not
        pyverbs'): the shared region's, or the process's own mapping for
        an MR on it (valid while that memory is mapped).  (An implicit MR
        has no bytes of its own: its ``length`` bytes at ``buf``.)"""
        if self._user is None:
            return self._view
        return self._user.view(self._span)

    def rereg(self, flags: int, pd=None, addr: int = 0, length: int = 0, access: int = 0) -> None:
        """ibv_rereg_mr.  libibverbs' own input checks give
        IBV_REREG_MR_ERR_INPUT with EINVAL, the device's refusal
        IBV_REREG_MR_ERR_CMD with its errno; the keys are the device's reply
        (it keeps them)."""
        flags = int(flags)
        if flags & ~IBV_REREG_MR_FLAGS_SUPPORTED \
                or (flags & IBV_REREG_MR_CHANGE_TRANSLATION and (not addr or not length)) \
                or (access and not flags & IBV_REREG_MR_CHANGE_ACCESS) \
                or (flags & IBV_REREG_MR_CHANGE_PD and pd is None):
            raise _rereg_error(IBV_REREG_MR_ERR_INPUT, errno.EINVAL)
        try:
            reply, _ = self._ctx().conn.call(CMD.rereg_mr, mr=self.handle, flags=flags,
                                             pd=pd.handle if flags & IBV_REREG_MR_CHANGE_PD else 0,
                                             access=int(access), length=int(length), addr=int(addr))
        except PyverbsRDMAError as e:
            raise _rereg_error(IBV_REREG_MR_ERR_CMD, e.error_code, _why(e)) from None
        self.lkey = reply["lkey"]                # (ibv_cmd_rereg_mr: the device's keys)
        self.rkey = reply["rkey"]
        if flags & IBV_REREG_MR_CHANGE_TRANSLATION:
            # the MR is now on the caller's memory; the buffer the library
            # allocated for it goes, as pyverbs frees its own buffer
            self._release()
            self.region = None
            self._user = UserMemory(int(addr), int(length))
            self.buf = self._user.address
            self.length = self._span = int(length)
        if flags & IBV_REREG_MR_CHANGE_ACCESS:
            self.access = int(access)
        if flags & IBV_REREG_MR_CHANGE_PD:
            self.pd._refs.discard(self)          # (pyverbs' PD.remove_ref)
            self.pd = pd
            pd.add_ref(self)

    def _ctx(self):
        return self.pd.ctx

    def _release(self) -> None:
        if self._user is not None:
            self._user.close()
            return
        self._view.release()
        if self.region is not None:               # (an imported MR has none of its own)
            self.region.close()


class MWBindInfo:
    """ibv_mw_bind_info: the MR range a bind gives the window, and its rights."""

    def __init__(self, mr, addr: int, length: int, mw_access_flags: int):
        self.mr = mr
        self.addr = addr
        self.length = length
        self.mw_access_flags = int(mw_access_flags)


class MWBind:
    """ibv_mw_bind: a type 1 bind for ``QP.bind_mw``."""

    def __init__(self, bind_info: MWBindInfo, send_flags: int, wr_id: int = 0):
        self.bind_info = bind_info
        self.send_flags = int(send_flags)
        self.wr_id = wr_id


class MW(PDObject):
    """ibv_mw: ``MW(pd, mw_type)``.  ``rkey`` is the window's current rkey
    (``QP.bind_mw`` moves it to the bound one, as libibverbs does; for a
    type 2 window the new rkey is the bind work request's ``rkey``)."""

    destroy_cmd = CMD.dealloc_mw
    close_rank = 3

    def __init__(self, pd, mw_type: int):
        self.pd = pd
        self.type = int(mw_type)
        reply, _ = pd.ctx.conn.call(CMD.alloc_mw, pd=pd.handle, type=self.type)
        self.handle = reply["mw"]
        self.rkey = reply["rkey"]
        self.closed = False
        pd.add_ref(self)

    def __repr__(self) -> str:
        return f"MW(type {self.type}, rkey=0x{self.rkey:08x}, handle={self.handle})"
