"""Device memory (pyverbs.device's ``DM`` and ``AllocDmAttr``,
pyverbs.mr's ``DMMR``): ibv_alloc_dm takes ``length`` bytes from the
device's pool in the daemon (``max_dm_size`` of query_device_ex); the
memory is a memfd the library creates and the daemon maps, so
ibv_memcpy_to_dm / ibv_memcpy_from_dm are copies in this process, with
mlx5's rules (offset and length multiples of 4, within the DM).  A DMMR
(ibv_reg_dm_mr) is a zero-based MR on part of a DM, reached by local and
remote work requests like any MR."""

from __future__ import annotations

import errno
import os

from ..uapi.commands import CMD
from ..uapi.limits import DM_ALIGNMENT, MAX_DM_SIZE
from ..uapi.shm import SharedRegion
from .base import PDObject, VerbsObject
from .errors import PyverbsRDMAError, PyverbsUserError


def _c_size(value):
    """A size as pyverbs' C size_t field takes it: a float is truncated
    (Cython converts through __int__; the suite computes sizes as
    ``max_dm_size / 2 / 5``)."""
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return int(value)
    return value


class AllocDmAttr:
    """ibv_alloc_dm_attr."""

    def __init__(self, length: int = 0, log_align_req: int = 0, comp_mask: int = 0):
        self.length = length
        self.log_align_req = log_align_req
        self.comp_mask = comp_mask


class DM(VerbsObject):
    """ibv_dm: ``DM(ctx, AllocDmAttr(length))``."""

    destroy_cmd = CMD.free_dm

    def __init__(self, context, dm_attr: AllocDmAttr | None = None, **kwargs):
        self.closed = True
        self.ctx = context
        # strong references: a DMMR nobody holds any more is still registered in the daemon
        # (pyverbs deregisters it when it is collected), and must go before the DM (free_dm's EBUSY)
        self.dm_mrs: set = set()
        if kwargs.get("handle") is not None:
            self._import(context, kwargs["handle"])
            return
        if MAX_DM_SIZE <= 0:
            raise PyverbsUserError("Device doesn't support dm allocation")
        if dm_attr is None:
            dm_attr = AllocDmAttr()
        length = _c_size(dm_attr.length)

        def refused(err: int, why: str = "") -> PyverbsRDMAError:
            return PyverbsRDMAError(f"Failed to allocate device memory of size {length}."
                                    f" Max available size {MAX_DM_SIZE}.{why}", err)

        if type(length) is not int or length <= 0 or dm_attr.comp_mask:
            raise refused(errno.EINVAL)
        if length > MAX_DM_SIZE:                       # (the daemon checks the pool; this spares the memfd)
            raise refused(errno.ENOMEM)
        self.length = length
        self.region = SharedRegion(length, "softrdma-dm")
        try:
            reply, _ = context.conn.call(CMD.alloc_dm, fds=[self.region.fd], length=length,
                                         log_align_req=int(dm_attr.log_align_req))
        except PyverbsRDMAError as e:
            self.region.close()
            reason = getattr(e, "reason", None)
            raise refused(e.error_code, f" ({reason})" if reason else "") from None
        self.handle = reply["dm"]
        self.closed = False

    def _import(self, context, handle: int) -> None:
        """ibv_import_dm: the DM ``handle`` of the connection this context
        shares with another (Context(cmd_fd=...)); the daemon hands over its
        memory (the memfd) to map, so both contexts copy to and from the
        same device memory.  The original frees it, not this one."""
        try:
            reply, fds = context.conn.call(CMD.query_dm, want_fds=1, dm=handle)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to import DM", e.error_code) from None
        try:
            self.region = SharedRegion.map_fd(fds[0], reply["length"])
        except ValueError:
            raise PyverbsRDMAError("Failed to import DM", errno.EINVAL) from None
        finally:
            os.close(fds[0])
        self.length = reply["length"]
        self.handle = handle
        self.destroy_cmd = None
        self.closed = False

    def unimport(self) -> None:
        """ibv_unimport_dm: forget an imported DM; it stays its original's."""
        self.close()

    def add_ref(self, obj) -> None:
        self.dm_mrs.add(obj)

    def _close_children(self) -> None:
        for mr in list(self.dm_mrs):
            mr.close()
        self.dm_mrs.clear()

    def _bounds(self, dm_offset: int, length: int) -> int:
        """mlx5's check of a copy: 0, or the errno it returns."""
        if type(dm_offset) is not int or type(length) is not int or dm_offset < 0 or length < 0 \
                or dm_offset + length > self.length:
            return errno.EFAULT
        if dm_offset % DM_ALIGNMENT or length % DM_ALIGNMENT:       # the device copies 4-byte words
            return errno.EINVAL
        return 0

    def copy_to_dm(self, dm_offset: int, data, length: int) -> None:
        if isinstance(data, str):
            data = data.encode()
        err = self._bounds(dm_offset, length) if not self.closed else errno.EINVAL
        if err:
            raise PyverbsRDMAError("Failed to copy to dm", err)
        self.region.view[dm_offset:dm_offset + length] = bytes(data[:length]).ljust(length, b"\0")

    def copy_from_dm(self, dm_offset: int, length: int) -> bytes:
        err = self._bounds(dm_offset, length) if not self.closed else errno.EINVAL
        if err:
            raise PyverbsRDMAError("Failed to copy from dm", err)
        return bytes(self.region.view[dm_offset:dm_offset + length])

    def export_dmabuf_fd(self) -> int:
        """ibv_dm_export_dmabuf_fd (rdma-core 64): a dma-buf is a kernel
        device's export; this memory is a memfd in the daemon: EOPNOTSUPP."""
        raise PyverbsRDMAError("Failed to export DM as dmabuf FD", errno.EOPNOTSUPP)

    def _release(self) -> None:
        self.region.close()


class DMMR(PDObject):
    """ibv_reg_dm_mr: ``DMMR(pd, length, access, dm, offset)``.  Zero-based:
    ``buf`` is 0, and a work request addresses the MR from 0.  ``write`` and
    ``read`` copy to and from the DM (at a DM offset, as pyverbs has it)."""

    destroy_cmd = CMD.dereg_mr
    close_rank = 4

    def __init__(self, pd, length, access, dm: DM, offset):
        self.closed = True
        length, offset = _c_size(length), _c_size(offset)
        try:
            reply, _ = pd.ctx.conn.call(CMD.reg_dm_mr, pd=pd.handle, dm=dm.handle, offset=offset,
                                        length=length, access=int(access))
        except PyverbsRDMAError as e:
            reason = getattr(e, "reason", None)
            raise PyverbsRDMAError(f"Failed to register a device MR. length: {length}, access flags: {access}"
                                   + (f" ({reason})" if reason else ""), e.error_code) from None
        self.pd = pd
        self.dm = dm
        self.length = length
        self.access = int(access)
        self.offset = offset
        self.buf = 0
        self.handle = reply["mr"]
        self.lkey = reply["lkey"]
        self.rkey = reply["rkey"]
        self.closed = False
        pd.add_ref(self)
        dm.add_ref(self)

    def write(self, data, length, offset=0):
        if isinstance(data, str):
            data = data.encode()
        return self.dm.copy_to_dm(offset, data, length)

    def read(self, length, offset):
        return self.dm.copy_from_dm(offset, length)


__all__ = ["AllocDmAttr", "DM", "DMMR"]
