"""pyverbs.dma_util: rdma-core's util/udma_barrier.h and util/mmio.h for
Python (pyverbs/dma_util.pyx): ordering barriers and big-endian MMIO
writes to an address (a doorbell, a buffer).

Every ctypes store below is a completed C call, so the program order of
Python statements is the memory order the barriers ask for: the barriers
have nothing left to order (on x86 they are compiler barriers too)."""

import ctypes


def udma_to_dev_barrier():
    """Order CPU writes before a device reads them (nothing to do here)."""


def udma_from_dev_barrier():
    """Order device writes before the CPU reads them (nothing to do here)."""


def mmio_write64_as_be(addr, val):
    ctypes.memmove(addr, int(val).to_bytes(8, "big"), 8)


def mmio_write32_as_be(addr, val):
    ctypes.memmove(addr, int(val).to_bytes(4, "big"), 4)
