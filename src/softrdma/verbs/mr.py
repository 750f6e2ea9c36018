"""Memory region (pyverbs.mr.MR): memory the library allocates in shared
memory, so the daemon reaches it without the process's help."""

from __future__ import annotations

import errno

from ..device.shm import SharedRegion
from .errors import PyverbsRDMAError


class MR:
    def __init__(self, pd, length: int, access: int, address=None, implicit: bool = False, **kw):
        if address is not None or implicit:
            raise PyverbsRDMAError("Failed to register a MR over caller memory: softrdma registers the"
                                   " memory it allocates (MR(pd, length, access))", errno.EOPNOTSUPP)
        if length <= 0:
            raise PyverbsRDMAError("Failed to register a MR", errno.EINVAL)
        self.pd = pd
        self.length = length
        self.access = int(access)
        self.region = SharedRegion(length, "softrdma-mr")
        self.buf = self.region.address
        try:
            reply, _ = pd.ctx.conn.call("reg_mr", fds=[self.region.fd], pd=pd.handle, length=length,
                                        access=self.access, addr=self.buf)
        except PyverbsRDMAError:
            self.region.close()
            raise
        self.handle = reply["mr"]
        self.lkey = reply["lkey"]
        self.rkey = reply["rkey"]
        self.closed = False

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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            ctx = self.pd.ctx
            if not ctx.closed and not ctx.conn.dead:
                ctx.conn.call("dereg_mr", mr=self.handle)
            self.region.close()
