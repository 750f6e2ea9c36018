"""MRs in huge pages, end to end through a softrdmad: IBV_ACCESS_HUGETLB
(pyverbs maps the MR's buffer with MAP_HUGETLB -- pinned, the library's
hugetlb memfd the daemon maps; ODP, the process's own huge pages), and
MRs registered by address on a caller's MAP_HUGETLB buffer, pinned and
ODP, each moving RDMA WRITEs, READs and SENDs; no huge pages left is
pyverbs' "Failed to allocate MR buffer" error."""

from __future__ import annotations

import ctypes
import os

import pytest

from daemon_helpers import daemon_in_shm
from hugepage_helpers import HUGE, NR_HUGEPAGES, huge_pages  # noqa: F401 (a fixture)
from rc_pair import ACC, RcPair
from softrdma.pyverbs import enums as e
from softrdma.pyverbs import mem_alloc as mem
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pyverbs_error import PyverbsError
from softrdma.pyverbs.wr import SGE, SendWR
from softrdma.verbs import pd as vpd


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("mrhuge") as d:
        yield d.run_dir


@pytest.fixture
def pair(run_dir, monkeypatch, huge_pages):
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    with Context(name="rxe0") as c:
        p = RcPair(c, depth=8)
        yield p
        p.close()


def _page_size(addr: int) -> int:
    return vpd._vma_of(addr)[2]


def _traffic(p: RcPair, mr: MR) -> None:
    """``mr`` as the responder's buffer (b's): RDMA WRITE into it, READ
    back from it, a SEND received into it; its bytes checked in place."""
    data = os.urandom(4096)
    p.ma.write(data, 4096, 0)
    p.mb.close()
    p.mb = mr
    p.write(1, 4096)
    assert mr.read(4096, 0) == data and ctypes.string_at(mr.buf, 4096) == data
    ctypes.memmove(mr.buf + 8192, b"\x77" * 1000, 1000)       # the caller's store, seen by READ
    w = p.ma.buf, p.ma.lkey
    rd = SendWR(9, e.IBV_WR_RDMA_READ, 1, sg=[SGE(w[0], 1000, w[1])])
    rd.set_wr_rdma(mr.rkey, mr.buf + 8192)
    p.a.post_send(rd)
    p._ok(p.cqa, 1)
    assert p.ma.read(1000, 0) == b"\x77" * 1000
    p.ma.write(b"\x42" * 512, 512, 0)
    p.send(1, 512)
    assert ctypes.string_at(mr.buf, 512) == b"\x42" * 512


@pytest.mark.parametrize("odp", [0, e.IBV_ACCESS_ON_DEMAND], ids=["pinned", "odp"])
def test_access_hugetlb_mr_lives_in_huge_pages(pair, odp):
    mr = MR(pair.pd, 3 * 4096, ACC | e.IBV_ACCESS_HUGETLB | odp)
    assert _page_size(mr.buf) == HUGE and mr.buf % HUGE == 0
    _traffic(pair, mr)
    mr.close()


@pytest.mark.parametrize("odp", [0, e.IBV_ACCESS_ON_DEMAND], ids=["pinned", "odp"])
def test_mr_by_address_on_a_map_hugetlb_buffer(pair, odp):
    base = mem.mmap(length=HUGE, flags=mem.MAP_ANONYMOUS_ | mem.MAP_PRIVATE_ | mem.MAP_HUGETLB_)
    try:
        assert _page_size(base) == HUGE
        mr = MR(pair.pd, HUGE, ACC | odp, address=base)
        assert mr.buf == base
        _traffic(pair, mr)
        mr.close()
        assert _page_size(base) == HUGE                    # still the caller's private huge pages
    finally:
        mem.munmap(base, HUGE)


@pytest.mark.parametrize("odp", [0, e.IBV_ACCESS_ON_DEMAND], ids=["pinned", "odp"])
def test_access_hugetlb_without_free_huge_pages(pair, odp):
    with open(NR_HUGEPAGES) as f:
        pool = f.read()
    try:
        with open(NR_HUGEPAGES, "w") as f:
            f.write("0")
        with pytest.raises(PyverbsError) as ex:
            MR(pair.pd, 4096, ACC | e.IBV_ACCESS_HUGETLB | odp)
    finally:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(pool)
    assert str(ex.value) == "Failed to allocate MR buffer of size 4096"
