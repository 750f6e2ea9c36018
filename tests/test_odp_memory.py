"""ODP memory without the daemon's loop: the transport's paged views
(``transport.odp``) over a pure page source, and the daemon's source
(``device.odp.ProcessPages``) over a real child process's pages --
reads, writes, the read-modify-write of an atomic, fault-in of unmapped
and read-only pages, MR bounds and keys through the MR table, and the
permission check for a process the daemon may not reach."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
import textwrap

import pytest

from softrdma.device.odp import ProcessPages, may_access
from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_REMOTE_ATOMIC, \
    IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE
from softrdma.transport.memory import LOCAL_WRITE, REMOTE_ATOMIC, REMOTE_READ, REMOTE_WRITE, MemoryTable
from softrdma.transport.odp import PAGE, BytesPages, PagedSpace, PagedView, sub_view
from softrdma.transport.sgl import gather, scatter

ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC \
    | IBV_ACCESS_ON_DEMAND

# a child process with three pages: rw, then an unmapped hole, then read-only
CHILD = textwrap.dedent("""
    import ctypes, mmap, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    P = mmap.PAGESIZE
    base = libc.mmap(None, 4 * P, 3, 0x22, -1, 0)      # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    ctypes.memmove(base, b"hello odp", 9)
    ctypes.memmove(base + P, (7).to_bytes(8, "little"), 8)
    libc.munmap(ctypes.c_void_p(base + 2 * P), P)      # a hole
    libc.mprotect(ctypes.c_void_p(base + 3 * P), P, 1)  # read-only
    print(base, flush=True)
    cmd = sys.stdin.readline()                           # 'dump\\n': print the first 2 pages' head
    print(ctypes.string_at(base, 16).hex(), ctypes.string_at(base + P, 8).hex(), flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def child():
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base = int(p.stdout.readline())
        yield p, base
    finally:
        p.kill()
        p.wait()


def _dump(p) -> tuple[bytes, bytes]:
    p.stdin.write("dump\n")
    p.stdin.flush()
    a, b = p.stdout.readline().split()
    return bytes.fromhex(a), bytes.fromhex(b)


# ------------------------------------------------------------------ pure
def test_paged_views_read_write_and_slice_like_memoryviews():
    src = BytesPages(4 * PAGE, base=0x10000)
    src.buf[0:5] = b"hello"
    space = PagedSpace(src, 0x10000, 4 * PAGE)
    v = space[0:PAGE + 10]
    assert isinstance(v, PagedView) and len(v) == PAGE + 10
    assert v[0:5] == b"hello" and bytes(space[1:3]) == b"el"
    v[PAGE:PAGE + 4] = memoryview(b"abcd")
    assert src.buf[PAGE:PAGE + 4] == b"abcd"
    # the engines' copies: gather from a paged view, scatter into one
    out = bytearray(8)
    gather([v], 0, 5, out, 3)
    assert out == b"\0\0\0hello"
    scatter([v], 2, b"XYZ", 0, 3)
    assert src.buf[0:6] == b"heXYZ\0"
    assert int.from_bytes(space[0:8], "little") == int.from_bytes(bytes(src.buf[0:8]), "little")
    with pytest.raises(ValueError):
        v[0:2] = b"abc"


def test_a_range_with_an_unmapped_page_faults_to_none_and_a_window_does_not_fault():
    src = BytesPages(4 * PAGE, base=0x10000, mapped=[0x10000, 0x11000, 0x13000])
    space = PagedSpace(src, 0x10000, 4 * PAGE)
    assert space[0:2 * PAGE] is not None
    assert space[PAGE:2 * PAGE + 1] is None                     # touches the hole
    assert space[3 * PAGE:3 * PAGE + 8] is not None
    before = src.faults
    w = sub_view(space, 2 * PAGE, PAGE)                         # a window over the hole: no fault yet
    assert src.faults == before and isinstance(w, PagedSpace)
    assert w[0:8] is None
    assert sub_view(memoryview(bytearray(8)), 2, 4).nbytes == 4


def test_a_store_refused_after_the_fault_in_is_counted_not_raised():
    src = BytesPages(2 * PAGE, base=0x10000, readonly=[0x11000])
    v = PagedSpace(src, 0x10000, 2 * PAGE)[PAGE:PAGE + 8]
    v[0:8] = b"12345678"
    assert src.lost == 1 and src.buf[PAGE:PAGE + 8] == bytes(8)


def test_memory_table_checks_keys_pd_access_and_bounds_before_faulting():
    src = BytesPages(2 * PAGE, base=0x10000)
    t = MemoryTable(rng=__import__("random").Random(1))
    pd, other = object(), object()
    mr = t.register(pd, 0x10000, 2 * PAGE, ACC, view=PagedSpace(src, 0x10000, 2 * PAGE))
    assert mr.buf is None
    faults = src.faults
    assert t.remote_view(other, mr.rkey, 0x10000, 8, REMOTE_WRITE) is None
    assert t.remote_view(pd, mr.rkey ^ 1, 0x10000, 8, REMOTE_WRITE) is None
    assert t.remote_view(pd, mr.rkey, 0x10000 + 2 * PAGE - 4, 8, REMOTE_READ) is None
    assert src.faults == faults                                  # refused before any fault
    v = t.local_view(pd, mr.lkey, 0x10000 + 8, 8, LOCAL_WRITE)
    v[0:8] = (5).to_bytes(8, "little")
    assert mr.read(8, 8) == (5).to_bytes(8, "little")
    ro = t.register(pd, 0x10000, PAGE, IBV_ACCESS_ON_DEMAND, view=PagedSpace(src, 0x10000, PAGE))
    assert t.remote_view(pd, ro.rkey, 0x10000, 8, REMOTE_ATOMIC) is None
    # an implicit MR: the whole address space, any address
    imp = t.register(pd, 0, (1 << 64) - 1, ACC, view=PagedSpace(src, 0, (1 << 64) - 1))
    assert bytes(t.local_view(pd, imp.lkey, 0x10008, 8, 0)) == (5).to_bytes(8, "little")
    assert t.remote_view(pd, imp.rkey, 0x90000, 8, REMOTE_READ) is None      # outside the process's pages


# ------------------------------------------------- a real process's pages
def test_process_pages_read_write_fault_and_protection(child):
    p, base = child
    pp = ProcessPages(p.pid)
    assert pp.read(base, 9) == b"hello odp"
    assert pp.write(base + 6, b"ODP")
    assert pp.fault(base, 2 * PAGE, False) and pp.fault(base, 2 * PAGE, True)
    assert not pp.fault(base + PAGE, PAGE + 1, False)            # into the hole
    assert pp.fault(base + 3 * PAGE, 8, False)                   # read-only: readable ...
    assert not pp.fault(base + 3 * PAGE, 8, True)                # ... not writable
    assert not pp.write(base + 3 * PAGE, b"x")
    assert pp.read(base + 2 * PAGE, 1) is None
    assert pp.prefetch(base, PAGE, True, True) == 0
    assert pp.prefetch(base + 2 * PAGE, 8, False, True) == errno.EFAULT
    assert pp.prefetch(base + 2 * PAGE, 8, False, False) == 0    # NO_FAULT: a snapshot, nothing to fail
    assert pp.prefetch(base + 3 * PAGE, 8, True, True) == errno.EFAULT
    head, _ = _dump(p)
    assert head[:9] == b"hello ODP"


def test_atomic_read_modify_write_on_a_process_page(child):
    p, base = child
    pp = ProcessPages(p.pid)
    t = MemoryTable()
    pd = object()
    mr = t.register(pd, base, 2 * PAGE, ACC, view=PagedSpace(pp, base, 2 * PAGE))
    view = t.remote_view(pd, mr.rkey, base + PAGE, 8, REMOTE_ATOMIC)
    orig = int.from_bytes(view, "little")                       # what the responder's atomic does
    view[0:8] = (orig + 35).to_bytes(8, "little")
    assert orig == 7
    _, word = _dump(p)
    assert int.from_bytes(word, "little") == 42


def test_many_pages_fault_in_more_than_iov_max_at_once():
    n = 1500
    buf = ctypes.create_string_buffer(n * PAGE + PAGE)
    addr = -(-ctypes.addressof(buf) // PAGE) * PAGE
    pp = ProcessPages(os.getpid())
    assert pp.fault(addr, n * PAGE - 1, True)
    assert pp.read(addr + (n - 1) * PAGE, 4) == bytes(4)


def test_may_access_self_and_refusals():
    assert may_access(os.getpid()) == 0
    assert may_access(0x3FFFFFFF) == errno.ESRCH
    # a process of another user may not read ours (no CAP_SYS_PTRACE)
    code = ("import os, sys; sys.path[:0] = %r; from softrdma.device.odp import may_access;"
            "os.setgid(65534); os.setuid(65534); print(may_access(%d))" % (sys.path, os.getpid()))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if out.returncode and "Operation not permitted" in out.stderr:
        pytest.skip("cannot change user here")
    assert int(out.stdout) == errno.EPERM, out.stderr
