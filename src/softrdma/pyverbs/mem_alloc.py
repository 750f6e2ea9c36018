"""pyverbs.mem_alloc: raw memory helpers over ctypes (same names)."""

import ctypes
import mmap as _mmap

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


def mmap(length: int, prot=_mmap.PROT_READ | _mmap.PROT_WRITE, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS,
         offset: int = 0, fd: int = -1) -> int:
    m = _mmap.mmap(fd, length, flags=flags, prot=prot, offset=offset)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    _keep[addr] = m
    return addr


def munmap(addr: int, length: int = 0) -> None:
    _keep.pop(addr, None)


def read64(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr).value


def write64(addr: int, val: int) -> None:
    ctypes.c_uint64.from_address(addr).value = val


def writebuf(addr: int, data: bytes, offset: int = 0) -> None:
    ctypes.memmove(addr + offset, data, len(data))
