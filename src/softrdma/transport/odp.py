"""The second kind of MR memory: pages of another address space, reached
on demand (ODP, and MRs on memory the application supplied).

An MR over the library's shared memory has a memoryview as its ``view``
and every access is a slice of it.  An MR over an application's own pages
has a ``PagedSpace`` instead: the same slicing the ``Memory`` interface
does (``MemoryTable.local_view``/``remote_view``: ``mr.view[off:off + n]``)
first *faults the range in* -- the analogue of rxe_odp_map_range_and_lock /
hmm_range_fault before the copy -- and gives a ``PagedView`` of exactly
those bytes, or None when a page is not mapped (the caller's None path:
a local protection error, a remote access NAK, as rxe's -EFAULT).  A
``PagedView`` reads and writes through its ``Pages`` source, copying only
what is sliced: ``view[a:b]`` is the bytes, ``view[a:b] = data`` stores
them, ``bytes(view)`` all of them -- what the engines do with a memoryview.

The source is not here: ``Pages`` is the interface (the daemon's is
``device.odp.ProcessPages``, over process_vm_readv/writev on the
application's pid; ``BytesPages`` is a pure one for the simulator and
tests), so the transport stays sans-IO.

A store the source refuses after the fault-in succeeded (the process
unmapped or write-protected the page between the two) cannot be reported
through the engines, which treat memory as infallible once resolved: it is
dropped and counted in ``Pages.lost``, and a read that fails that way reads
zeros -- the software analogue of the device losing a race with an
invalidation the kernel would have retried.

Atomics on such memory are the responder's read-modify-write through the
view: ``int.from_bytes(view)`` (one load of the 8 bytes) then
``view[0:8] = ...`` (one store).  Against every other access of the device
it is atomic -- the daemon's engines run one at a time, nothing else of the
device touches the word in between -- as rxe's atomic_ops_lock makes its
ODP atomics atomic against each other.  Against the process's own CPU it is
not, exactly as rxe over ODP (a plain load and store of the kmapped page
under a lock the CPU does not take): a store the process makes between the
device's load and store is lost, overwritten by the device's result, and a
process that wants atomicity against the device must not write the word
while an atomic may target it (the IBA's rule for host access to memory
a remote atomic targets).  One difference remains: rxe's store is one
aligned 8-byte store, which a CPU reader sees whole; the daemon's is a
process_vm_writev of the 8 bytes, a kernel copy that makes no promise to
move them at once, so a CPU reading the word during that copy may see a
mix of the old and new bytes.
"""

from __future__ import annotations

from typing import Protocol

PAGE_SHIFT = 12
PAGE = 1 << PAGE_SHIFT


class Pages(Protocol):
    lost: int                          # stores/loads refused after the range was faulted in

    def fault(self, addr: int, length: int, write: bool) -> bool: ...
    def read(self, addr: int, length: int) -> bytes | None: ...
    def write(self, addr: int, data) -> bool: ...


def pages_of(addr: int, length: int) -> range:
    """The page addresses ``[addr, addr + length)`` touches."""
    return range(addr & ~(PAGE - 1), addr + length, PAGE)


class PagedView:
    """``length`` bytes at ``addr`` of a ``Pages`` source, faulted in."""

    __slots__ = ("pages", "addr", "length")

    def __init__(self, pages: Pages, addr: int, length: int):
        self.pages = pages
        self.addr = addr
        self.length = length

    def __len__(self) -> int:
        return self.length

    def _range(self, key) -> tuple[int, int]:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a paged view is sliced with [a:b]")
        start, stop, _ = key.indices(self.length)
        return start, max(stop - start, 0)

    def __getitem__(self, key) -> bytes:
        start, n = self._range(key)
        data = self.pages.read(self.addr + start, n) if n else b""
        if data is None:
            self.pages.lost += 1
            return bytes(n)
        return data

    def __setitem__(self, key, data) -> None:
        start, n = self._range(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)             # another paged view
        if len(data) != n:
            raise ValueError(f"{len(data)} bytes into a {n}-byte slice")
        if n and not self.pages.write(self.addr + start, data):
            self.pages.lost += 1

    def __bytes__(self) -> bytes:
        return self[0:self.length]

    def __repr__(self) -> str:
        return f"PagedView(0x{self.addr:x}, {self.length})"


class PagedSpace:
    """An MR's pages: ``base`` is the MR's first address, ``length`` its
    size (an implicit MR: the whole address space from 0).  Slicing faults
    the range in for reading and gives a ``PagedView`` or None; ``window``
    is a sub-range without faulting (a memory window bound on the MR)."""

    __slots__ = ("pages", "base", "length")

    def __init__(self, pages: Pages, base: int, length: int):
        self.pages = pages
        self.base = base
        self.length = length

    def __getitem__(self, key) -> PagedView | None:
        # the bounds were checked by the MR table; the slice is [off:off+n]
        addr = self.base + key.start
        n = key.stop - key.start
        if n <= 0:
            return PagedView(self.pages, addr, 0)
        if not self.pages.fault(addr, n, False):
            return None
        return PagedView(self.pages, addr, n)

    def window(self, off: int, length: int) -> "PagedSpace":
        return PagedSpace(self.pages, self.base + off, length)


def sub_view(view, off: int, length: int):
    """``length`` bytes at ``off`` of an MR's view, as a memory window's
    view: a memoryview slice, or a paged sub-range (faulted on access)."""
    if type(view) is memoryview:
        return view[off:off + length]
    return view.window(off, length)


class BytesPages:
    """A ``Pages`` source over a bytearray seen at ``base``, with the pages
    ``mapped`` (page addresses; None: all) and those of them ``readonly``
    -- the simulator's and the tests' process."""

    def __init__(self, size: int, base: int = 0x10000, mapped=None, readonly=()):
        self.buf = bytearray(size)
        self.base = base
        self.mapped = None if mapped is None else set(mapped)
        self.readonly = set(readonly)
        self.lost = 0
        self.faults = 0

    def _ok(self, addr: int, length: int, write: bool) -> bool:
        if addr < self.base or addr + length > self.base + len(self.buf):
            return False
        for p in pages_of(addr, length):
            if (self.mapped is not None and p not in self.mapped) or (write and p in self.readonly):
                return False
        return True

    def fault(self, addr: int, length: int, write: bool) -> bool:
        self.faults += 1
        return self._ok(addr, length, write)

    def read(self, addr: int, length: int) -> bytes | None:
        if not self._ok(addr, length, False):
            return None
        off = addr - self.base
        return bytes(self.buf[off:off + length])

    def write(self, addr: int, data) -> bool:
        if not self._ok(addr, len(data), True):
            return False
        off = addr - self.base
        self.buf[off:off + len(data)] = data
        return True
