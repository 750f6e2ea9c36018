"""perftest's buffers and what an MR on them needs (perftest_resources.c's
create_single_mr with host_memory.c and mmap_memory.c):

* ``check_odp_support`` / ``check_odp_transport_caps``: --odp asks the
  device's odp_caps first, with perftest's messages;
* ``allocate``: the buffer an MR is registered on.  The default (perftest's
  memalign) is the library's own memory -- ``MR(pd, length, access)``
  allocates it, shared with the daemon, and nothing is allocated here;
  --use_hugepages is a System V segment of huge pages (shmget with
  SHM_HUGETLB, attached and marked for removal), --mmap a MAP_SHARED
  mapping of the file at --mmap-offset: memory of the process, registered
  with ``MR(..., address=)`` (the daemon reaches it as it reaches an ODP
  MR's pages, see verbs.usermem).

A ``Buffer`` is such memory, freed (shmdt, munmap) after its MR is
deregistered.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from ...enums import (IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_RECV,
                      IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_SRQ_RECV, IBV_ODP_SUPPORT_WRITE)
from ...verbs.errors import PyverbsError
from . import params as P

HUGEPAGE_SIZE_2MB = 2 << 20
IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
SHM_R, SHM_W, SHM_HUGETLB = 0o400, 0o200, 0o4000
PROT_READ, PROT_WRITE, MAP_SHARED = 1, 2, 1
MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.shmget.argtypes = (ctypes.c_int, ctypes.c_size_t, ctypes.c_int)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_libc.shmdt.argtypes = (ctypes.c_void_p,)
_libc.shmctl.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


def _out(msg: str) -> None:
    sys.stdout.write(msg)
    sys.stdout.flush()


# --------------------------------------------------------------------------- --odp
def check_odp_transport_caps(p: P.Params, caps: int) -> bool:
    conn = P.CONN_STR[p.connection_type]
    if p.verb == P.SEND and not p.duplex and p.machine == P.CLIENT:
        if not caps & IBV_ODP_SUPPORT_SEND:
            _err(f" ODP Send is not supported for {conn} transport.\n")
            return False
    elif p.verb == P.SEND and not p.duplex and p.machine == P.SERVER:
        if not caps & (IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV):
            _err(f" ODP Recv is not supported for {conn} transport.\n")
            return False
    elif p.verb == P.SEND and p.duplex:
        if not (caps & IBV_ODP_SUPPORT_SEND and caps & (IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV)):
            _err(f" ODP bidirectional Send is not supported for {conn} transport.\n")
            return False
    elif p.verb in (P.WRITE, P.WRITE_IMM) and not caps & IBV_ODP_SUPPORT_WRITE:
        _err(f" ODP Write is not supported for {conn} transport.\n")
        return False
    elif p.verb == P.READ and not caps & IBV_ODP_SUPPORT_READ:
        _err(f" ODP Read is not supported for {conn} transport.\n")
        return False
    elif p.verb == P.ATOMIC and not caps & IBV_ODP_SUPPORT_ATOMIC:
        _err(f" ODP Atomics are not supported for {conn} transport.\n")
        return False
    return True


def check_odp_support(ctx, p: P.Params) -> bool:
    try:
        attr = ctx.query_device_ex()
    except PyverbsError:
        _err(" Couldn't query device for On-Demand Paging capabilities.\n")
        return False
    caps = attr.odp_caps
    if not caps.general_caps & IBV_ODP_SUPPORT:          # (set by the device for this process: device.odp)
        _err(" The device does not support On-Demand Paging.\n")
        return False
    if p.connection_type == P.RC:
        return check_odp_transport_caps(p, caps.rc_odp_caps)
    if p.connection_type == P.UC:
        _err(" ODP is not available on UC transport.\n")
        return False
    return True          # UD: perftest does not check its caps (devices register them as off)


# --------------------------------------------------------------------------- the buffer
class Buffer:
    """Memory of the process an MR is registered on: ``address``,
    ``length``, and how it goes (``close``)."""

    def __init__(self, address: int, length: int, kind: str):
        self.address = address
        self.length = length
        self.kind = kind                 # "shm" (huge pages) or "mmap"

    def close(self) -> None:
        if self.address is None:
            return
        if self.kind == "shm":
            _libc.shmdt(self.address)
        else:
            _libc.munmap(self.address, self.length)
        self.address = None


def alloc_hugepage_region(size: int) -> Buffer | None:
    """host_memory.c's alloc_hugepage_region: a private segment of 2 MiB
    pages, marked for removal once attached (it goes with the process)."""
    buf_size = (size + HUGEPAGE_SIZE_2MB - 1) & ~(HUGEPAGE_SIZE_2MB - 1)
    shmid = _libc.shmget(IPC_PRIVATE, buf_size, SHM_HUGETLB | IPC_CREAT | SHM_R | SHM_W)
    if shmid < 0:
        _err("Failed to allocate hugepages. Please configure hugepages\n")
        return None
    addr = _libc.shmat(shmid, None, 0)
    if addr is None or addr == MAP_FAILED:
        _err("Failed to attach shared memory region\n")
        return None
    buf = Buffer(addr, size, "shm")
    if _libc.shmctl(shmid, IPC_RMID, None) != 0:
        _err("Failed to mark shm for removal\n")
        buf.close()
        return None
    ctypes.memset(addr, 0, size)             # (host_memory_allocate_buffer's memset)
    return buf


def init_mmap(size: int, fname: str, offset: int) -> Buffer | None:
    """mmap_memory.c's init_mmap: the file, read-write and shared, at
    ``offset`` (its messages on stdout, as perftest's printf)."""
    try:
        fd = os.open(fname, os.O_RDWR)
    except OSError as e:
        _out(f"Unable to open '{fname}': {os.strerror(e.errno)}\n")
        return None
    addr = _libc.mmap(None, size, PROT_WRITE | PROT_READ, MAP_SHARED, fd, offset)
    err = ctypes.get_errno()
    os.close(fd)
    if addr is None or addr == MAP_FAILED:
        _out(f"Unable to mmap '{fname}': {os.strerror(err or errno.EINVAL)}\n")
        return None
    _out(f"allocated mmap buffer of size {size} at {addr:#x}\n")
    return Buffer(addr, size, "mmap")


def allocate(p: P.Params, size: int) -> Buffer | None | bool:
    """The buffer of one MR: a ``Buffer``, None for the library's own
    memory (host memory without --use_hugepages), or False when it could
    not be had (perftest's messages printed)."""
    if p.mmap_file is not None:
        buf = init_mmap(size, p.mmap_file, p.mmap_offset)
        if buf is None:
            _err("Couldn't allocate work buf.\n")
            return False
        return buf
    if p.use_hugepages:
        buf = alloc_hugepage_region(size)
        if buf is None:
            _err("Failed to allocate hugepage region.\n")
            return False
        return buf
    return None
