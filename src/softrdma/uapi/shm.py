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
CQE (``uapi.abi``) that flips on every wrap, so the consumer (``poll_cq``)
tells a new entry from an old one without reading the producer index; the
consumer index is still published so the producer can detect overrun.

A ring need not start at the memfd's beginning: a parent domain's queue
over an allocator's huge pages lives inside a hugetlb memfd that backs
those whole pages (``verbs.pd``), and rings of two queues may share one
huge page.  Such a ring's fd is an open file description of its own, and
its *file offset* (lseek) is where the ring's header is: the peer reads it
with ``lseek(fd, 0, SEEK_CUR)`` and maps the pages around the ring -- a
memfd's file offset is otherwise never used (both sides mmap and pread),
so a plain ring's is 0, as before.  A hugetlbfs file is mapped in whole
huge pages (its ``st_blksize``), so a mapping of one is rounded to them.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import stat
import struct

MAGIC = 0x474E5253            # 'SRNG' little-endian
_MFD_HUGE_SHIFT = 26          # memfd_create: log2 of the huge page size, MFD_HUGE_2MB = 21 << 26
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
    """A memfd of ``size`` bytes mapped shared; ``fd`` for SCM_RIGHTS.

    The creator's memfd is sealed against shrinking (F_SEAL_SHRINK) once it
    has its size: the peer maps it, and a file cut under a mapping makes
    every access past the new end SIGBUS -- a process that shrank the
    memory it handed to the daemon could kill it.  The other side maps a
    region with ``map_fd``/``attach``, which refuse an fd without that seal
    or shorter than needed."""

    def __init__(self, size: int, name: str = "softrdma", fd: int | None = None, offset: int = 0,
                 owned: bool = False, huge_page: int = 0):
        if size <= 0:
            raise ValueError("size must be positive")
        self.size = size
        self.closed = False
        self.offset = 0                  # where the region starts in ``mm`` (a window: see map_window)
        own = fd is None
        if owned:
            self.fd = -1                 # (closed by close() only once the window is mapped)
            self.mm, self.offset = _map_window(fd, offset, size)
            self.fd = fd
        elif own:
            # huge_page: a hugetlb memfd of pages of that size (MFD_HUGE_*), the
            # file whole pages; its mapping reserves them (OSError ENOMEM when
            # the system has too few free)
            flags, length = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING, size
            if huge_page:
                flags |= os.MFD_HUGETLB | (huge_page.bit_length() - 1) << _MFD_HUGE_SHIFT
                length = -(-size // huge_page) * huge_page
            fd = os.memfd_create(name, flags)
            try:
                os.ftruncate(fd, length)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
                self.mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd
        else:
            self.mm, self.offset = _map_window(fd, offset, size)
            self.fd = -1                 # the mapping is all we need; the fd stays its owner's
        self._whole = memoryview(self.mm)
        self.view = self._whole[self.offset:self.offset + size] if self.offset or len(self.mm) != size \
            else self._whole

    @classmethod
    def map_fd(cls, fd: int, size: int, offset: int = 0) -> "SharedRegion":
        """Map ``size`` bytes at ``offset`` of a sealed memfd received from
        the peer.  The fd stays the caller's (to close); the mapping lives
        on without it.  ValueError if the fd is not such a memfd or is too
        short."""
        return cls(size, fd=fd, offset=offset)

    @classmethod
    def window(cls, fd: int, offset: int, size: int) -> "SharedRegion":
        """``size`` bytes at ``offset`` of a sealed memfd of this process's
        own, taking ``fd`` (closed with the region, on success only)."""
        return cls(size, fd=fd, offset=offset, owned=True)

    @classmethod
    def attach(cls, fd: int, size: int) -> "SharedRegion":
        """``map_fd``, then close ``fd`` (ownership taken on success only)."""
        region = cls.map_fd(fd, size)
        os.close(fd)
        return region

    @property
    def address(self) -> int:
        """The region's address in this process (what MR.buf reports)."""
        return ctypes.addressof(ctypes.c_char.from_buffer(self.mm)) + self.offset

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.view.release()
        self._whole.release()
        try:
            self.mm.close()
        except BufferError:
            # Views of the region are still alive somewhere; the mapping
            # goes when they do.  The fd can go now.
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def check_sealed(fd: int, size: int) -> None:
    """ValueError unless ``fd`` is a memfd sealed against shrinking
    (F_SEAL_SHRINK) that holds at least ``size`` bytes: only such memory can
    be mapped without the peer being able to make our accesses SIGBUS."""
    try:
        st = os.fstat(fd)
    except OSError as e:
        raise ValueError(f"fd {fd}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("shared memory fd is not a memfd")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise ValueError("shared memory fd is not a memfd (no seals)") from None
    if not seals & fcntl.F_SEAL_SHRINK:
        raise ValueError("shared memory fd is not sealed against shrinking (memfd_create with"
                         " MFD_ALLOW_SEALING, then F_ADD_SEALS F_SEAL_SHRINK)")
    if st.st_size < size:
        raise ValueError(f"shared memory fd holds {st.st_size} bytes, {size} needed")


def _map_window(fd: int, offset: int, size: int) -> tuple[mmap.mmap, int]:
    """The pages of sealed memfd ``fd`` that hold [offset, offset + size),
    mapped shared, and where ``offset`` is in the mapping.  A hugetlbfs
    file maps only whole huge pages (``st_blksize``): the mapping is
    rounded out to them, never cut inside one (munmap could not undo it)."""
    check_sealed(fd, offset + size)
    grain = max(os.fstat(fd).st_blksize, mmap.ALLOCATIONGRANULARITY)
    start = offset - offset % grain
    length = offset + size - start
    if grain > mmap.PAGESIZE:
        length = -(-length // grain) * grain      # (check_sealed: the file is whole huge pages)
    mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
    return mm, offset - start


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

    @staticmethod
    def nslots_for(nslots: int) -> int:
        """The ring's slot count for ``nslots`` asked: the power of two at or above."""
        n = 1
        while n < nslots:
            n <<= 1
        return n

    @classmethod
    def create(cls, nslots: int, slot_size: int, name: str = "softrdma-ring") -> "Ring":
        n = cls.nslots_for(nslots)
        region = SharedRegion(HEADER_BYTES + n * slot_size, name)
        _HDR.pack_into(region.view, 0, MAGIC, slot_size, n)
        return cls(region)

    @classmethod
    def create_at(cls, fd: int, offset: int, nslots: int, slot_size: int) -> "Ring":
        """A new ring at ``offset`` of a sealed memfd of this process's own,
        taking ``fd`` (on success): an open file description of the ring's
        alone, since its file offset is set to ``offset`` for the peer
        (see the module's docstring).  The ring's bytes are zeroed."""
        n = cls.nslots_for(nslots)
        size = HEADER_BYTES + n * slot_size
        os.lseek(fd, offset, os.SEEK_SET)
        region = SharedRegion.window(fd, offset, size)
        region.view[:] = bytes(size)
        _HDR.pack_into(region.view, 0, MAGIC, slot_size, n)
        return cls(region)

    @classmethod
    def map_fd(cls, fd: int) -> "Ring":
        """The ring in a sealed memfd from the peer (``SharedRegion.map_fd``:
        the fd stays the caller's), at the fd's file offset.  ValueError if
        it is no ring."""
        try:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError as e:
            raise ValueError(f"cannot tell where the ring is: {e.strerror}") from None
        check_sealed(fd, offset + HEADER_BYTES)
        try:
            hdr = os.pread(fd, HEADER_BYTES, offset)
        except OSError as e:
            raise ValueError(f"cannot read the ring header: {e.strerror}") from None
        magic, slot_size, nslots = _HDR.unpack_from(hdr.ljust(HEADER_BYTES, b"\0"), 0)
        if magic != MAGIC or nslots & (nslots - 1) or not nslots or not slot_size:
            raise ValueError("not a softrdma ring")
        # map what the header says the ring needs (Ring() checks it again in
        # the mapping: the peer may rewrite the header meanwhile)
        region = SharedRegion.map_fd(fd, HEADER_BYTES + nslots * slot_size, offset)
        try:
            return cls(region)
        except BaseException:
            region.close()
            raise

    @classmethod
    def attach(cls, fd: int) -> "Ring":
        """``map_fd``, then close ``fd`` (ownership taken on success only)."""
        ring = cls.map_fd(fd)
        os.close(fd)
        return ring

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
