"""Shared memory between the verbs library and the daemon: regions and rings.

``SharedRegion`` is a memfd mapped MAP_SHARED; the fd crosses the control
socket with SCM_RIGHTS and the peer maps the same pages.  ``Ring`` lays a
single-producer/single-consumer queue over a region:

    header (64 bytes)
      0  u32 magic         'SRNG'
      4  u32 slot_size
      8  u32 nslots        power of two
     16  u32 producer      free-running index, written only by the producer
     32  u32 consumer      free-running index, written only by the consumer
     40  u32 flags         RING_CONSUMER_SLEEPING: ring the doorbell
     44  u32 notify        CQ arm state (NOTIFY_*), written by the library
     48  u32 notify_sn     bumped by the library on each arm
    slots: nslots * slot_size bytes

Ordering: the producer writes a slot, then the producer index; the
consumer reads the index, then the slot.  Both sides are CPython on the
same x86-64 host, whose stores are seen in program order (TSO); a port to
a weakly ordered CPU needs a fence between the two steps.

Work queues use the indices.  Completion queues add an owner bit in each
CQE (``device.abi``) that flips on every wrap, so the consumer (``poll_cq``)
tells a new entry from an old one without reading the producer index; the
consumer index is still published so the producer can detect overrun.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

MAGIC = 0x474E5253            # 'SRNG' little-endian
HEADER_BYTES = 64
_U32 = struct.Struct("<I")
_HDR = struct.Struct("<III")  # magic, slot_size, nslots
OFF_PRODUCER = 16
OFF_CONSUMER = 32
OFF_FLAGS = 40
OFF_NOTIFY = 44
OFF_NOTIFY_SN = 48
W_PRODUCER, W_CONSUMER, W_FLAGS, W_NOTIFY, W_NOTIFY_SN = (o // 4 for o in (OFF_PRODUCER, OFF_CONSUMER, OFF_FLAGS,
                                                                         OFF_NOTIFY, OFF_NOTIFY_SN))

RING_CONSUMER_SLEEPING = 1    # the consumer waits on its doorbell: write it

NOTIFY_NONE = 0
NOTIFY_NEXT = 1               # ibv_req_notify_cq(cq, 0)
NOTIFY_SOLICITED = 2          # ibv_req_notify_cq(cq, 1)


class SharedRegion:
    """A memfd of ``size`` bytes mapped shared; ``fd`` for SCM_RIGHTS."""

    def __init__(self, size: int, name: str = "softrdma", fd: int | None = None):
        if size <= 0:
            raise ValueError("size must be positive")
        self.size = size
        own = fd is None
        if own:
            fd = os.memfd_create(name, os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
            except OSError:
                os.close(fd)
                raise
        elif os.fstat(fd).st_size < size:
            raise ValueError(f"shared memory fd holds {os.fstat(fd).st_size} bytes, {size} needed")
        self.fd = fd
        self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.mm)

    @classmethod
    def attach(cls, fd: int, size: int) -> "SharedRegion":
        """Map a region received from the peer (takes ownership of ``fd``)."""
        return cls(size, fd=fd)

    @property
    def address(self) -> int:
        """The region's address in this process (what MR.buf reports)."""
        return ctypes.addressof(ctypes.c_char.from_buffer(self.mm))

    def close(self) -> None:
        if self.fd < 0:
            return
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            # Views of the region are still alive somewhere; the mapping
            # goes when they do.  The fd can go now.
            pass
        os.close(self.fd)
        self.fd = -1


class Ring:
    """A ring of fixed-size slots in a ``SharedRegion``.

    Create it on one side with ``Ring.create(nslots, slot_size)`` and attach
    on the other with ``Ring.attach(fd)``; each side then only produces or
    only consumes."""

    def __init__(self, region: SharedRegion):
        magic, slot_size, nslots = _HDR.unpack_from(region.view, 0)
        if magic != MAGIC or nslots & (nslots - 1) or not nslots or not slot_size:
            raise ValueError("not a softrdma ring")
        if region.size < HEADER_BYTES + nslots * slot_size:
            raise ValueError("ring region too small")
        self.region = region
        self.buf = region.view
        # The header words as one u32 array: item assignment is a single
        # aligned 4-byte store, so the other process never sees a torn or
        # zeroed index (struct.pack_into zero-fills its field before writing).
        self.words = region.view[:HEADER_BYTES].cast("I")
        self.slot_size = slot_size
        self.nslots = nslots
        self.mask = nslots - 1
        self.shift = nslots.bit_length() - 1

    @classmethod
    def create(cls, nslots: int, slot_size: int, name: str = "softrdma-ring") -> "Ring":
        n = 1
        while n < nslots:
            n <<= 1
        region = SharedRegion(HEADER_BYTES + n * slot_size, name)
        _HDR.pack_into(region.view, 0, MAGIC, slot_size, n)
        return cls(region)

    @classmethod
    def attach(cls, fd: int) -> "Ring":
        size = os.fstat(fd).st_size
        return cls(SharedRegion.attach(fd, size))

    @property
    def fd(self) -> int:
        return self.region.fd

    # -- indices (whole-word loads and stores, see __init__)
    @property
    def producer(self) -> int:
        return self.words[W_PRODUCER]

    @producer.setter
    def producer(self, v: int) -> None:
        self.words[W_PRODUCER] = v & 0xFFFFFFFF

    @property
    def consumer(self) -> int:
        return self.words[W_CONSUMER]

    @consumer.setter
    def consumer(self, v: int) -> None:
        self.words[W_CONSUMER] = v & 0xFFFFFFFF

    @property
    def flags(self) -> int:
        return self.words[W_FLAGS]

    @flags.setter
    def flags(self, v: int) -> None:
        self.words[W_FLAGS] = v & 0xFFFFFFFF

    @property
    def notify(self) -> tuple[int, int]:
        """(NOTIFY_* state, arm sequence number)."""
        w = self.words
        return w[W_NOTIFY], w[W_NOTIFY_SN]

    def arm(self, solicited_only: bool) -> None:
        w = self.words
        w[W_NOTIFY_SN] = (w[W_NOTIFY_SN] + 1) & 0xFFFFFFFF
        w[W_NOTIFY] = NOTIFY_SOLICITED if solicited_only else NOTIFY_NEXT

    def disarm(self) -> None:
        self.words[W_NOTIFY] = NOTIFY_NONE

    # -- slots
    def slot_offset(self, index: int) -> int:
        return HEADER_BYTES + (index & self.mask) * self.slot_size

    def slot(self, index: int) -> memoryview:
        off = HEADER_BYTES + (index & self.mask) * self.slot_size
        return self.buf[off:off + self.slot_size]

    def phase(self, index: int) -> int:
        """Owner-bit value that marks slot ``index`` as written in its pass."""
        return ((index >> self.shift) & 1) ^ 1

    def free(self) -> int:
        """Slots the producer may still fill."""
        return self.nslots - ((self.producer - self.consumer) & 0xFFFFFFFF)

    def pending(self) -> int:
        """Slots the consumer may still take."""
        return (self.producer - self.consumer) & 0xFFFFFFFF

    def close(self) -> None:
        self.buf = None
        self.words.release()
        self.region.close()
