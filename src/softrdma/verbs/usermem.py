"""Memory of the process itself under an MR (ODP, implicit ODP, or an
MR on an address the caller supplied): the daemon reaches it through the
process's address space (``device.odp``), not through shared memory.

``UserMemory`` is such an MR's buffer as pyverbs has it: the caller's
address, or page-aligned zeroed memory the library maps for it (pyverbs'
posix_memalign + memset), read and written in place.
"""

from __future__ import annotations

import ctypes
import mmap

from .errors import PyverbsError

PAGE_SIZE = mmap.PAGESIZE


HUGE_PAGE_SIZE = 0x200000
MAP_HUGETLB = 0x40000
MAP_HUGE_2MB = 21 << 26          # the size pyverbs rounds to, whatever the system's default huge page is


class UserMemory:
    def __init__(self, address: int | None, length: int, huge: bool = False):
        """``huge``: IBV_ACCESS_HUGETLB, as pyverbs allocates for it --
        2 MiB pages (the length rounded up to one), PyverbsError when the
        system has none to give."""
        self._map = None
        if address:
            self.address = int(address)
        elif length <= 0:                # (an implicit MR of no length: pyverbs allocates nothing, buf is NULL)
            self.address = 0
        else:
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            size = length
            if huge:
                flags |= MAP_HUGETLB | MAP_HUGE_2MB
                size = -(-size // HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE
            try:
                self._map = mmap.mmap(-1, size, flags=flags)
            except OSError:
                raise PyverbsError(f"Failed to allocate MR buffer of size {length}") from None
            self._anchor = ctypes.c_char.from_buffer(self._map)
            self.address = ctypes.addressof(self._anchor)

    def view(self, length: int) -> memoryview:
        """``length`` bytes at ``address`` as a writable memoryview (of the
        mapping itself, not a copy): valid while the memory is mapped."""
        return memoryview((ctypes.c_char * length).from_address(self.address)).cast("B")

    def write(self, data: bytes, offset: int) -> None:
        ctypes.memmove(self.address + offset, data, len(data))

    def read(self, length: int, offset: int) -> bytes:
        return ctypes.string_at(self.address + offset, length)

    def close(self) -> None:
        if self._map is not None:
            del self._anchor             # the export that keeps the map open
            self._map.close()
            self._map = None
