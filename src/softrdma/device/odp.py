"""An application's own memory, reached from the daemon: the pages behind
ODP MRs and MRs on memory the application supplied.

The kernel's ODP lets the device fault the process's pages in on access
(hmm_range_fault), with nothing pinned.  The daemon's analogue is the
process's own address space through process_vm_readv / process_vm_writev
on its pid (SO_PEERCRED): the kernel faults the pages in for the copy, as
it would for the process, and an address the process has not mapped fails
with EFAULT.  ``ProcessPages`` is that source for ``transport.odp``
(``fault``, ``read``, ``write``); ``prefetch`` is ibv_advise_mr's work;
``may_access`` is the permission check the kernel makes of those calls
(PTRACE_MODE_ATTACH_REALCREDS: same uid or CAP_SYS_PTRACE, and Yama's
ptrace_scope), so that a process the daemon may not reach is told at once
that the device has no ODP, rather than failing later.

os has no wrapper for these calls: they go through ctypes on libc, with
iovec arrays -- a fault-in touches one byte per page in one call (up to
IOV_MAX pages a call).
"""

from __future__ import annotations

import ctypes
import errno

from ..transport.odp import PAGE, pages_of


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = _libc.process_vm_readv
_writev = _libc.process_vm_writev
for _f in (_readv, _writev):
    _f.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                   ctypes.c_ulong]
    _f.restype = ctypes.c_ssize_t

IOV_MAX = 1024


def may_access(pid: int) -> int:
    """0 if the daemon may read and write ``pid``'s memory, else the errno
    (EPERM: another user without CAP_SYS_PTRACE, or Yama; ESRCH: gone).
    The kernel checks the permission before it touches an address, so one
    byte at address 0 -- never mapped -- answers EFAULT when it is given."""
    local = (ctypes.c_char * 1)()
    li = _Iovec(ctypes.cast(local, ctypes.c_void_p), 1)
    ri = _Iovec(None, 1)
    if _readv(pid, ctypes.byref(li), 1, ctypes.byref(ri), 1, 0) >= 0:
        return 0
    err = ctypes.get_errno()
    return 0 if err == errno.EFAULT else err


class ProcessPages:
    """The memory of process ``pid``, a ``transport.odp.Pages`` source."""

    def __init__(self, pid: int):
        self.pid = pid
        self.lost = 0                   # loads/stores refused after the fault-in (see transport.odp)
        self.faults = 0                 # fault-ins (one per access resolved), ODP's page-fault count
        self._local = self._remote = None   # the fault-in's iovec arrays, made on first use

    def _iovecs(self):
        self._scratch = (ctypes.c_char * IOV_MAX)()
        self._local = (_Iovec * IOV_MAX)()
        self._remote = (_Iovec * IOV_MAX)()
        base = ctypes.addressof(self._scratch)
        for i in range(IOV_MAX):        # each page's byte lands in its own scratch byte
            self._local[i].iov_base = base + i
            self._local[i].iov_len = 1

    # -- transport.odp.Pages
    def fault(self, addr: int, length: int, write: bool) -> bool:
        """Fault ``[addr, addr + length)`` in, as the process would reading
        it (one byte of each page, IOV_MAX pages a call); ``write``: the
        pages must also be writable (their mappings' protection, as
        hmm_range_fault with write faults checks the VMA)."""
        self.faults += 1
        pages = pages_of(addr, length)
        if self._remote is None:
            self._iovecs()
        remote = self._remote
        for start in range(0, len(pages), IOV_MAX):
            chunk = pages[start:start + IOV_MAX]
            for i, p in enumerate(chunk):
                remote[i].iov_base = max(p, addr)
                remote[i].iov_len = 1
            n = len(chunk)
            if _readv(self.pid, self._local, n, remote, n, 0) != n:
                return False
        return not write or self.writable(addr, length)

    def read(self, addr: int, length: int) -> bytes | None:
        buf = ctypes.create_string_buffer(length)
        li = _Iovec(ctypes.cast(buf, ctypes.c_void_p), length)
        ri = _Iovec(addr, length)
        if _readv(self.pid, ctypes.byref(li), 1, ctypes.byref(ri), 1, 0) != length:
            return None
        return buf.raw

    def write(self, addr: int, data) -> bool:
        n = len(data)
        if isinstance(data, bytes):
            src = ctypes.c_char_p(data)
            li = _Iovec(ctypes.cast(src, ctypes.c_void_p), n)
        else:
            c = (ctypes.c_char * n).from_buffer_copy(data)
            li = _Iovec(ctypes.addressof(c), n)
        ri = _Iovec(addr, n)
        return _writev(self.pid, ctypes.byref(li), 1, ctypes.byref(ri), 1, 0) == n

    # -- the mappings
    def writable(self, addr: int, length: int) -> bool:
        """Every page of the range lies in a writable mapping of the
        process (/proc/PID/maps)."""
        end = addr + length
        at = addr
        try:
            with open(f"/proc/{self.pid}/maps") as f:
                spans = []
                for line in f:
                    rng, perms = line.split(None, 2)[:2]
                    lo, hi = (int(x, 16) for x in rng.split("-"))
                    if hi > addr and lo < end:
                        spans.append((lo, hi, "w" in perms))
        except (OSError, ValueError):
            return False
        for lo, hi, w in sorted(spans):
            if lo > at or not w:
                return False
            at = hi
            if at >= end:
                return True
        return at >= end

    def prefetch(self, addr: int, length: int, write: bool, fault: bool) -> int:
        """ibv_advise_mr's work on one range: 0 or the errno.  PREFETCH
        faults the pages in for reading, PREFETCH_WRITE also needs them
        writable; PREFETCH_NO_FAULT (``fault`` False) only takes what is
        there: a snapshot, nothing to fail (RXE_PAGEFAULT_SNAPSHOT)."""
        if not fault or not length:
            return 0
        return 0 if self.fault(addr, length, write) else errno.EFAULT


__all__ = ["ProcessPages", "may_access", "PAGE", "IOV_MAX"]
