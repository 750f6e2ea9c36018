"""pyverbs.mem_alloc: raw memory helpers over ctypes (same names)."""

import ctypes
import errno as _errno
import mmap as _mmap

from ..verbs.errors import PyverbsRDMAError

_keep: dict[int, object] = {}


def malloc(size: int) -> int:
    buf = ctypes.create_string_buffer(size)
    addr = ctypes.addressof(buf)
    _keep[addr] = buf
    return addr


def posix_memalign(size: int, alignment: int = 8) -> int:
    """posix_memalign: ``size`` bytes at an address that is a multiple of
    ``alignment`` (a power of two, at least the size of a pointer)."""
    if alignment < ctypes.sizeof(ctypes.c_void_p) or alignment & (alignment - 1):
        raise ValueError(f"alignment {alignment} is not a power of two multiple of the pointer size")
    buf = ctypes.create_string_buffer(size + alignment)
    addr = -(-ctypes.addressof(buf) // alignment) * alignment
    _keep[addr] = buf
    return addr


def free(ptr: int) -> None:
    _keep.pop(ptr, None)


def mmap(addr: int = 0, length: int = 100, prot=_mmap.PROT_READ | _mmap.PROT_WRITE,
         flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS, fd: int = 0, offset: int = 0) -> int:
    """mmap(2) (pyverbs' signature); ``addr`` is only a hint, as without
    MAP_FIXED."""
    try:
        m = _mmap.mmap(-1 if flags & _mmap.MAP_ANONYMOUS else fd, length, flags=flags, prot=prot, offset=offset)
    except OSError:
        raise MemoryError('Failed to mmap memory') from None
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    _keep[addr] = m
    return addr


def munmap(addr: int, length: int = 0) -> None:
    _keep.pop(addr, None)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
MADV_DONTNEED = 4


def madvise(addr: int, length: int, flags: int = MADV_DONTNEED) -> None:
    """madvise(2) (rdma-core 64's pyverbs): the ODP tests drop an MR's pages
    with it to make the device fault them in again."""
    if _libc.madvise(addr, length, flags):
        err = ctypes.get_errno() or _errno.EINVAL
        raise PyverbsRDMAError("Failed to madvise memory", err)


def read64(addr: int, offset: int = 0) -> int:
    return ctypes.c_uint64.from_address(addr + offset).value


def write64(addr: int, val: int) -> None:
    ctypes.c_uint64.from_address(addr).value = val


def writebuf(addr: int, data: bytes, offset: int = 0) -> None:
    ctypes.memmove(addr + offset, data, len(data))


def writebe32(addr: int, val: int, offset: int = 0) -> None:
    ctypes.memmove(addr + offset, int(val).to_bytes(4, "big"), 4)


def writebe64(addr: int, val: int, offset: int = 0) -> None:
    ctypes.memmove(addr + offset, int(val).to_bytes(8, "big"), 8)


def read32(addr: int, offset: int = 0) -> int:
    return ctypes.c_uint32.from_address(addr + offset).value


# pyverbs' names for mmap(2)'s flags
MAP_PRIVATE_ = _mmap.MAP_PRIVATE
MAP_SHARED_ = _mmap.MAP_SHARED
MAP_ANONYMOUS_ = _mmap.MAP_ANONYMOUS
MAP_FIXED_ = 0x10
MAP_STACK_ = getattr(_mmap, "MAP_STACK", 0x20000)
MAP_LOCKED_ = 0x2000
MAP_HUGETLB_ = 0x40000
MAP_POPULATE_ = getattr(_mmap, "MAP_POPULATE", 0x8000)
MAP_NORESERVE_ = 0x4000
MAP_GROWSDOWN_ = 0x100
