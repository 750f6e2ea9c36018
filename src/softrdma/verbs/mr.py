"""Memory regions and windows (pyverbs.mr): ``MR`` is memory the library
allocates in shared memory, so the daemon reaches it without the process's
help; ``MW`` a memory window the daemon allocates (ibv_alloc_mw), bound
with ``QP.bind_mw`` (type 1) or an IBV_WR_BIND_MW work request (type 2:
``SendWR.set_bind_wr`` or ``QPEx.wr_bind_mw``)."""

from __future__ import annotations

import errno

from ..uapi.commands import CMD
from ..uapi.shm import SharedRegion
from .base import PDObject
from .errors import PyverbsRDMAError


class MR(PDObject):
    destroy_cmd = CMD.dereg_mr
    close_rank = 4

    def __init__(self, pd, length: int, access: int, address=None, implicit: bool = False, **kw):
        if address is not None or implicit:
            raise PyverbsRDMAError("Failed to register a MR over caller memory: softrdma registers the"
                                   " memory it allocates (MR(pd, length, access))", errno.EOPNOTSUPP)
        if length <= 0:
            raise PyverbsRDMAError("Failed to register a MR", errno.EINVAL)
        max_size = pd.ctx._attr.get("max_mr_size")
        if max_size is not None and length > max_size:     # before allocating it (the daemon checks too)
            raise PyverbsRDMAError(f"Failed to register a MR: {length} bytes, above the device's max_mr_size"
                                   f" ({max_size})", errno.EINVAL)
        self.pd = pd
        self.length = length
        self.access = int(access)
        self.region = SharedRegion(length, "softrdma-mr")
        self.buf = self.region.address
        try:
            reply, _ = pd.ctx.conn.call(CMD.reg_mr, fds=[self.region.fd], pd=pd.handle, length=length,
                                        access=self.access, addr=self.buf)
        except PyverbsRDMAError:
            self.region.close()
            raise
        self.handle = reply["mr"]
        self.lkey = reply["lkey"]
        self.rkey = reply["rkey"]
        self.closed = False
        self.pd.add_ref(self)

    def write(self, data, length: int | None = None, offset: int = 0) -> None:
        if isinstance(data, str):
            data = data.encode()
        n = len(data) if length is None else length
        if offset < 0 or offset + n > self.length:
            raise PyverbsRDMAError("Failed to write to MR: out of bounds", errno.EINVAL)
        self.region.view[offset:offset + n] = bytes(data[:n])

    def read(self, length: int, offset: int = 0) -> bytes:
        if offset < 0 or offset + length > self.length:
            raise PyverbsRDMAError("Failed to read from MR: out of bounds", errno.EINVAL)
        return bytes(self.region.view[offset:offset + length])

    def _release(self) -> None:
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
