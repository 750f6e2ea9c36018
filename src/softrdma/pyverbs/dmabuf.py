"""pyverbs.dmabuf: a dma-buf exported by a GPU's DRM render node
(pyverbs/dmabuf.pyx over rdma-core's dmabuf_alloc.c).

Allocation opens /dev/dri/renderD<128+gpu> as rdma-core does, so a machine
without one fails with that open's errno (ENOENT, EACCES) exactly as
pyverbs does; where the node exists, exporting a GEM buffer is not
implemented by softrdma and fails with EOPNOTSUPP."""

import errno
import os

from ..verbs.errors import PyverbsRDMAError


class DmaBuf:
    def __init__(self, size, gpu=0, gtt=0):
        self.size = size
        self.gpu = gpu
        self.gtt = gtt
        msg = f'Failed to allocate dmabuf of size {size} on gpu {gpu}'
        try:
            fd = os.open(f"/dev/dri/renderD{128 + gpu}", os.O_RDWR)
        except OSError as ex:
            raise PyverbsRDMAError(msg, ex.errno) from None
        os.close(fd)
        raise PyverbsRDMAError(msg, errno.EOPNOTSUPP)  # no GEM buffer export in softrdma
