"""uapi.shm: a ring inside a memfd at an offset (a parent domain's queue
in a hugetlb backing shared with other rings): its fd's file offset says
where, the peer maps the pages around it, and a hugetlbfs memfd is mapped
in whole huge pages."""

from __future__ import annotations

import fcntl
import mmap
import os

import pytest

from hugepage_helpers import huge_pages  # noqa: F401 (a fixture)
from softrdma.uapi.shm import HEADER_BYTES, MAGIC, Ring, SharedRegion

PAGE = mmap.PAGESIZE


def _memfd(size, flags=0):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | flags)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def _reopen(fd):
    return os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)


def test_rings_at_offsets_of_one_memfd_seen_by_the_peer():
    fd = _memfd(16 * PAGE)
    a = Ring.create_at(_reopen(fd), 0, 4, 64)
    b = Ring.create_at(_reopen(fd), 3 * PAGE, 5, 32)          # 8 slots
    assert (b.nslots, b.slot_size, b.region.size) == (8, 32, HEADER_BYTES + 8 * 32)
    assert os.pread(fd, 4, 3 * PAGE) == MAGIC.to_bytes(4, "little")
    peer_a, peer_b = Ring.map_fd(a.fd), Ring.map_fd(b.fd)     # (the daemon's side)
    assert (peer_a.nslots, peer_b.nslots) == (4, 8)
    b.slot(1)[:4] = b"abcd"
    b.producer = 2
    assert bytes(peer_b.slot(1)[:4]) == b"abcd" and peer_b.pending() == 2 and peer_a.pending() == 0
    assert os.pread(fd, 4, 3 * PAGE + HEADER_BYTES + 32) == b"abcd"
    for r in (peer_a, peer_b, a, b):
        r.close()
    os.close(fd)


def test_a_ring_at_an_offset_is_zeroed_and_bounded_by_the_file():
    fd = _memfd(4 * PAGE)
    os.pwrite(fd, b"\xff" * (4 * PAGE), 0)
    r = Ring.create_at(_reopen(fd), PAGE + 128, 2, 64)
    assert bytes(r.buf[HEADER_BYTES:]) == bytes(128) and os.pread(fd, 1, PAGE + 127) == b"\xff"
    assert r.region.address % PAGE == 128
    r.close()
    far = _reopen(fd)
    os.lseek(far, 4 * PAGE - 16, os.SEEK_SET)              # a header past the file's end
    with pytest.raises(ValueError, match="bytes,"):
        Ring.map_fd(far)
    os.close(far), os.close(fd)


def test_hugetlb_memfd_maps_whole_huge_pages(huge_pages):
    fd = _memfd(huge_pages, os.MFD_HUGETLB)
    region = SharedRegion.map_fd(fd, 4096, 8192)
    assert len(region.mm) == huge_pages and region.offset == 8192 and len(region.view) == 4096
    region.view[:3] = b"xyz"
    assert os.pread(fd, 3, 8192) == b"xyz"
    region.close(), os.close(fd)
