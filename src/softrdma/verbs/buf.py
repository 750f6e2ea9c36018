"""rdma-core 64's provider-aware buffers and extended MR registration
(pyverbs.mr: ``Buf``, ``BufMR``, ``MREx``, ``DMAHandle``, ``DmaHandleInitAttr``).

``Buf`` is ibv_alloc_buf: memory whose kind the provider chooses for a PD.
softrdma's choice is the one memory the daemon can reach without the
process's help, a shared memfd (as ``MR`` allocates); an MR on (part of)
it is ``BufMR`` (ibv_reg_buf_mr) or ``MREx(..., buf=buf)`` (ibv_reg_mr_ex
with IBV_REG_MR_MASK_BUF): the daemon maps the Buf's memfd at the MR's
offset.  The checks are libibverbs' fill_mr_init_attr_from_buf: the Buf's
PD, and the range inside the Buf, else EINVAL.

``MREx`` without a Buf is ibv_reg_mr_ex over the legacy registration, as
libibverbs does for a provider without reg_mr_ex (rxe): the library's own
memory, an IOVA if given; a dma-buf fd or a DMA handle cannot be expressed
that way: EOPNOTSUPP.  ``DMAHandle`` (ibv_alloc_dmah: PCIe TLP processing
hints) is EOPNOTSUPP, as on rxe: a software device has no PCIe function.
"""

from __future__ import annotations

import errno
import weakref

from .errors import PyverbsError, PyverbsRDMAError
from .mr import MR, _why
from ..uapi.commands import CMD
from ..uapi.shm import SharedRegion


class Buf:
    """``Buf(pd, size)``: ibv_alloc_buf.  ``addr`` and ``size`` as pyverbs'."""

    close_rank = 5                     # after the MRs on it (a PD closes its MRs at rank 4)

    def __init__(self, pd, size: int):
        if size <= 0:
            raise PyverbsRDMAError(f"Failed to allocate ibv_buf of size {size}", errno.EINVAL)
        self.pd = pd
        self.size = size
        self.region = SharedRegion(size, "softrdma-buf")
        self.addr = self.region.address
        self.mrs: weakref.WeakSet = weakref.WeakSet()
        self.closed = False
        pd.add_ref(self)

    def add_ref(self, mr) -> None:
        if not isinstance(mr, MR):
            raise PyverbsError("Unrecognized object type")
        self.mrs.add(mr)

    def close(self) -> None:
        """ibv_free_buf, after deregistering the MRs on it (pyverbs' close_weakrefs)."""
        if self.closed:
            return
        for mr in list(self.mrs):
            mr.close()
        self.closed = True
        self.region.close()
        self.pd._refs.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __str__(self) -> str:
        return f"Buf:\n{'addr':22}: {self.addr:<20}\n{'size':22}: {self.size:<20}\n"


def _register_on_buf(mr: MR, pd, buf: Buf, addr: int, length: int, access: int, what: str) -> None:
    """Make ``mr`` an MR on ``length`` bytes of ``buf`` from ``addr``
    (libibverbs' fill_mr_init_attr_from_buf checks, then reg_mr at the offset)."""
    if buf.closed or pd is not buf.pd:
        raise PyverbsRDMAError(what, errno.EINVAL)
    off = addr - buf.addr
    if off < 0 or off > buf.size or length > buf.size - off or length <= 0:
        raise PyverbsRDMAError(what, errno.EINVAL)
    mr.pd, mr.length, mr.access = pd, length, int(access)
    mr.region = buf.region
    mr.buf = addr
    mr._view = buf.region.view[off:off + length]
    mr.backing_buf = buf
    try:
        reply, _ = pd.ctx.conn.call(CMD.reg_mr, fds=[buf.region.fd], pd=pd.handle, length=length,
                                    access=mr.access, addr=addr, offset=off)
    except PyverbsRDMAError as e:
        mr._view.release()
        raise PyverbsRDMAError(what + _why(e), e.error_code) from None
    mr.handle, mr.lkey, mr.rkey = reply["mr"], reply["lkey"], reply["rkey"]
    mr.closed = False
    pd.add_ref(mr)
    buf.add_ref(mr)


class _OnBuf:
    """What an MR on a Buf does differently: the memory is the Buf's."""

    def _release(self) -> None:
        if getattr(self, "backing_buf", None) is not None:
            self._view.release()           # the region stays the Buf's (ibv_free_buf frees it)
        else:
            super()._release()


class BufMR(_OnBuf, MR):
    """``BufMR(pd, buf, length, access, offset=0)``: ibv_reg_buf_mr on
    ``length`` bytes of ``buf`` from ``offset``."""

    def __init__(self, pd, buf: Buf, length: int = 0, access: int = 0, offset: int = 0):
        _register_on_buf(self, pd, buf, buf.addr + offset, length, access,
                         f"Failed to register a buf MR. length: {length}, access flags: {access}")


class MREx(_OnBuf, MR):
    """``MREx(pd, length, access, address=None, iova=None, fd=None,
    fd_offset=0, dmah=None, implicit=False, buf=None)``: ibv_reg_mr_ex."""

    def __init__(self, pd, length: int = 0, access: int = 0, address=None, iova=None, fd=None, fd_offset: int = 0,
                 dmah=None, implicit: bool = False, buf: Buf | None = None, **kw):
        what = "Failed to register MR using extended API"
        self.backing_buf = None
        self.dmah = dmah
        if dmah is not None or fd is not None:
            # the legacy registration libibverbs falls back to has neither (dummy_ops reg_mr_ex)
            raise PyverbsRDMAError(what, errno.EOPNOTSUPP)
        if buf is not None:
            _register_on_buf(self, pd, buf, buf.addr if address is None else address, length, access, what)
            return
        try:
            if address is not None or implicit:
                MR.__init__(self, pd, length, access, address=address, implicit=implicit)
            elif iova is None:
                MR.__init__(self, pd, length, access)
            else:
                self._register_at_iova(pd, length, access, iova)
        except PyverbsRDMAError as e:        # pyverbs' message for ibv_reg_mr_ex, the same errno
            raise PyverbsRDMAError(what + _why(e), e.error_code) from None

    def _register_at_iova(self, pd, length: int, access: int, iova: int) -> None:
        """ibv_reg_mr with hca_va = ``iova``: the peer and the SGEs address
        the MR by its IOVA; ``buf`` is where the bytes are here."""
        if length <= 0:
            raise PyverbsRDMAError("length must be positive", errno.EINVAL)
        self.pd, self.length, self.access = pd, length, int(access)
        self.region = SharedRegion(length, "softrdma-mr")
        self.buf = self.region.address
        self._view = self.region.view[:length]
        try:
            reply, _ = pd.ctx.conn.call(CMD.reg_mr, fds=[self.region.fd], pd=pd.handle, length=length,
                                        access=self.access, addr=iova)
        except PyverbsRDMAError:
            self._view.release()
            self.region.close()
            raise
        self.iova = iova
        self.handle, self.lkey, self.rkey = reply["mr"], reply["lkey"], reply["rkey"]
        self.closed = False
        pd.add_ref(self)

    def __str__(self) -> str:
        f = "{:22}: {:<20}\n"
        return ("MREx:\n" + f.format("lkey", self.lkey) + f.format("rkey", self.rkey)
                + f.format("length", self.length) + f.format("buf", self.buf) + f.format("handle", self.handle))


class DmaHandleInitAttr:
    """ibv_dmah_init_attr."""

    def __init__(self, comp_mask: int = 0, cpu_id: int = 0, ph: int = 0, tph_mem_type: int = 0):
        self.comp_mask = comp_mask
        self.cpu_id = cpu_id
        self.ph = ph
        self.tph_mem_type = tph_mem_type

    def __str__(self) -> str:
        f = "{:22}: {:<20}\n"
        return ("DmaHandleInitAttr:\n" + f.format("comp_mask", self.comp_mask) + f.format("cpu_id", self.cpu_id)
                + f.format("ph", self.ph) + f.format("tph_mem_type", self.tph_mem_type))


class DMAHandle:
    """ibv_alloc_dmah: TLP processing hints are a PCIe function's; softrdma,
    like rxe (libibverbs' default alloc_dmah), has none."""

    def __init__(self, ctx, init_attr: DmaHandleInitAttr):
        raise PyverbsRDMAError("Failed to create DMA Handle", errno.EOPNOTSUPP)


__all__ = ["Buf", "BufMR", "MREx", "DMAHandle", "DmaHandleInitAttr"]
